//! The listing and batch-delete cases of the [`BlobStore`] contract:
//! `list`, `list_page` and `delete_many`.

use futures::stream::{self, StreamExt};
use korvus_blob::{BlobError, BlobKey, BlobStore};

use super::{fresh_prefix, key, listed_keys, put};

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
    let listed: Vec<BlobKey> = listed_keys(store, &p).await;
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(listed.len(), 1000);
    assert_eq!(listed, expected);
}

/// Walks `prefix` page by page with `list_page`, `limit` at a time.
async fn walk_pages(
    store: &dyn BlobStore,
    prefix: Option<&BlobKey>,
    mut after: Option<BlobKey>,
    limit: usize,
) -> Vec<BlobKey> {
    let mut walked = Vec::new();
    loop {
        let page = store
            .list_page(prefix, after.as_ref(), limit)
            .await
            .unwrap_or_else(|e| panic!("list_page after {after:?}: {e:?}"));
        assert!(page.len() <= limit, "a page of {} > {limit}", page.len());
        let last = page.len() < limit;
        walked.extend(page.into_iter().map(|m| m.key));
        if last {
            return walked;
        }
        after = walked.last().cloned();
    }
}

/// `list_page` walks what `list` lists, once each and in key order, at
/// any page size: whole segments only, `a/b-x` before `a/b/c`, a cursor
/// before the prefix starts at the prefix, one after every key gives an
/// empty page, and a limit of 0 an empty one.
pub async fn list_page_walks_what_list_lists(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let mut rests: Vec<String> = [
        "a/b/1", "a/b/c/2", "a/bc/3", "a/b-c", "a/b.txt", "ab/4", "a/b0",
    ]
    .map(String::from)
    .to_vec();
    rests.extend((0..30).map(|i| format!("d{}/k{i:02}", i % 3)));
    stream::iter(rests.iter())
        .for_each_concurrent(16, |rest| {
            let k = key(&p, rest);
            async move { put(store, &k, rest.as_bytes(), "text/plain").await }
        })
        .await;
    let listed: Vec<BlobKey> = listed_keys(store, &p).await;
    assert_eq!(listed.len(), rests.len());
    for limit in [1, 2, 7, 1000] {
        assert_eq!(
            walk_pages(store, Some(&p), None, limit).await,
            listed,
            "limit {limit}"
        );
    }
    let ab = key(&p, "a/b");
    let under_ab = vec![key(&p, "a/b/1"), key(&p, "a/b/c/2")];
    assert_eq!(walk_pages(store, Some(&ab), None, 1).await, under_ab);
    // A cursor that sorts before the prefix starts at the prefix.
    assert_eq!(
        walk_pages(store, Some(&ab), Some(key(&p, "a")), 1).await,
        under_ab
    );
    // A cursor between keys starts after it.
    assert_eq!(
        walk_pages(store, Some(&ab), Some(key(&p, "a/b/0")), 5).await,
        under_ab
    );
    assert_eq!(
        walk_pages(store, Some(&ab), Some(key(&p, "a/b/1")), 5).await,
        under_ab[1..]
    );
    let past = key(&p, "zzz");
    assert!(store
        .list_page(Some(&p), Some(&past), 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store.list_page(Some(&p), None, 0).await.unwrap().is_empty());
    // With no prefix the walk reaches this case's keys too.
    let everything = walk_pages(store, None, Some(key(&p, "a")), 1000).await;
    assert!(listed.iter().all(|k| everything.contains(k)));
}

/// `delete_many` removes every key, more than one request's worth (S3
/// takes 1,000 a request); missing keys and an empty batch are no failure.
pub async fn delete_many_removes_every_key(store: &dyn BlobStore) {
    let p = fresh_prefix();
    let keys: Vec<BlobKey> = (0..1001).map(|i| key(&p, &format!("k{i:04}"))).collect();
    stream::iter(keys.iter())
        .for_each_concurrent(16, |k| async move {
            put(store, k, k.as_str().as_bytes(), "text/plain").await;
        })
        .await;
    let mut batch = keys.clone();
    batch.push(key(&p, "missing/1"));
    batch.push(key(&p, "missing-2"));
    let failed = store.delete_many(&batch).await;
    assert!(failed.is_empty(), "{failed:?}");
    assert!(store.list(Some(&p)).await.unwrap().is_empty());
    assert!(matches!(
        store.get(&keys[1000]).await,
        Err(BlobError::NotFound { .. })
    ));
    assert!(store.delete_many(&[]).await.is_empty());
    assert!(store.delete_many(&keys[..3]).await.is_empty());
}
