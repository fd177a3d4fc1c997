//! The way out of an [`allow`](super::Network::allow) namespace: an HTTP
//! proxy (`CONNECT` and absolute-form requests) and, for destinations on
//! the host's loopback, plain TCP forwarders. Their listening sockets are
//! opened inside the agent's namespace by the starting thread; the tasks
//! serving them run on the embedding runtime, in the host's namespace, so
//! the connections they open go out from there.
//!
//! A client connection gets one upstream: the first request's destination
//! (later requests on a kept-alive connection go to that upstream too, so
//! they can never reach another host).

use std::net::{IpAddr, SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, warn};

use super::Destination;

/// Longest request head (request line and headers) the proxy reads.
const MAX_HEAD: usize = 64 * 1024;
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
    notes: mpsc::Sender<String>,
    stats: Arc<Stats>,
    policy: String,
}

impl Proxy {
    async fn handle(&self, mut conn: TcpStream) {
        let Ok(Ok(head)) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut conn)).await else {
            return;
        };
        let request = match Request::parse(&head.bytes[..head.end]) {
            Ok(r) => r,
            Err(why) => {
                self.refused(&format!("a request the proxy does not take ({why})"));
                let _ = reply(&mut conn, "400 Bad Request", why).await;
                return;
            }
        };
        if !self.allow.iter().any(|d| d.admits(&request.dest)) {
            let what = format!("{} {}", request.method, request.dest);
            self.refused(&format!("{what} is not allowed by the network policy"));
            let _ = reply(
                &mut conn,
                "403 Forbidden",
                "korvus egress: destination not allowed",
            )
            .await;
            return;
        }
        let target = (request.dest.host().to_owned(), request.dest.port());
        let Ok(Ok(mut upstream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await
        else {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            let _ = reply(
                &mut conn,
                "502 Bad Gateway",
                "korvus egress: connect failed",
            )
            .await;
            return;
        };
        self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        let rest = &head.bytes[head.end..];
        let sent = match &request.origin {
            None => conn
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .and(upstream.write_all(rest).await),
            Some(origin_head) => {
                let mut out = origin_head.clone();
                out.extend_from_slice(rest);
                upstream.write_all(&out).await
            }
        };
        if sent.is_ok() {
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
        }
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

/// A request head and where it ends in the bytes read.
struct Head {
    bytes: Vec<u8>,
    end: usize,
}

async fn read_head(conn: &mut TcpStream) -> std::io::Result<Head> {
    let mut bytes = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let from = bytes.len().saturating_sub(3);
        bytes.extend_from_slice(&buf[..n]);
        if let Some(i) = bytes[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Head {
                end: from + i + 4,
                bytes,
            });
        }
        if bytes.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

async fn reply(conn: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    conn.write_all(text.as_bytes()).await?;
    conn.shutdown().await
}

/// A proxy request: its destination and, for an absolute-form request, the
/// head to send upstream (origin-form, without `Proxy-*` headers, its
/// `Host` the request's authority whatever the client sent).
#[derive(Debug)]
struct Request {
    method: String,
    dest: Destination,
    origin: Option<Vec<u8>>,
}

impl Request {
    fn parse(head: &[u8]) -> Result<Self, &'static str> {
        let text = std::str::from_utf8(head).map_err(|_| "korvus egress: head is not UTF-8")?;
        let mut lines = text.split("\r\n");
        let first = lines.next().unwrap_or_default();
        let mut parts = first.split(' ');
        let (Some(method), Some(target), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("korvus egress: malformed request line");
        };
        if method.eq_ignore_ascii_case("CONNECT") {
            let dest = target
                .parse::<Destination>()
                .map_err(|_| "korvus egress: CONNECT needs HOST:PORT")?;
            return Ok(Self {
                method: "CONNECT".to_owned(),
                dest,
                origin: None,
            });
        }
        let Some(rest) = target.strip_prefix("http://") else {
            return Err("korvus egress: only CONNECT and absolute http:// requests are proxied");
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_owned()
        };
        let dest = Destination::from_url(&format!("http://{authority}"))
            .map_err(|_| "korvus egress: bad host in the request")?;
        let mut origin = format!("{method} {path} {version}\r\nHost: {authority}\r\n");
        for line in lines.filter(|l| !l.is_empty()) {
            let name = line.split(':').next().unwrap_or_default().trim();
            let name = name.to_ascii_lowercase();
            if !name.starts_with("proxy-") && name != "host" {
                origin.push_str(line);
                origin.push_str("\r\n");
            }
        }
        origin.push_str("\r\n");
        Ok(Self {
            method: method.to_owned(),
            dest,
            origin: Some(origin.into_bytes()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_requests_name_their_destination() {
        let r = Request::parse(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(r.dest, Destination::new("api.openai.com", 443));
        assert!(r.origin.is_none());
        assert!(Request::parse(b"CONNECT api.openai.com HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn absolute_requests_go_upstream_in_origin_form_without_proxy_headers() {
        let r = Request::parse(
            b"POST http://127.0.0.1:9/v1/responses?x=1 HTTP/1.1\r\nHost: elsewhere.example\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: b\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.dest, Destination::new("127.0.0.1", 9));
        assert_eq!(
            String::from_utf8(r.origin.unwrap()).unwrap(),
            "POST /v1/responses?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAccept: */*\r\n\r\n"
        );
        let r = Request::parse(b"GET http://h?q HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.dest, Destination::new("h", 80));
        assert!(String::from_utf8(r.origin.unwrap())
            .unwrap()
            .starts_with("GET /?q HTTP/1.1"));
    }

    #[test]
    fn other_requests_are_bad() {
        for head in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET https://h/ HTTP/1.1\r\n\r\n",
            b"GET http://h/ HTTP/1.1 extra\r\n\r\n",
            b"\xff\r\n\r\n",
        ] {
            assert!(Request::parse(head).is_err());
        }
    }
}
