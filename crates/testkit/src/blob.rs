//! The [`BlobStore`] contract. Every case is a public async function taking
//! `&dyn BlobStore`; [`run_all`] runs them in order; the
//! [`blob_contract_tests!`](crate::blob_contract_tests) macro makes one test
//! per case. Cases work under a fresh prefix, so a shared store is fine.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use korvus_blob::{
    BlobBody, BlobError, BlobKey, BlobStore, Durability, PutOptions, Sha256Digest, MAX_KEY_BYTES,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};

crate::__with_cases!(blob, [crate::__gen_run_all], (blob, BlobStore,));

mod file;
mod listing;
pub use self::file::*;
pub use self::listing::*;

/// A fresh prefix `contract/<uuid v7>` so cases never see each other's keys.
pub fn fresh_prefix() -> BlobKey {
    BlobKey::new(format!("contract/{}", uuid::Uuid::now_v7())).expect("valid prefix")
}

pub(crate) fn key(prefix: &BlobKey, rest: &str) -> BlobKey {
    prefix.join(rest).expect("valid key")
}

/// The keys `list` answers under `prefix`.
pub(crate) async fn listed_keys(store: &dyn BlobStore, prefix: &BlobKey) -> Vec<BlobKey> {
    store
        .list(Some(prefix))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect()
}

pub(crate) async fn put(store: &dyn BlobStore, key: &BlobKey, bytes: &[u8], content_type: &str) {
    store
        .put(
            key,
            Bytes::copy_from_slice(bytes),
            PutOptions::for_bytes(content_type, bytes),
        )
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e:?}"));
}

/// Bytes, content type and digest come back as stored.
pub async fn round_trip_keeps_content_type_and_digest(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let k = key(&p, "reports/000001/report.md");
    let body: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    put(store, &k, &body, "text/markdown").await;
    let blob = store.get(&k).await.unwrap();
    assert_eq!(&blob.bytes[..], &body[..]);
    assert_eq!(blob.meta.key, k);
    assert_eq!(blob.meta.size, body.len() as u64);
    assert_eq!(blob.meta.content_type.as_deref(), Some("text/markdown"));
    assert_eq!(blob.meta.sha256, Some(Sha256Digest::of(&body)));
}

