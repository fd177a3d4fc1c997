//! Keys that need escaping on the wire round-trip unchanged.

use bytes::Bytes;
use korvus_blob::{BlobError, BlobKey, BlobStore, PutOptions, Sha256Digest};

use crate::common;

const AWKWARD: &[&str] = &[
    "with space/a b.txt",
    " leading and trailing ",
    "plus/a+b",
    "plus/+",
    "percent/100%",
    "percent/%2F%20%",
    "percent/a%2Bb",
    "mixed/ a+%b ",
    "unicode/ünïcødé/日本語.md",
    "unicode/crab 🦀",
    "punct/a=b&c?d#e;f,g:h@i$j!k'l(m)n*o~p",
    "punct/[brackets]{braces}<angles>|pipe^caret`tick\"quote",
];

/// Each awkward key can be put, read, described, listed and deleted, and
/// comes back byte for byte; under a key prefix too.
#[tokio::test]
async fn keys_with_spaces_unicode_plus_and_percent_round_trip() {
    for prefix in [None, Some("pre fix+%/ü")] {
        let Some(fx) = common::fixture_with(|b| match prefix {
            Some(p) => b.key_prefix(BlobKey::new(p).unwrap()),
            None => b,
        })
        .await
        else {
            return;
        };
        let keys: Vec<BlobKey> = AWKWARD.iter().map(|k| BlobKey::new(*k).unwrap()).collect();
        for key in &keys {
            let body = Bytes::from(format!("body of {key}"));
            fx.put(
                key,
                body.clone(),
                PutOptions::for_bytes("text/plain; charset=utf-8", &body),
            )
            .await
            .unwrap_or_else(|e| panic!("put {key:?}: {e:?}"));
            let blob = fx
                .get(key)
                .await
                .unwrap_or_else(|e| panic!("get {key:?}: {e:?}"));
            assert_eq!(blob.bytes, body, "{key:?}");
            assert_eq!(&blob.meta.key, key);
            assert_eq!(blob.meta.sha256, Some(Sha256Digest::of(&body)), "{key:?}");
            let meta = fx
                .head(key)
                .await
                .unwrap_or_else(|e| panic!("head {key:?}: {e:?}"));
            assert_eq!(meta.size, body.len() as u64, "{key:?}");
            assert_eq!(
                meta.content_type.as_deref(),
                Some("text/plain; charset=utf-8")
            );
        }
        let mut expected = keys.clone();
        expected.sort();
        let listed: Vec<BlobKey> = fx
            .list(None)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(listed, expected, "prefix {prefix:?}");
        // `a+b` and `a b` are different keys: deleting one leaves the other.
        let plus = BlobKey::new("plus/a+b").unwrap();
        let spaced = BlobKey::new("plus/a b").unwrap();
        assert!(matches!(
            fx.get(&spaced).await,
            Err(BlobError::NotFound { .. })
        ));
        for key in &keys {
            fx.delete(key).await.unwrap();
            assert!(
                matches!(fx.head(key).await, Err(BlobError::NotFound { .. })),
                "{key:?} still there"
            );
        }
        assert!(matches!(
            fx.get(&plus).await,
            Err(BlobError::NotFound { .. })
        ));
        assert!(fx.list(None).await.unwrap().is_empty());
        common::teardown(fx).await;
    }
}

/// A key that is valid alone but too long for S3 under the store's prefix
/// is refused as `InvalidKey` before any request.
#[tokio::test]
async fn a_key_too_long_under_the_prefix_is_refused_before_io() {
    let stub = crate::stub::Stub::start(crate::stub::Parts::Accept).await;
    let store = common::builder(&stub.endpoint, "bucket")
        .key_prefix(BlobKey::new("prefix").unwrap())
        .build()
        .await
        .unwrap();
    let longest = BlobKey::new("k".repeat(korvus_blob::MAX_KEY_BYTES)).unwrap();
    let body = Bytes::from_static(b"x");
    let put = store
        .put(&longest, body.clone(), PutOptions::for_bytes("x/y", &body))
        .await;
    assert!(matches!(put, Err(BlobError::InvalidKey { .. })), "{put:?}");
    assert!(matches!(
        store.get(&longest).await,
        Err(BlobError::InvalidKey { .. })
    ));
    assert!(matches!(
        store.delete(&longest).await,
        Err(BlobError::InvalidKey { .. })
    ));
    assert!(stub.seen().is_empty(), "{:?}", stub.seen());
    // Without a prefix the same key fits.
    assert_eq!(
        common::builder(&stub.endpoint, "bucket")
            .build()
            .await
            .unwrap()
            .object_key(&longest)
            .unwrap()
            .len(),
        korvus_blob::MAX_KEY_BYTES
    );
}
