//! Contract cases of [`BlobStore::put_file`]: an open file stored with the
//! digest the store computed, and a file whose length is not the declared
//! one (it shrank or grew) refused whole. A same-length change while the
//! file is read is not refused by every backend: `FsBlobStore` reads each
//! byte once, so what it stores is what it hashed, and the digest it
//! returns is always that of the stored bytes.

use std::io::{Seek, SeekFrom, Write};

use korvus_blob::{BlobError, BlobStore, PutFileOptions, Sha256Digest};

use super::{fresh_prefix, key, listed_keys, put, Pattern, STREAMED};

/// A temporary file holding `head` and then `len` bytes of the pattern,
/// positioned at the pattern's start.
fn pattern_file(head: &[u8], len: u64) -> std::fs::File {
    let mut file = tempfile::tempfile().expect("temporary file");
    file.write_all(head).unwrap();
    let block: Vec<u8> = (0..251 * 4096).map(super::pattern_byte).collect();
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64);
        file.write_all(&block[..usize::try_from(n).unwrap()])
            .unwrap();
        left -= n;
    }
    file.seek(SeekFrom::Start(head.len() as u64)).unwrap();
    file
}

/// A small and a streamed-size file (from a position past its start) are
/// stored whole; `put_file` returns the digest of the stored bytes, and
/// the object carries it and the content type.
pub async fn put_file_stores_the_bytes_and_returns_their_digest(store: &dyn BlobStore) {
    let p = fresh_prefix();
    for (name, len) in [("small.bin", 70_000), ("large.bin", STREAMED)] {
        let k = key(&p, name);
        let file = pattern_file(b"not stored: before the position", len);
        let options = PutFileOptions::new("application/octet-stream");
        let digest = store
            .put_file(&k, file, len, options)
            .await
            .unwrap_or_else(|e| panic!("put_file {k}: {e:?}"));
        assert_eq!(digest, Pattern::digest(len), "{name}");
        let blob = store.get(&k).await.unwrap();
        assert_eq!(blob.meta.size, len, "{name}");
        assert_eq!(Sha256Digest::of(&blob.bytes), digest, "{name}");
        assert_eq!(blob.meta.sha256, Some(digest), "{name}");
        assert_eq!(
            blob.meta.content_type.as_deref(),
            Some("application/octet-stream"),
            "{name}"
        );
    }
}

/// A file that does not hold the declared length from its position (it
/// shrank or grew since its length was taken) is refused as
/// `ChecksumMismatch`: nothing is stored, and an object already at the key
/// stays as it was.
pub async fn put_file_of_a_changed_file_stores_nothing(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let kept = key(&p, "kept.bin");
    put(store, &kept, b"the old bytes", "text/plain").await;
    let cases = [
        ("shrank-small", 99, 100),
        ("grew-small", 101, 100),
        ("shrank-large", STREAMED - 1, STREAMED),
        ("grew-large", STREAMED + 1, STREAMED),
        ("kept.bin", 11, 10),
    ];
    for (name, actual, declared) in cases {
        let k = key(&p, name);
        let options = PutFileOptions::new("application/octet-stream");
        let result = store
            .put_file(&k, pattern_file(b"", actual), declared, options)
            .await;
        assert!(
            matches!(result, Err(BlobError::ChecksumMismatch { .. })),
            "{name}: got {result:?}"
        );
    }
    assert_eq!(listed_keys(store, &p).await, vec![kept.clone()]);
    assert_eq!(&store.get(&kept).await.unwrap().bytes[..], b"the old bytes");
}
