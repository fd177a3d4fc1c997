//! The way out of an [`allow`](super::Network::allow) namespace: an HTTP
//! proxy (`CONNECT` and absolute-form requests) and, for destinations on
//! the host's loopback, plain TCP forwarders. Their listening sockets are
//! opened inside the agent's namespace by the starting thread; the tasks
//! serving them run on the embedding runtime, in the host's namespace, so
//! the connections they open go out from there.
//!
//! Every request on a client connection is parsed (httparse) and judged on
//! its own: a kept-alive connection's later requests are checked against
//! the policy and rewritten (origin-form, no `Proxy-*` headers) like the
//! first, and their bodies framed so the next head is found where it
//! starts (`proxy/http.rs`). Requests to one destination share one
//! upstream connection; the answers reach the client in order.

use std::net::{IpAddr, SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, warn};

use self::credentials::intercept;
use self::http::{Ask, Input, Request};
use super::vault::Armed;
use super::Destination;

mod credentials;
mod http;

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to an admitted destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections served at once, per run.
const MAX_CONNECTIONS: usize = 256;
/// Refusals noted one by one in the log, per run; later ones are counted.
const NOTED_REFUSALS: u64 = 32;

/// The listening sockets of one run, opened inside its namespace.
#[derive(Debug)]
pub(crate) struct Listeners {
    proxy: StdListener,
    forwarders: Vec<(SocketAddr, StdListener)>,
    /// Forwarders that could not listen, and why.
    pub(crate) skipped: Vec<String>,
}

/// Opens the proxy's socket (`127.0.0.1`, any port) and one forwarder per
/// loopback address of `allow`, in the calling thread's namespace.
pub(crate) fn bind(allow: &[Destination]) -> std::io::Result<Listeners> {
    let proxy = StdListener::bind((IpAddr::from([127, 0, 0, 1]), 0))?;
    proxy.set_nonblocking(true)?;
    let mut forwarders = Vec::new();
    let mut skipped = Vec::new();
    for dest in allow {
        for ip in dest.loopback_addrs() {
            let addr = SocketAddr::new(ip, dest.port());
            if forwarders.iter().any(|(a, _)| *a == addr) {
                continue;
            }
            match StdListener::bind(addr) {
                Ok(l) => {
                    l.set_nonblocking(true)?;
                    forwarders.push((addr, l));
                }
                // `::1` where the namespace has no IPv6 (as for `localhost`
                // on such a host) is expected; anything else is noted.
                Err(e) if ip.is_ipv6() => debug!(%addr, error = %e, "no forwarder"),
                Err(e) => skipped.push(format!("{addr} ({e})")),
            }
        }
    }
    Ok(Listeners {
        proxy,
        forwarders,
        skipped,
    })
}

/// What the proxy and forwarders of one run did.
#[derive(Debug, Default)]
struct Stats {
    admitted: AtomicU64,
    refused: AtomicU64,
    forwarded: AtomicU64,
    failed: AtomicU64,
    /// Connections dropped past [`MAX_CONNECTIONS`].
    dropped: AtomicU64,
}

/// The running proxy and forwarders of one run; dropping it stops them and
/// closes every connection they hold.
#[derive(Debug)]
pub(crate) struct Egress {
    tasks: Vec<JoinHandle<()>>,
    stats: Arc<Stats>,
    proxy_url: String,
    policy: String,
}