/// `head` describes an object without its bytes.
pub async fn head_describes_without_bytes(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let k = key(&p, "data.json");
    put(store, &k, br#"{"a":1}"#, "application/json").await;
    let meta = store.head(&k).await.unwrap();
    assert_eq!(meta.key, k);
    assert_eq!(meta.size, 7);
    assert_eq!(meta.content_type.as_deref(), Some("application/json"));
    assert_eq!(meta.sha256, Some(Sha256Digest::of(br#"{"a":1}"#)));
}

/// A second put replaces bytes and metadata.
pub async fn overwrite_replaces(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let k = key(&p, "report.md");
    put(store, &k, b"first version, longer", "text/plain").await;
    put(store, &k, b"second", "text/markdown").await;
    let blob = store.get(&k).await.unwrap();
    assert_eq!(&blob.bytes[..], b"second");
    assert_eq!(blob.meta.size, 6);
    assert_eq!(blob.meta.content_type.as_deref(), Some("text/markdown"));
    assert_eq!(blob.meta.sha256, Some(Sha256Digest::of(b"second")));
    assert_eq!(store.list(Some(&p)).await.unwrap().len(), 1);
}

/// An empty object is an object.
pub async fn empty_object_round_trips(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let k = key(&p, "empty");
    put(store, &k, b"", "application/octet-stream").await;
    let blob = store.get(&k).await.unwrap();
    assert!(blob.bytes.is_empty());
    assert_eq!(store.head(&k).await.unwrap().size, 0);
    assert_eq!(store.list(Some(&p)).await.unwrap().len(), 1);
}

/// After `delete`, `get` and `head` are `NotFound` and listing omits the key.
pub async fn delete_then_not_found(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let k = key(&p, "gone.txt");
    let kept = key(&p, "kept.txt");
    put(store, &k, b"bye", "text/plain").await;
    put(store, &kept, b"hi", "text/plain").await;
    store.delete(&k).await.unwrap();
    assert!(matches!(
        store.get(&k).await,
        Err(BlobError::NotFound { .. })
    ));
    assert!(matches!(
        store.head(&k).await,
        Err(BlobError::NotFound { .. })
    ));
    let listed: Vec<BlobKey> = listed_keys(store, &p).await;
    assert_eq!(listed, vec![kept]);
}

/// Deleting a key that does not exist is `Ok`, twice.
pub async fn delete_of_missing_key_is_ok(store: &dyn BlobStore) {
    let k = key(&fresh_prefix(), "never/was");
    store.delete(&k).await.unwrap();
    store.delete(&k).await.unwrap();
}

/// `get` and `head` of a missing key are `NotFound` naming the key.
pub async fn missing_key_is_not_found(store: &dyn BlobStore) {
    let k = key(&fresh_prefix(), "missing.bin");
    match store.get(&k).await {
        Err(BlobError::NotFound { key }) => assert_eq!(key, k.as_str()),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        store.head(&k).await,
        Err(BlobError::NotFound { .. })
    ));
}

/// A put whose digest does not match its bytes is refused and stores nothing.
pub async fn checksum_mismatch_is_refused(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let k = key(&p, "tampered.txt");
    let result = store
        .put(
            &k,
            Bytes::from_static(b"actual bytes"),
            PutOptions::for_bytes("text/plain", b"other bytes"),
        )
        .await;
    assert!(
        matches!(result, Err(BlobError::ChecksumMismatch { .. })),
        "got {result:?}"
    );
    assert!(matches!(
        store.get(&k).await,
        Err(BlobError::NotFound { .. })
    ));
    assert!(store.list(Some(&p)).await.unwrap().is_empty());
}

/// Hostile keys are refused as `InvalidKey` when the key is built, so no
/// backend call can be made with them; the store is left untouched.
pub async fn hostile_keys_are_refused_before_io(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let long = "k".repeat(2048);
    let hostile = [
        "../x",
        "/abs",
        "a//b",
        "a/./b",
        "a/../b",
        "a\\b",
        "a\0b",
        "a\nb",
        "a/",
        "",
        long.as_str(),
    ];
    for bad in hostile {
        let under = format!("{p}/{bad}");
        for candidate in [bad.to_owned(), under] {
            match BlobKey::new(candidate.clone()) {
                Err(BlobError::InvalidKey { .. }) => {}
                other => panic!("{candidate:?}: expected InvalidKey, got {other:?}"),
            }
        }
    }
    assert!(BlobKey::new("k".repeat(MAX_KEY_BYTES)).is_ok());
    assert!(store.list(Some(&p)).await.unwrap().is_empty());
}

/// The byte at `offset` of a [`Pattern`] body.
pub(crate) fn pattern_byte(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// A reader of `len` generated bytes that never holds them all, failing
/// with an I/O error after `fail_at` bytes when that is set.
#[derive(Debug)]
pub struct Pattern {
    offset: u64,
    len: u64,
    fail_at: Option<u64>,
}

impl Pattern {
    /// `len` bytes of the pattern.
    pub fn new(len: u64) -> Self {
        Self {
            offset: 0,
            len,
            fail_at: None,
        }
    }

    /// The same body, whose reader fails once `at` bytes were read.
    pub fn failing_at(len: u64, at: u64) -> Self {
        Self {
            fail_at: Some(at),
            ..Self::new(len)
        }
    }

    /// The SHA-256 of the `len` bytes of the pattern.
    pub fn digest(len: u64) -> Sha256Digest {
        let mut hasher = Sha256::new();
        let block: Vec<u8> = (0..251 * 4096).map(pattern_byte).collect();
        let mut left = len;
        while left > 0 {
            let n = left.min(block.len() as u64);
            hasher.update(&block[..n as usize]);
            left -= n;
        }
        Sha256Digest::from_bytes(hasher.finalize().into())
    }
}

impl AsyncRead for Pattern {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.fail_at.is_some_and(|at| self.offset >= at) {
            return Poll::Ready(Err(io::Error::other("injected read failure")));
        }
        let end = self.fail_at.unwrap_or(self.len).min(self.len);
        let n = (end - self.offset).min(buf.remaining() as u64) as usize;
        let start = self.offset;
        for (i, b) in buf.initialize_unfilled_to(n).iter_mut().enumerate() {
            *b = pattern_byte(start + i as u64);
        }
        buf.advance(n);
        self.offset += n as u64;
        Poll::Ready(Ok(()))
    }
}

/// 17 MiB: over S3's default 16 MiB multipart threshold, so S3 streams it
/// in parts (8 + 8 + 1 MiB).
pub(crate) const STREAMED: u64 = 17 * 1024 * 1024;

/// A streamed body of 17 MiB round-trips with its digest and content type.
pub async fn put_stream_round_trips_a_large_body(store: &dyn BlobStore) {
    let k = key(&fresh_prefix(), "data/core.bin");
    let digest = Pattern::digest(STREAMED);
    let options = PutOptions::new("application/octet-stream", digest);
    store
        .put_stream(&k, BlobBody::new(Pattern::new(STREAMED), STREAMED), options)
        .await
        .unwrap_or_else(|e| panic!("put_stream {k}: {e:?}"));
    let blob = store.get(&k).await.unwrap();
    assert_eq!(blob.meta.size, STREAMED);
    assert_eq!(Sha256Digest::of(&blob.bytes), digest);
    assert_eq!(blob.meta.sha256, Some(digest));
    assert_eq!(
        blob.meta.content_type.as_deref(),
        Some("application/octet-stream")
    );
    // A small streamed body takes the same path as any other.
    let small = key(&fresh_prefix(), "small.txt");
    let options = PutOptions::for_bytes("text/plain", b"hello");
    let body = BlobBody::from_bytes(Bytes::from_static(b"hello"));
    store.put_stream(&small, body, options).await.unwrap();
    assert_eq!(&store.get(&small).await.unwrap().bytes[..], b"hello");
}

/// A streamed body whose reader fails half-way stores nothing, and an
/// object already at the key is left as it was.
pub async fn put_stream_failing_half_way_stores_nothing(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let fresh = key(&p, "fresh.bin");
    let kept = key(&p, "kept.bin");
    put(store, &kept, b"the old bytes", "text/plain").await;
    for k in [&fresh, &kept] {
        let body = BlobBody::new(Pattern::failing_at(STREAMED, STREAMED / 2), STREAMED);
        let options = PutOptions::new("application/octet-stream", Pattern::digest(STREAMED));
        let result = store.put_stream(k, body, options).await;
        assert!(
            matches!(result, Err(BlobError::Body { .. })),
            "got {result:?}"
        );
    }
    assert!(matches!(
        store.get(&fresh).await,
        Err(BlobError::NotFound { .. })
    ));
    assert_eq!(&store.get(&kept).await.unwrap().bytes[..], b"the old bytes");
    let listed: Vec<BlobKey> = listed_keys(store, &p).await;
    assert_eq!(listed, vec![kept]);
}

/// A streamed body that does not match its digest, or that is shorter or
/// longer than declared (a file that changed while it was stored), is
/// refused as `ChecksumMismatch` and stores nothing.
pub async fn put_stream_of_changed_bytes_stores_nothing(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let len = STREAMED;
    let cases = [
        (
            "wrong-digest",
            Pattern::new(len),
            len,
            Pattern::digest(len - 1),
        ),
        ("shrank", Pattern::new(len - 1), len, Pattern::digest(len)),
        ("grew", Pattern::new(len + 1), len, Pattern::digest(len)),
        ("small", Pattern::new(10), 10, Pattern::digest(9)),
    ];
    for (name, reader, declared, digest) in cases {
        let k = key(&p, name);
        let options = PutOptions::new("application/octet-stream", digest);
        let result = store
            .put_stream(&k, BlobBody::new(reader, declared), options)
            .await;
        assert!(
            matches!(result, Err(BlobError::ChecksumMismatch { .. })),
            "{name}: got {result:?}"
        );
    }
    assert!(store.list(Some(&p)).await.unwrap().is_empty());
}

/// `get_stream` yields the same bytes and metadata as `get`, for a small
/// and a streamed-size object; a missing key is `NotFound` before any byte.
pub async fn get_stream_reads_what_get_reads(store: &dyn BlobStore) {
    use tokio::io::AsyncReadExt;
    let p = fresh_prefix();
    let small = key(&p, "notes/a.txt");
    put(store, &small, b"hello, stream", "text/plain").await;
    let large = key(&p, "data/large.bin");
    let digest = Pattern::digest(STREAMED);
    store
        .put_stream(
            &large,
            BlobBody::new(Pattern::new(STREAMED), STREAMED),
            PutOptions::new("application/octet-stream", digest),
        )
        .await
        .unwrap();
    for k in [&small, &large] {
        let mut reader = store.get_stream(k).await.unwrap();
        let mut bytes = Vec::new();
        reader.body.read_to_end(&mut bytes).await.unwrap();
        let whole = store.get(k).await.unwrap();
        assert_eq!(bytes.len() as u64, reader.meta.size, "{k}");
        assert_eq!(
            Sha256Digest::of(&bytes),
            Sha256Digest::of(&whole.bytes),
            "{k}"
        );
        assert_eq!(reader.meta.content_type, whole.meta.content_type, "{k}");
        assert_eq!(reader.meta.sha256, whole.meta.sha256, "{k}");
    }
    let missing = key(&p, "missing.txt");
    assert!(matches!(
        store.get_stream(&missing).await,
        Err(BlobError::NotFound { .. })
    ));
}

/// `get`, `head` and `list` say when an object was last written, by a
/// clock within a minute of this one (S3 stamps with the server's clock).
pub async fn objects_carry_their_last_modified_time(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let k = key(&p, "stamped.txt");
    let before = SystemTime::now() - Duration::from_secs(60);
    put(store, &k, b"stamped", "text/plain").await;
    let after = SystemTime::now() + Duration::from_secs(60);
    let within = |t: Option<SystemTime>| t.is_some_and(|t| before <= t && t <= after);
    assert!(within(store.head(&k).await.unwrap().last_modified));
    assert!(within(store.get(&k).await.unwrap().meta.last_modified));
    let listed = store.list(Some(&p)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(within(listed[0].last_modified), "{listed:?}");
}

/// Puts deferred to a barrier are visible when they return, and a barrier
/// (with or without deferred puts behind it) succeeds.
pub async fn deferred_puts_are_visible_and_a_barrier_succeeds(store: &dyn BlobStore) {
    store.barrier().await.unwrap();
    let p = fresh_prefix();
    for i in 0..8 {
        let k = key(&p, &format!("f{i}"));
        let body = format!("deferred {i}");
        let options =
            PutOptions::for_bytes("text/plain", body.as_bytes()).durability(Durability::AtBarrier);
        store.put(&k, Bytes::from(body), options).await.unwrap();
    }
    let streamed = key(&p, "streamed");
    let options =
        PutOptions::for_bytes("text/plain", b"streamed").durability(Durability::AtBarrier);
    let body = BlobBody::from_bytes(Bytes::from_static(b"streamed"));
    store.put_stream(&streamed, body, options).await.unwrap();
    assert_eq!(store.list(Some(&p)).await.unwrap().len(), 9);
    store.barrier().await.unwrap();
    store.barrier().await.unwrap();
    assert_eq!(&store.get(&streamed).await.unwrap().bytes[..], b"streamed");
}
