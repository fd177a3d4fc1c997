//! Fences: [`TurnLog::fence`] moves a log's newest epoch on without a
//! writer, so the appends of an older writer that still holds the log
//! open are refused from then on.

use std::sync::atomic::{AtomicU64, Ordering};

use korvus_log::{Access, EventKind, LogError, TurnLog};

use super::epoch::{fenced, note};
use super::{fresh_id, header};

/// The epochs and note texts of log `id`, read through a fresh handle.
async fn stored(logs: &dyn TurnLog, id: korvus_log::LogId) -> Vec<(Option<u64>, String)> {
    let events = logs
        .open(id, Access::Read)
        .await
        .unwrap()
        .read(0, None)
        .await
        .unwrap();
    events
        .into_iter()
        .map(|e| match e.kind {
            EventKind::Note { text } => (e.epoch, text),
            other => panic!("only notes were appended, found {other:?}"),
        })
        .collect()
}

/// A fence refuses every later append of the writer that holds the log
/// open at an older epoch (`Fenced`, for good), keeps what it appended
/// before, and the next run's writer goes on after it.
pub async fn a_fence_refuses_the_appends_of_the_open_older_writer(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    w.append(&[note("run 1, before the fence")]).await.unwrap();
    logs.fence(id, 2).await.unwrap();
    let refused = w.append(&[note("run 1, after the fence")]).await;
    assert!(
        matches!(&refused, Err(e) if !e.is_transient()),
        "{refused:?}"
    );
    fenced(refused, 1, 2);
    fenced(w.append(&[note("run 1, again")]).await, 1, 2);
    w.close().await.unwrap();

    let next = logs.open(id, Access::Write).await.unwrap();
    next.claim_epoch(2).await.unwrap();
    next.append(&[note("run 2")]).await.unwrap();
    next.close().await.unwrap();
    assert_eq!(
        stored(logs, id).await,
        vec![
            (Some(1), "run 1, before the fence".to_owned()),
            (Some(2), "run 2".to_owned()),
        ]
    );
}

/// A fence at an epoch older than the newest the log has seen is
/// `Fenced` and changes nothing; a newer one is taken, and then refuses
/// claims and fences older than it.
pub async fn a_fence_older_than_the_newest_claim_is_fenced(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.claim_epoch(3).await.unwrap();
    w.append(&[note("run 3")]).await.unwrap();
    w.close().await.unwrap();
    let refused = logs.fence(id, 2).await;
    assert!(
        matches!(&refused, Err(e) if !e.is_transient()),
        "{refused:?}"
    );
    fenced(refused, 2, 3);
    // Nothing moved: the writer of epoch 3 still writes.
    let w = logs.open(id, Access::Write).await.unwrap();
    w.claim_epoch(3).await.unwrap();
    w.append(&[note("run 3, again")]).await.unwrap();
    w.close().await.unwrap();

    logs.fence(id, 5).await.unwrap();
    fenced(logs.fence(id, 4).await, 4, 5);
    let stale = logs.open(id, Access::Write).await.unwrap();
    fenced(stale.claim_epoch(4).await, 4, 5);
    fenced(stale.append(&[note("run 4")]).await, 0, 5);
    stale.close().await.unwrap();
    assert_eq!(
        stored(logs, id).await,
        vec![
            (Some(3), "run 3".to_owned()),
            (Some(3), "run 3, again".to_owned()),
        ]
    );
}

/// Fencing a log that does not exist — never created, or deleted — is
/// `NotFound` and leaves nothing behind: the id is created afresh, and
/// its first writer claims epoch 1.
pub async fn fencing_a_missing_log_is_not_found(logs: &dyn TurnLog) {
    let id = fresh_id();
    assert!(
        matches!(logs.fence(id, 1).await, Err(LogError::NotFound { id: got }) if got == id),
        "a log never created"
    );
    assert!(!logs.list().await.unwrap().contains(&id));
    let w = logs.create(header(id)).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    w.append(&[note("run 1")]).await.unwrap();
    w.close().await.unwrap();
    logs.delete(id).await.unwrap();
    assert!(
        matches!(logs.fence(id, 7).await, Err(LogError::NotFound { id: got }) if got == id),
        "a deleted log"
    );
    assert!(!logs.list().await.unwrap().contains(&id));
    let again = logs.create(header(id)).await.unwrap();
    again.claim_epoch(1).await.unwrap();
    again.append(&[note("run 1 of the new log")]).await.unwrap();
    again.close().await.unwrap();
    assert_eq!(
        stored(logs, id).await,
        vec![(Some(1), "run 1 of the new log".to_owned())]
    );
    logs.delete(id).await.unwrap();
}

/// A fence made again — one after the other, or two at once — is `Ok`
/// and moves the log exactly as far as asked: a writer of that epoch is
/// taken, one older is not.
pub async fn a_fence_is_idempotent(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    w.append(&[note("run 1")]).await.unwrap();
    w.close().await.unwrap();
    logs.fence(id, 2).await.unwrap();
    logs.fence(id, 2).await.unwrap();
    let (a, b) = tokio::join!(logs.fence(id, 3), logs.fence(id, 3));
    a.unwrap();
    b.unwrap();
    logs.fence(id, 3).await.unwrap();
    let stale = logs.open(id, Access::Write).await.unwrap();
    fenced(stale.claim_epoch(2).await, 2, 3);
    stale.close().await.unwrap();
    let w = logs.open(id, Access::Write).await.unwrap();
    w.claim_epoch(3).await.unwrap();
    w.append(&[note("run 3")]).await.unwrap();
    w.close().await.unwrap();
    assert_eq!(
        stored(logs, id).await,
        vec![(Some(1), "run 1".to_owned()), (Some(3), "run 3".to_owned())]
    );
}

/// A writer appending as fast as it can while the log is fenced: every
/// append it was told succeeded is stored, in order, and every one after
/// the fence is refused — none lands after it.
pub async fn appends_racing_a_fence_land_before_it_or_are_refused(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    let acked = AtomicU64::new(0);
    let appender = async {
        loop {
            let n = acked.load(Ordering::SeqCst);
            match w.append(&[note(&n.to_string())]).await {
                Ok(()) => acked.store(n + 1, Ordering::SeqCst),
                refused => {
                    fenced(refused, 1, 2);
                    return;
                }
            }
            assert!(n < 1_000_000, "the fence never reached the writer");
            tokio::task::yield_now().await;
        }
    };
    let fence = async {
        while acked.load(Ordering::SeqCst) < 5 {
            tokio::task::yield_now().await;
        }
        logs.fence(id, 2).await.unwrap();
        acked.load(Ordering::SeqCst)
    };
    let ((), at_fence) = tokio::join!(appender, fence);
    let acked = acked.load(Ordering::SeqCst);
    assert!(at_fence >= 5 && acked >= at_fence, "{at_fence} {acked}");
    fenced(w.append(&[note("after")]).await, 1, 2);
    w.close().await.unwrap();
    let expected: Vec<(Option<u64>, String)> =
        (0..acked).map(|n| (Some(1), n.to_string())).collect();
    assert_eq!(stored(logs, id).await, expected);
}