impl Egress {
    /// Serves `listeners` on the current runtime, admitting `allow`;
    /// refusals go to `notes` (never waited on: a full channel drops them,
    /// the summary still counts them).
    pub(crate) fn start(
        listeners: Listeners,
        allow: &[Destination],
        notes: mpsc::Sender<String>,
        vault: Option<Arc<Armed>>,
    ) -> std::io::Result<Self> {
        let proxy_addr = listeners.proxy.local_addr()?;
        // Every listener registered before any task starts: an error leaves
        // nothing running.
        let proxy_listener = TcpListener::from_std(listeners.proxy)?;
        let forwarders = listeners
            .forwarders
            .into_iter()
            .map(|(addr, l)| TcpListener::from_std(l).map(|l| (addr, l)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let allow: Arc<[Destination]> = allow.into();
        let policy = super::Network::allow(allow.iter().cloned()).to_string();
        let mut egress = Self {
            tasks: Vec::new(),
            stats: Arc::new(Stats::default()),
            proxy_url: format!("http://{proxy_addr}"),
            policy: policy.clone(),
        };
        let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let proxy = Arc::new(Proxy {
            allow,
            vault,
            notes,
            stats: Arc::clone(&egress.stats),
            policy,
        });
        let stats = Arc::clone(&egress.stats);
        egress.tasks.push(tokio::spawn(serve(
            proxy_listener,
            Arc::clone(&limit),
            Arc::clone(&stats),
            move |conn| {
                let proxy = Arc::clone(&proxy);
                async move { proxy.handle(conn).await }
            },
        )));
        for (addr, listener) in forwarders {
            let counted = Arc::clone(&stats);
            egress.tasks.push(tokio::spawn(serve(
                listener,
                Arc::clone(&limit),
                Arc::clone(&stats),
                move |conn| {
                    let stats = Arc::clone(&counted);
                    async move { forward(conn, addr, &stats).await }
                },
            )));
        }
        Ok(egress)
    }

    /// The proxy's URL inside the namespace (`http://127.0.0.1:PORT`).
    pub(crate) fn proxy_url(&self) -> &str {
        &self.proxy_url
    }

    /// One line for the run's log: the policy and what went through it.
    pub(crate) fn summary(&self) -> String {
        let s = &self.stats;
        let refused = s.refused.load(Ordering::Relaxed);
        let unnoted = refused.saturating_sub(NOTED_REFUSALS);
        let extra = if unnoted > 0 {
            format!(" ({unnoted} not noted one by one)")
        } else {
            String::new()
        };
        let dropped = s.dropped.load(Ordering::Relaxed);
        let dropped = if dropped > 0 {
            format!(", {dropped} dropped past {MAX_CONNECTIONS} at once")
        } else {
            String::new()
        };
        format!(
            "egress {}: {} connection(s) admitted by the proxy, {} refused{extra}, {} forwarded \
             from the namespace's loopback, {} failed to connect{dropped}",
            self.policy,
            s.admitted.load(Ordering::Relaxed),
            refused,
            s.forwarded.load(Ordering::Relaxed),
            s.failed.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Accepts connections on `listener`, each served by `handle` while fewer
/// than the limit are open; the connections end with this task.
async fn serve<F, Fut>(listener: TcpListener, limit: Arc<Semaphore>, stats: Arc<Stats>, handle: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut open = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => {
                    let Ok(permit) = Arc::clone(&limit).try_acquire_owned() else {
                        if stats.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                            warn!(max = MAX_CONNECTIONS, "egress: too many connections at once; dropping the rest");
                        }
                        continue;
                    };
                    let served = handle(conn);
                    open.spawn(async move {
                        served.await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    debug!(error = %e, "egress accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = open.join_next(), if !open.is_empty() => {}
        }
    }
}

/// Copies between a connection inside the namespace and the same address
/// on the host.
async fn forward(mut conn: TcpStream, addr: SocketAddr, stats: &Stats) {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(mut upstream)) => {
            stats.forwarded.fetch_add(1, Ordering::Relaxed);
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
        }
        _ => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Proxy {
    allow: Arc<[Destination]>,
    /// The run's credentials, put on requests to their destinations.
    vault: Option<Arc<Armed>>,
    notes: mpsc::Sender<String>,
    stats: Arc<Stats>,
    policy: String,
}

/// What the half writing to the client does next, in order: so every
/// answer reaches the client after the answers to the requests before it.
enum Back {
    /// Copy an upstream's responses until it closes.
    Responses(OwnedReadHalf),
    /// Confirm a `CONNECT`, then copy the tunnel's way back.
    Established(OwnedReadHalf),
    /// Write the proxy's own answer and close.
    Refusal(Vec<u8>),
    /// Confirm a `CONNECT` the vault intercepts, then hand the client's
    /// writing half over to it.
    Intercept(oneshot::Sender<OwnedWriteHalf>),
}

impl Proxy {
    /// Serves one client connection: each request head is read and judged
    /// in turn ([`requests`](Self::requests)) while the answers are copied
    /// back ([`back`]).
    async fn handle(&self, conn: TcpStream) {
        let (read, write) = conn.into_split();
        let (tx, rx) = mpsc::channel(4);
        tokio::join!(self.requests(Input::new(read), tx), back(write, rx));
    }

    /// Every request on the connection: parsed, judged against the policy,
    /// rewritten and sent to its destination, body and all. A request to
    /// the destination of the one before it goes on the same upstream
    /// connection; one to another destination ends that connection (its
    /// answers still come back first) and opens a new one. The first head
    /// must come within [`HEAD_TIMEOUT`]; later ones may take as long as
    /// the client keeps the connection open.
    async fn requests(&self, mut input: Input<OwnedReadHalf>, back: mpsc::Sender<Back>) {
        let mut upstream: Option<(Destination, OwnedWriteHalf)> = None;
        let mut first = true;
        loop {
            let head = match first {
                true => tokio::time::timeout(HEAD_TIMEOUT, input.head()).await,
                false => Ok(input.head().await),
            };
            first = false;
            let Ok(Ok(Some(head))) = head else { break };
            let request = match self.judge(&head) {
                Ok(r) => r,
                Err(answer) => {
                    let _ = back.send(Back::Refusal(answer)).await;
                    break;
                }
            };
            if let Some(vault) = self.intercepted(&request) {
                if let Some((_, mut to)) = upstream.take() {
                    let _ = to.shutdown().await;
                }
                return intercept(vault, input, &back, request.dest).await;
            }
            let same = matches!(request.ask, Ask::Forward { .. })
                && upstream.as_ref().is_some_and(|(d, _)| *d == request.dest);
            let mut to = match upstream.take() {
                Some((_, to)) if same => to,
                earlier => {
                    if let Some((_, mut to)) = earlier {
                        let _ = to.shutdown().await;
                    }
                    match self.connect(&request, &back).await {
                        Some(to) => to,
                        None => break,
                    }
                }
            };
            match request.ask {
                Ask::Forward {
                    head,
                    body,
                    upgrade: false,
                } => {
                    let sent = to.write_all(&head).await;
                    if sent.is_err() || input.body(body, &mut to).await.is_err() {
                        break;
                    }
                    upstream = Some((request.dest, to));
                }
                Ask::Forward { head, .. } => {
                    if to.write_all(&head).await.is_ok() {
                        let _ = input.rest(&mut to).await;
                    }
                    let _ = to.shutdown().await;
                    return;
                }
                Ask::Connect => {
                    let _ = input.rest(&mut to).await;
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
        if let Some((_, mut to)) = upstream {
            let _ = to.shutdown().await;
        }
    }

    /// One request head, parsed, judged against the policy and given its
    /// credential; the answer refusing it (a refusal noted) otherwise.
    fn judge(&self, head: &[u8]) -> Result<Request, Vec<u8>> {
        let request = Request::parse(head).map_err(|why| {
            self.refused(&format!("a request the proxy does not take ({why})"));
            refusal("400 Bad Request", why)
        })?;
        if !self.allow.iter().any(|d| d.admits(&request.dest)) {
            let what = format!("{} {}", request.method, request.dest);
            self.refused(&format!("{what} is not allowed by the network policy"));
            return Err(refusal(
                "403 Forbidden",
                "korvus egress: destination not allowed",
            ));
        }
        self.with_credential(request).map_err(|why| {
            self.refused(why);
            refusal("403 Forbidden", why)
        })
    }

    /// Connects to the request's destination and hands its way back to
    /// [`back`]; `None` when that failed (and the client is told).
    async fn connect(
        &self,
        request: &Request,
        back: &mpsc::Sender<Back>,
    ) -> Option<OwnedWriteHalf> {
        let target = (request.dest.host().to_owned(), request.dest.port());
        let Ok(Ok(upstream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await
        else {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            let why = "korvus egress: connect failed";
            let _ = back
                .send(Back::Refusal(refusal("502 Bad Gateway", why)))
                .await;
            return None;
        };
        self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        let (from, to) = upstream.into_split();
        let way_back = match request.ask {
            Ask::Connect => Back::Established(from),
            Ask::Forward { .. } => Back::Responses(from),
        };
        back.send(way_back).await.ok().map(|()| to)
    }

    /// Counts a refusal; the first [`NOTED_REFUSALS`] are logged and noted.
    fn refused(&self, what: &str) {
        let n = self.stats.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= NOTED_REFUSALS {
            warn!(refused = %what, "egress refused");
            let _ = self
                .notes
                .try_send(format!("egress refused: {what} ({})", self.policy));
        }
    }
}

/// The half writing to the client: each [`Back`] in turn, then the close.
async fn back(mut client: OwnedWriteHalf, mut next: mpsc::Receiver<Back>) {
    while let Some(step) = next.recv().await {
        let stop = match step {
            Back::Responses(mut from) => tokio::io::copy(&mut from, &mut client).await.is_err(),
            Back::Established(mut from) => {
                let confirmed = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                confirmed.is_err() || tokio::io::copy(&mut from, &mut client).await.is_err()
            }
            Back::Refusal(text) => {
                let _ = client.write_all(&text).await;
                true
            }
            Back::Intercept(give) => {
                let confirmed = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                if confirmed.is_ok() {
                    let _ = give.send(client);
                }
                return;
            }
        };
        if stop {
            break;
        }
    }
    let _ = client.shutdown().await;
}

/// The proxy's own answer, after which it closes the connection.
fn refusal(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    )
    .into_bytes()
}

#[cfg(test)]
mod socket_tests;
