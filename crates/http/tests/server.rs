//! `Server`: a connection that does not send a whole request head within
//! the header read timeout is closed; whole requests are served.

use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use korvus_http::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves a one-route router with a 1 s head deadline; stops on drop of
/// the returned sender.
async fn serve() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::default().header_read_timeout(Duration::from_secs(1));
    tokio::spawn(server.run(listener, app, async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// Reads until the peer closes (or resets) the connection; what it sent.
async fn read_to_close(stream: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    });
    read.await.ok().map(|()| got)
}

#[tokio::test]
async fn a_half_sent_request_head_is_closed_after_the_timeout() {
    let (addr, _stop) = serve().await;
    let started = Instant::now();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let closed = read_to_close(&mut half, Duration::from_secs(10)).await;
    let took = started.elapsed();
    assert!(closed.is_some(), "still open after 10 s");
    assert!(
        took >= Duration::from_millis(900),
        "closed too early: {took:?}"
    );
    assert!(took < Duration::from_secs(5), "closed late: {took:?}");

    // A whole request is answered, and a kept-alive connection that sends
    // nothing more is closed by the same deadline.
    let mut whole = TcpStream::connect(addr).await.unwrap();
    whole
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut whole, Duration::from_secs(10))
        .await
        .expect("closed after the answer");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
}

#[tokio::test]
async fn run_returns_once_shutdown_completes() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let run = Server::default().run(listener, Router::new(), async {});
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("returns");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}
