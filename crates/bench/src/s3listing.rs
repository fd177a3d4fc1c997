//! An S3 stand-in for benchmark 22 that holds a synthetic listing: `N`
//! keys in korvus's layout, generated from their index (nothing stored),
//! served by `ListObjectsV2` from a `start-after` cursor and taken by
//! `DeleteObjects`, each answer after the fixed latency. It counts the
//! requests of each kind and the keys the deletes named.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::s3stub::read_request;

/// Keys per session directory of the synthetic listing.
pub(crate) const KEYS_PER_SESSION: u64 = 1_000;

/// What the stand-in was asked.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) lists: AtomicU64,
    pub(crate) deletes: AtomicU64,
    pub(crate) keys_deleted: AtomicU64,
    pub(crate) other: AtomicU64,
}

/// A running stand-in on 127.0.0.1; stops when dropped.
#[derive(Debug)]
pub(crate) struct ListingStub {
    pub(crate) endpoint: String,
    pub(crate) counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl ListingStub {
    pub(crate) async fn start(keys: u64, latency: Duration) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let shared = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, keys, latency, Arc::clone(&shared)));
            }
        });
        Ok(Self {
            endpoint: format!("http://{addr}"),
            counts,
            task,
        })
    }
}

impl Drop for ListingStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The key at `index` (keys sort as their indexes do).
pub(crate) fn key_at(index: u64) -> String {
    let (session, k) = (index / KEYS_PER_SESSION, index % KEYS_PER_SESSION);
    format!(
        "incidents/00000000-0000-7000-8000-000000000001/sessions/00000000-0000-7000-8000-{session:012}/artifacts/f{k:04}"
    )
}

async fn serve(stream: TcpStream, keys: u64, latency: Duration, counts: Arc<Counts>) {
    let mut stream = BufReader::new(stream);
    while let Some((target, body)) = read_request(&mut stream, true).await {
        let body = String::from_utf8_lossy(&body);
        tokio::time::sleep(latency).await;
        let answer = if target.contains("list-type=2") {
            counts.lists.fetch_add(1, Ordering::Relaxed);
            list(&target, keys)
        } else if target.contains("delete") {
            counts.deletes.fetch_add(1, Ordering::Relaxed);
            let named = body.matches("<Key>").count() as u64;
            counts.keys_deleted.fetch_add(named, Ordering::Relaxed);
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DeleteResult \
             xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></DeleteResult>"
                .to_owned()
        } else {
            counts.other.fetch_add(1, Ordering::Relaxed);
            String::new()
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
             x-amz-request-id: stub\r\n\r\n",
            answer.len()
        );
        let out = stream.get_mut();
        if out.write_all(head.as_bytes()).await.is_err()
            || out.write_all(answer.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

/// A `ListObjectsV2` answer: up to `max-keys` keys after `start-after`.
fn list(target: &str, keys: u64) -> String {
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(percent_decode)
    };
    let max: u64 = param("max-keys")
        .and_then(|m| m.parse().ok())
        .unwrap_or(1000);
    let from = match param("start-after") {
        Some(after) => partition(keys, |i| key_at(i) <= after),
        None => 0,
    };
    let to = (from + max).min(keys);
    let mut xml = String::with_capacity(usize::try_from((to - from) * 220).unwrap_or(0) + 512);
    xml.push_str(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult \
         xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>korvus-bench</Name>",
    );
    xml.push_str(&format!(
        "<KeyCount>{}</KeyCount><MaxKeys>{max}</MaxKeys><IsTruncated>{}</IsTruncated>",
        to - from,
        to < keys
    ));
    for i in from..to {
        xml.push_str(&format!(
            "<Contents><Key>{}</Key><LastModified>2020-01-01T00:00:00.000Z</LastModified>\
             <ETag>\"stub\"</ETag><Size>6</Size><StorageClass>STANDARD</StorageClass></Contents>",
            key_at(i)
        ));
    }
    xml.push_str("</ListBucketResult>");
    xml
}

/// The first index in `0..n` where `before` is false.
fn partition(n: u64, before: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
