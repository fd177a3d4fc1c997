//! The [`BlobStore`] contract. Every case is a public async function taking
//! `&dyn BlobStore`; [`run_all`] runs them in order; the
//! [`blob_contract_tests!`](crate::blob_contract_tests) macro makes one test
//! per case. Cases work under a fresh prefix, so a shared store is fine.

use bytes::Bytes;
use futures::stream::{self, StreamExt};
use korvus_blob::{BlobError, BlobKey, BlobStore, PutOptions, Sha256Digest, MAX_KEY_BYTES};

crate::__with_cases!(blob, [crate::__gen_run_all], (blob, BlobStore,));

/// A fresh prefix `contract/<uuid v7>` so cases never see each other's keys.
pub fn fresh_prefix() -> BlobKey {
    BlobKey::new(format!("contract/{}", uuid::Uuid::now_v7())).expect("valid prefix")
}

fn key(prefix: &BlobKey, rest: &str) -> BlobKey {
    prefix.join(rest).expect("valid key")
}

async fn put(store: &dyn BlobStore, key: &BlobKey, bytes: &[u8], content_type: &str) {
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
    let listed: Vec<BlobKey> = store
        .list(Some(&p))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
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

/// `list(a/b)` lists `a/b` and `a/b/…`, never `a/bc` or `a/b-c`.
pub async fn list_matches_whole_segments(store: &dyn BlobStore) {
    let p = fresh_prefix();
    for rest in ["a/b/1", "a/b/c/2", "a/bc/3", "a/b-c", "a/b.txt", "ab/4"] {
        put(store, &key(&p, rest), rest.as_bytes(), "text/plain").await;
    }
    let listed: Vec<String> = store
        .list(Some(&key(&p, "a/b")))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key.as_str()[p.as_str().len() + 1..].to_owned())
        .collect();
    assert_eq!(listed, vec!["a/b/1", "a/b/c/2"]);
    let all = store.list(Some(&p)).await.unwrap();
    assert_eq!(all.len(), 6);
    assert!(all.iter().all(|m| m.size > 0));
    assert!(store
        .list(Some(&key(&p, "nothing")))
        .await
        .unwrap()
        .is_empty());
    let everything = store.list(None).await.unwrap();
    assert!(all
        .iter()
        .all(|m| everything.iter().any(|e| e.key == m.key)));
}

/// 1,000 keys under one prefix are all listed, sorted by key.
pub async fn list_of_a_thousand_keys_is_complete_and_sorted(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let keys: Vec<BlobKey> = (0..1000)
        .map(|i| key(&p, &format!("d{}/k{i}", i % 7)))
        .collect();
    stream::iter(keys.iter())
        .for_each_concurrent(16, |k| async move {
            put(store, k, k.as_str().as_bytes(), "text/plain").await;
        })
        .await;
    let listed: Vec<BlobKey> = store
        .list(Some(&p))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(listed.len(), 1000);
    assert_eq!(listed, expected);
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
