//! Writer epochs: a writer claims one, the log refuses older claims and the
//! appends of writers it has seen a newer epoch than, and every event
//! records the epoch it was written under.

use korvus_log::{Access, Event, EventKind, LogError, TurnLog};

use super::{fresh_id, header};

/// A note event saying `text`.
pub(super) fn note(text: &str) -> Event {
    Event::new(EventKind::Note { text: text.into() })
}

/// Asserts `result` is `Fenced` with this writer epoch and newest epoch.
pub(super) fn fenced(result: korvus_log::Result<()>, epoch: u64, newest: u64) {
    match result {
        Err(LogError::Fenced {
            epoch: e,
            newest: n,
            ..
        }) => assert_eq!((e, n), (epoch, newest)),
        other => panic!("expected Fenced {{ epoch: {epoch}, newest: {newest} }}, got {other:?}"),
    }
}

/// A writer's claim of an older epoch than the log has seen is refused
/// (permanently); the same or a newer one is taken; events record their
/// writer's epoch, and a writer that claimed none records none.
pub async fn an_older_writer_epoch_is_refused_and_events_record_theirs(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.append(&[note("before any claim")]).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    w.append(&[note("run 1")]).await.unwrap();
    assert_eq!(w.epoch().await, Some(1));
    w.close().await.unwrap();

    let w = logs.open(id, Access::Write).await.unwrap();
    w.claim_epoch(3).await.unwrap();
    w.append(&[note("run 3")]).await.unwrap();
    w.close().await.unwrap();

    // A stale run (epoch 2 < 3) opens the log later: refused, and its
    // appends stay refused; nothing of it is stored.
    let stale = logs.open(id, Access::Write).await.unwrap();
    let refused = stale.claim_epoch(2).await;
    assert!(
        matches!(&refused, Err(e) if !e.is_transient()),
        "{refused:?}"
    );
    fenced(refused, 2, 3);
    stale.close().await.unwrap();
    let again = logs.open(id, Access::Write).await.unwrap();
    again.claim_epoch(3).await.unwrap();
    again.close().await.unwrap();

    let events = logs
        .open(id, Access::Read)
        .await
        .unwrap()
        .read(0, None)
        .await
        .unwrap();
    let epochs: Vec<Option<u64>> = events.iter().map(|e| e.epoch).collect();
    assert_eq!(epochs, vec![None, Some(1), Some(3)]);
}

/// A writer that never claimed an epoch has epoch 0: once any writer
/// claimed one, such a writer's appends are refused.
pub async fn an_unclaimed_writer_is_refused_after_a_claim(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    w.close().await.unwrap();
    let unclaimed = logs.open(id, Access::Write).await.unwrap();
    let refused = unclaimed.append(&[note("who am I")]).await;
    fenced(refused, 0, 1);
    unclaimed.close().await.ok();
    let read = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(read.len().await.unwrap(), 0);
}
