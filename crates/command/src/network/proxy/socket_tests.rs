//! The proxy on a real socket: every request on a kept-alive connection
//! is judged and rewritten, not only the first.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::{bind, Egress};
use crate::network::Destination;

/// An origin server on 127.0.0.1 that answers every request `200 ok`
/// (keeping the connection) and records the bytes it received.
async fn origin() -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    record.lock().unwrap().extend_from_slice(&chunk[..n]);
                    buf.extend_from_slice(&chunk[..n]);
                    // One answer per whole head with its body.
                    while let Some(used) = whole_request(&buf) {
                        buf.drain(..used);
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if conn.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, seen)
}

/// The length of the first whole request in `buf` (head and
/// `Content-Length` body), if it is all there.
fn whole_request(buf: &[u8]) -> Option<usize> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(head) = request.parse(buf).ok()? else {
        return None;
    };
    let header = |name: &str| {
        let found = request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name));
        found.map(|h| std::str::from_utf8(h.value).unwrap().to_owned())
    };
    if header("transfer-encoding").is_some() {
        // Enough for these tests: the body ends with the trailers' blank line.
        let end = buf[head..].windows(4).position(|w| w == b"\r\n\r\n")?;
        return Some(head + end + 4);
    }
    let body: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
    (buf.len() >= head + body).then_some(head + body)
}

/// The proxy of a run allowing `127.0.0.1:port`, and its address.
fn proxy(port: u16) -> (Egress, String, mpsc::Receiver<String>) {
    let allow = [Destination::new("127.0.0.1", port)];
    let listeners = bind(&allow).unwrap();
    let (notes, noted) = mpsc::channel(16);
    let egress = Egress::start(listeners, &allow, notes, None).unwrap();
    let addr = egress.proxy_url().trim_start_matches("http://").to_owned();
    (egress, addr, noted)
}

