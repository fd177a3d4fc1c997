//! Keyset pagination: every list walks page by page, each row committed
//! before the walk exactly once, in the documented order; a cursor of
//! another list is refused.

use std::collections::HashSet;
use std::future::Future;

use korvus_store::{Cursor, Page, Paged, Result, Store, StoreError, MAX_PAGE_SIZE};

use super::{incident, new_artifact, new_report, session};

/// Walks a list `limit` rows at a time; returns the rows and the size of
/// each page (every page but the last is full).
async fn walk_by<T, F, Fut>(limit: u32, mut list: F) -> (Vec<T>, Vec<usize>)
where
    F: FnMut(Page) -> Fut,
    Fut: Future<Output = Result<Paged<T>>>,
{
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    let mut page = Page::first(limit);
    loop {
        let Paged { items, next } = list(page).await.expect("a page");
        sizes.push(items.len());
        rows.extend(items);
        match next {
            Some(cursor) => page = Page::after(cursor, limit),
            None => return (rows, sizes),
        }
    }
}

fn assert_full_pages(sizes: &[usize], limit: u32, what: &str) {
    let (last, full) = sizes.split_last().expect("at least one page");
    assert!(
        full.iter().all(|n| *n == limit as usize),
        "{what}: pages {sizes:?}"
    );
    assert!(*last <= limit as usize, "{what}: pages {sizes:?}");
}

/// Each list walked 2 or 3 rows at a time returns every row once, in
/// order: sessions by `seq`, reports by revision, incidents and artifacts
/// by id; the last page says there is no next one.
pub async fn every_list_walks_page_by_page(store: &dyn Store) {
    // Incidents: the list is shared with other tests, so check ours appear
    // once each and the walk's ids only grow.
    let mine: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(incident(store).await.id);
        }
        v
    };
    let (incidents, sizes) = walk_by(3, |p| store.list_incidents(p)).await;
    assert_full_pages(&sizes, 3, "incidents");
    let ids: Vec<_> = incidents.iter().map(|i| i.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "incidents by id");
    for id in &mine {
        assert_eq!(ids.iter().filter(|i| *i == id).count(), 1, "{id}");
    }

    let inc = incident(store).await;
    let mut sessions = Vec::new();
    for _ in 0..7 {
        sessions.push(session(store, &inc).await);
    }
    let (walked, sizes) = walk_by(3, |p| store.list_sessions(inc.id, p)).await;
    assert_eq!(sizes, [3, 3, 1]);
    let seqs: Vec<u32> = walked.iter().map(|s| s.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6, 7]);

    let s = &sessions[0];
    for revision in 1..=5 {
        store.create_report(new_report(s, revision)).await.unwrap();
    }
    let (reports, sizes) = walk_by(2, |p| store.list_reports(s.id, p)).await;
    assert_eq!(sizes, [2, 2, 1]);
    let revisions: Vec<u32> = reports.iter().map(|r| r.revision).collect();
    assert_eq!(revisions, [1, 2, 3, 4, 5]);

    let batch: Vec<_> = (0..7)
        .map(|i| new_artifact(s, &format!("f{i}.txt"), 1))
        .collect();
    store.create_artifacts(batch).await.unwrap();
    // Another session's artifacts are in the incident's list only.
    store
        .create_artifacts(vec![new_artifact(&sessions[1], "other.txt", 1)])
        .await
        .unwrap();
    let (own, sizes) = walk_by(2, |p| store.list_session_artifacts(s.id, p)).await;
    assert_eq!(sizes, [2, 2, 2, 1]);
    let (all, _) = walk_by(3, |p| store.list_incident_artifacts(inc.id, p)).await;
    for (walked, n) in [(&own, 7), (&all, 8)] {
        let ids: Vec<_> = walked.iter().map(|a| a.id).collect();
        assert_eq!(ids.len(), n);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "artifacts by id");
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), n);
    }
    // A page as large as the list has no next page.
    let whole = store
        .list_sessions(inc.id, Page::first(MAX_PAGE_SIZE))
        .await
        .unwrap();
    assert_eq!((whole.items.len(), whole.next), (7, None));
    let exact = store.list_sessions(inc.id, Page::first(7)).await.unwrap();
    assert_eq!((exact.items.len(), exact.next), (7, None));
}

/// A cursor of another list (an id where a number is expected, or the
/// reverse) is `InvalidInput` on the field `cursor`.
pub async fn a_cursor_of_another_list_is_invalid_input(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let id = Cursor::parse(&s.id.to_string()).unwrap();
    let number = Cursor::parse("3").unwrap();
    let refused = |r: std::result::Result<(), StoreError>| match r {
        Err(StoreError::InvalidInput { field, .. }) => assert_eq!(field, "cursor"),
        other => panic!("expected InvalidInput(cursor), got {other:?}"),
    };
    refused(
        store
            .list_sessions(inc.id, Page::after(id.clone(), 5))
            .await
            .map(drop),
    );
    refused(store.list_reports(s.id, Page::after(id, 5)).await.map(drop));
    refused(
        store
            .list_incidents(Page::after(number.clone(), 5))
            .await
            .map(drop),
    );
    refused(
        store
            .list_session_artifacts(s.id, Page::after(number, 5))
            .await
            .map(drop),
    );
}
