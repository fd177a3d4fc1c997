//! `TurnLog::delete`: a log goes whole, a missing one is no error, and a
//! log a writer holds stays.

use korvus_log::{Access, LogError, TurnLog};

use super::{fresh_id, header, sample_events};

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
