//! Listing pages through continuation tokens and strips the key prefix.

use bytes::Bytes;
use futures::stream::{self, StreamExt};
use korvus_blob::{BlobKey, BlobStore, PutOptions};

use crate::common;

/// 61 keys at 7 per page take 9 pages; all come back, in key order, without
/// the store's prefix, and nothing outside the prefix shows up.
#[tokio::test]
async fn listing_of_more_than_one_page_is_complete_and_in_order() {
    let Some(fx) = common::fixture_with(|b| {
        b.list_page_size(7)
            .key_prefix(BlobKey::new("paged").unwrap())
    })
    .await
    else {
        return;
    };
    // Not in key order when put, and with ordering traps: `a/b.txt` sorts
    // before `a/b/…` (`.` < `/`), `Z` before `a`, `é` after `z`.
    let mut names: Vec<String> = (0..55).map(|i| format!("n/{:02}", (i * 37) % 55)).collect();
    names.extend(["a/b/1", "a/b.txt", "Z", "z", "é", "a/b-c"].map(String::from));
    let keys: Vec<BlobKey> = names
        .iter()
        .map(|n| BlobKey::new(n.as_str()).unwrap())
        .collect();
    stream::iter(&keys)
        .for_each_concurrent(8, |k| {
            let fx = &fx;
            async move {
                let body = Bytes::from(k.as_str().to_owned());
                fx.put(k, body.clone(), PutOptions::for_bytes("text/plain", &body))
                    .await
                    .unwrap();
            }
        })
        .await;
    // Beside the prefix, invisible to the store.
    for outside in ["pagedX", "other/a", "paged-not"] {
        fx.client()
            .put_object()
            .bucket(fx.bucket())
            .key(outside)
            .body(Bytes::from_static(b"x").into())
            .send()
            .await
            .unwrap();
    }

    let listed = fx.list(None).await.unwrap();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(listed.len(), 61);
    assert_eq!(
        listed.iter().map(|m| m.key.clone()).collect::<Vec<_>>(),
        expected
    );
    for meta in &listed {
        assert_eq!(meta.size, meta.key.as_str().len() as u64, "{meta:?}");
    }

    let under_n = fx.list(Some(&BlobKey::new("n").unwrap())).await.unwrap();
    assert_eq!(under_n.len(), 55);
    assert!(under_n.windows(2).all(|w| w[0].key < w[1].key));

    let under_a_b: Vec<String> = fx
        .list(Some(&BlobKey::new("a/b").unwrap()))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key.to_string())
        .collect();
    assert_eq!(under_a_b, vec!["a/b/1"]);
    common::teardown(fx).await;
}
