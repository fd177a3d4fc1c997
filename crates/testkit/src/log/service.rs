//! The service-level calls of the [`TurnLog`] contract: `open` and
//! `stat` of unknown ids, `list`, and `delete` (a log goes whole, a
//! missing one is no error, a log a writer holds stays).

use korvus_log::{Access, LogError, LogId, TurnLog};

use super::{fresh_id, header, sample_events};

/// Unknown ids are `NotFound` for open (both accesses) and stat.
pub async fn unknown_log_is_not_found(logs: &dyn TurnLog) {
    let id = fresh_id();
    for access in [Access::Read, Access::Write] {
        assert!(matches!(
            logs.open(id, access).await,
            Err(LogError::NotFound { id: got }) if got == id
        ));
    }
    assert!(matches!(
        logs.stat(id).await,
        Err(LogError::NotFound { .. })
    ));
    // A failed write open leaves no claim behind.
    let w = logs.create(header(id)).await.unwrap();
    w.close().await.unwrap();
}

/// `list` names every created log, sorted.
pub async fn list_names_every_log(logs: &dyn TurnLog) {
    let ids: Vec<LogId> = (0..3).map(|_| fresh_id()).collect();
    for id in &ids {
        logs.create(header(*id))
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
    }
    let listed = logs.list().await.unwrap();
    for id in &ids {
        assert!(listed.contains(id));
    }
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
}

/// A deleted log is gone — `open`, `stat` and `list` no longer know it,
/// its id can be created afresh and starts empty — and deleting it again,
/// or a log that never existed, is `Ok`.
pub async fn delete_removes_a_log_whole_and_again_is_ok(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.claim_epoch(3).await.unwrap();
    w.append(&sample_events(1)).await.unwrap();
    w.close().await.unwrap();
    logs.delete(id).await.unwrap();
    for access in [Access::Read, Access::Write] {
        assert!(
            matches!(logs.open(id, access).await, Err(LogError::NotFound { .. })),
            "{access:?}"
        );
    }
    assert!(matches!(
        logs.stat(id).await,
        Err(LogError::NotFound { .. })
    ));
    assert!(!logs.list().await.unwrap().contains(&id));
    logs.delete(id).await.unwrap();
    logs.delete(fresh_id()).await.unwrap();
    // The id is free again, with nothing of the old log (epoch included).
    let again = logs.create(header(id)).await.unwrap();
    again.claim_epoch(1).await.unwrap();
    assert_eq!(again.len().await.unwrap(), 0);
    again.close().await.unwrap();
    logs.delete(id).await.unwrap();
}

/// While a writer holds a log, `delete` is `AlreadyOwned` and removes
/// nothing; once the writer closed, it goes.
pub async fn delete_of_a_log_held_by_a_writer_is_refused(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.append(&sample_events(1)).await.unwrap();
    assert!(matches!(
        logs.delete(id).await,
        Err(LogError::AlreadyOwned { .. })
    ));
    w.append(&sample_events(2)).await.unwrap();
    w.close().await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.len().await.unwrap(), 12);
    logs.delete(id).await.unwrap();
    assert!(matches!(
        logs.open(id, Access::Read).await,
        Err(LogError::NotFound { .. })
    ));
}
