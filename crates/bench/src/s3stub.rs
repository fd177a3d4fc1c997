//! An S3 stand-in for benchmark 4: it answers every request after a fixed
//! latency and serves every connection on its own task, so requests
//! overlap the way they do against S3 (moto, used for the conformance
//! tests, is bound to one CPU core and overlaps nothing). It accepts
//! `PutObject` and `CreateBucket` — all a persist phase sends — and does no
//! work of its own (no hashing, no storage): on S3 that work happens on
//! AWS's machines, not on the client's shared cores.

use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The latency per request: "tens of milliseconds" is the median AWS gives
/// for small S3 requests (< 512 KB) in *Best Practices Design Patterns:
/// Optimizing Amazon S3 Performance*, section "Timeouts and Retries for
/// Latency-Sensitive Applications"; 30 ms is the low end of that range.
pub(crate) const S3_LATENCY: Duration = Duration::from_millis(30);

/// A running stub on 127.0.0.1; stops when dropped.
#[derive(Debug)]
pub(crate) struct LatencyStub {
    pub(crate) endpoint: String,
    task: JoinHandle<()>,
}

impl LatencyStub {
    pub(crate) async fn start(latency: Duration) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, latency));
            }
        });
        Ok(Self {
            endpoint: format!("http://{addr}"),
            task,
        })
    }
}

impl Drop for LatencyStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one connection: request after request, each answered `200`
/// after `latency`.
async fn serve(stream: TcpStream, latency: Duration) {
    let mut stream = BufReader::new(stream);
    while read_request(&mut stream, false).await.is_some() {
        tokio::time::sleep(latency).await;
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nETag: \"stub\"\r\n\
                    x-amz-request-id: stub\r\n\r\n";
        if stream.get_mut().write_all(head.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads one request: its target, and its body (`Content-Length` or
/// chunked) when `keep` — else the body is read and dropped, holding
/// nothing; `None` when the connection ends.
pub(crate) async fn read_request(
    stream: &mut BufReader<TcpStream>,
    keep: bool,
) -> Option<(String, Vec<u8>)> {
    let mut line = String::new();
    if stream.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let target = line.split_whitespace().nth(1)?.to_owned();
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let mut h = String::new();
        if stream.read_line(&mut h).await.ok()? == 0 {
            return None;
        }
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            break;
        }
        if let Some(v) = h.strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        if h.starts_with("transfer-encoding:") && h.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    let mut kept = keep.then_some(&mut body);
    if !chunked {
        take(stream, length, kept.as_deref_mut()).await?;
        return Some((target, body));
    }
    loop {
        let mut size = String::new();
        stream.read_line(&mut size).await.ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        if size == 0 {
            // Trailers, up to the blank line.
            loop {
                let mut t = String::new();
                if stream.read_line(&mut t).await.ok()? == 0 || t.trim_end().is_empty() {
                    return Some((target, body));
                }
            }
        }
        take(stream, size, kept.as_deref_mut()).await?;
        take(stream, 2, None).await?;
    }
}

/// Reads `n` bytes, appending them to `into` or dropping them.
async fn take(
    stream: &mut BufReader<TcpStream>,
    n: usize,
    into: Option<&mut Vec<u8>>,
) -> Option<()> {
    let mut limited = (&mut *stream).take(n as u64);
    let copied = match into {
        Some(buf) => limited.read_to_end(buf).await.ok()? as u64,
        None => tokio::io::copy(&mut limited, &mut tokio::io::sink())
            .await
            .ok()?,
    };
    (copied == n as u64).then_some(())
}
