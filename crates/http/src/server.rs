//! [`Server`]: serves a router over HTTP/1.1 the way `korvus serve` does,
//! with a deadline on every request head.
//!
//! `axum::serve` sets no timer on its connections, so a client that sends
//! half a request head holds its connection (a task and a descriptor)
//! for as long as it likes. [`Server`] serves each connection with hyper's
//! HTTP/1 builder, a tokio timer and a header read timeout: a connection
//! that has not sent a whole request head within it — a new one, or a
//! kept-alive one between requests — is closed. And a head it cannot take
//! (too long, too large, malformed) is answered with the JSON error body
//! like every other error, not with hyper's empty one (`gate.rs`).

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::gate::Gate;

/// How long a client has to send a whole request head, by default.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long to wait after an accept error that is not a connection's own
/// (out of descriptors, say) before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// An HTTP/1.1 server for a router, with a request-head deadline.
///
/// ```no_run
/// # async fn f(app: axum::Router) -> std::io::Result<()> {
/// use std::time::Duration;
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// korvus_http::Server::default()
///     .header_read_timeout(Duration::from_secs(10))
///     .run(listener, app, std::future::pending())
///     .await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    header_read_timeout: Duration,
}

impl Default for Server {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
        }
    }
}

impl Server {
    /// How long a client has to send a whole request head (default
    /// [`DEFAULT_HEADER_READ_TIMEOUT`]); then its connection is closed.
    /// The clock starts when the server waits for a head: on a new
    /// connection, and on a kept-alive one after each response. A zero
    /// duration is taken as one millisecond.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Serves `app` on `listener` until `shutdown` completes; then stops
    /// accepting, lets the requests in progress finish (idle connections
    /// are closed at once) and returns.
    ///
    /// Accept errors are not fatal: one that concerns a single connection
    /// is skipped, any other (out of descriptors, say) is logged and
    /// accepting resumes a second later.
    ///
    /// # Cancel safety
    /// Dropping the future closes every connection at once (their tasks
    /// are aborted): it is the hard stop after a graceful one took too
    /// long.
    pub async fn run<F>(self, listener: TcpListener, app: Router, shutdown: F)
    where
        F: Future<Output = ()> + Send,
    {
        let mut builder = http1::Builder::new();
        // Half-close: a refused head reads as the end of the stream, and
        // the responses in progress still finish (see `gate.rs`).
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .half_close(true);
        let graceful = GracefulShutdown::new();
        let mut connections = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                () = &mut shutdown => break,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            };
            let app = app.clone();
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                tower::ServiceExt::oneshot(app.clone(), request.map(Body::new))
            });
            let connection =
                graceful.watch(builder.serve_connection(TokioIo::new(Gate::new(stream)), service));
            connections.spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "an HTTP connection ended with an error");
                }
            });
        }
        drop(listener);
        graceful.shutdown().await;
        while connections.join_next().await.is_some() {}
    }
}

async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind;
    let own = matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    );
    if !own {
        tracing::warn!(error = %e, "accepting a connection failed; retrying in a second");
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    }
}