/// Reads one response whose body is `Content-Length` long (or up to the
/// end of the stream).
async fn response(conn: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|l| body.len() >= l) {
                return text;
            }
        }
        match within(conn.read(&mut chunk)).await {
            Ok(0) | Err(_) => return text,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// `read` within 10 s, or the test fails: a proxy that stalls a request
/// fails it rather than hanging.
async fn within<T>(read: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("an answer within 10 s")
}

#[tokio::test]
async fn a_later_request_on_a_kept_alive_connection_is_rewritten_too() {
    let (port, seen) = origin().await;
    let (_egress, addr, _noted) = proxy(port);
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let first = format!(
        "GET http://127.0.0.1:{port}/a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Proxy-Authorization: Basic one\r\n\r\n"
    );
    conn.write_all(first.as_bytes()).await.unwrap();
    assert!(response(&mut conn).await.starts_with("HTTP/1.1 200"));
    let body = "{\"q\":1}";
    let second = format!(
        "POST http://127.0.0.1:{port}/b?x=1 HTTP/1.1\r\nHost: elsewhere\r\n\
         Proxy-Authorization: Basic secret\r\nProxy-Connection: keep-alive\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(second.as_bytes()).await.unwrap();
    assert!(response(&mut conn).await.starts_with("HTTP/1.1 200"));
    let seen = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
    assert_eq!(
        seen,
        format!(
            "GET /a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n\
             POST /b?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 7\r\n\r\n{body}"
        )
    );
}

#[tokio::test]
async fn a_later_request_to_a_host_not_allowed_is_refused() {
    let (port, seen) = origin().await;
    let (_egress, addr, mut noted) = proxy(port);
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let first = format!("GET http://127.0.0.1:{port}/a HTTP/1.1\r\nHost: x\r\n\r\n");
    conn.write_all(first.as_bytes()).await.unwrap();
    assert!(response(&mut conn).await.starts_with("HTTP/1.1 200"));
    let second = "GET http://127.0.0.2:9/secret HTTP/1.1\r\nHost: 127.0.0.2:9\r\n\r\n";
    conn.write_all(second.as_bytes()).await.unwrap();
    let answer = response(&mut conn).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let seen = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
    assert!(!seen.contains("secret"), "{seen}");
    let note = noted.recv().await.unwrap();
    assert!(note.contains("127.0.0.2:9"), "{note}");
}

#[tokio::test]
async fn pipelined_and_chunked_requests_are_framed_and_forwarded_whole() {
    let (port, seen) = origin().await;
    let (_egress, addr, _noted) = proxy(port);
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let requests = format!(
        "POST http://127.0.0.1:{port}/c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
         3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n\
         GET http://127.0.0.1:{port}/d HTTP/1.1\r\nProxy-Authorization: p\r\n\r\n"
    );
    conn.write_all(requests.as_bytes()).await.unwrap();
    let mut got = String::new();
    while got.matches("HTTP/1.1 200").count() < 2 {
        let mut chunk = [0u8; 1024];
        let n = within(conn.read(&mut chunk)).await.unwrap();
        assert!(n > 0, "{got}");
        got.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    let seen = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
    assert_eq!(
        seen,
        format!(
            "POST /c HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n\r\n\
             3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n\
             GET /d HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )
    );
}

/// A proxy allowing `127.0.0.1:port`, a credential bound there (from the
/// variable `V`), sent in clear only when `plain` says so.
fn vaulted(port: u16, plain: bool) -> (Egress, String) {
    use crate::network::vault::{Credential, Vault};
    let dest = Destination::new("127.0.0.1", port);
    let allow = [dest.clone()];
    let listeners = bind(&allow).unwrap();
    let (notes, _noted) = mpsc::channel(16);
    let credential = Credential::from_env(dest, "Authorization", "V");
    let credential = if plain {
        credential.over_plain_http()
    } else {
        credential
    };
    let armed = Vault::new()
        .credential(credential)
        .trusting(
            korvus_tls::Roots::only()
                .with(korvus_model_stub::TestCa::new().unwrap().ca_der().clone()),
        )
        .arm(
            &allow,
            Some(&[("V".into(), "Bearer real".into())]),
            notes.clone(),
        )
        .unwrap();
    let egress = Egress::start(listeners, &allow, notes, Some(Arc::new(armed))).unwrap();
    let addr = egress.proxy_url().trim_start_matches("http://").to_owned();
    (egress, addr)
}

#[tokio::test]
async fn a_bound_credential_goes_on_plain_http_only_when_allowed_and_never_on_trace() {
    let (port, seen) = origin().await;
    let request = |method: &str| {
        format!("{method} http://127.0.0.1:{port}/x HTTP/1.1\r\nAuthorization: Bearer placeholder\r\n\r\n")
    };
    // Not allowed in clear: refused, nothing reaches the origin.
    let (_egress, addr) = vaulted(port, false);
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    conn.write_all(request("GET").as_bytes()).await.unwrap();
    let answer = response(&mut conn).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("never sent in clear"), "{answer}");
    // Allowed: the origin sees the real value, the placeholder gone.
    let (_egress, addr) = vaulted(port, true);
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    conn.write_all(request("GET").as_bytes()).await.unwrap();
    assert!(response(&mut conn).await.starts_with("HTTP/1.1 200"));
    let got = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
    assert!(got.contains("authorization: Bearer real\r\n"), "{got}");
    assert!(!got.contains("placeholder"), "{got}");
    // TRACE would echo it back: refused even when allowed in clear.
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    conn.write_all(request("TRACE").as_bytes()).await.unwrap();
    assert!(response(&mut conn).await.starts_with("HTTP/1.1 403"));
    // A user part in the URL would become the Host sent on: refused.
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let sneaky = format!("GET http://x@127.0.0.1:{port}/ HTTP/1.1\r\n\r\n");
    conn.write_all(sneaky.as_bytes()).await.unwrap();
    assert!(response(&mut conn).await.starts_with("HTTP/1.1 400"));
}
