//! A write handle's append hook: told every stored append and the error
//! an append ends with — a fenced writer's refusal among them — on the
//! run's one handle, without a second handle wrapping it.

use std::sync::{Arc, Mutex};

use korvus_log::{
    AppendHook, LogError, LogHandle, LogHeader, LogId, MemoryLog, MockLogIo, TurnLog, Writers,
};
use korvus_testkit::log::{fresh_id, sample_events};

/// A hook that records what it was told, as words.
fn recording() -> (AppendHook, Arc<Mutex<Vec<String>>>) {
    let told = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&told);
    let hook: AppendHook = Arc::new(move |_events, outcome| {
        let text = match outcome {
            Ok(()) => "stored".to_owned(),
            Err(LogError::Fenced { .. }) => "fenced".to_owned(),
            Err(e) => format!("error: {e}"),
        };
        seen.lock().unwrap().push(text);
    });
    (hook, told)
}

#[tokio::test]
async fn the_hook_hears_every_stored_append() {
    let logs = MemoryLog::new();
    let log = logs.create(LogHeader::new(fresh_id())).await.unwrap();
    let (hook, told) = recording();
    let log = log.with_append_hook(hook);
    log.append(&sample_events(1)).await.unwrap();
    log.append(&[]).await.unwrap();
    let at = log.len().await.unwrap();
    log.append_at(at, &sample_events(2)).await.unwrap();
    assert_eq!(
        *told.lock().unwrap(),
        ["stored", "stored"],
        "an empty append stores nothing and tells nothing"
    );
}

#[tokio::test]
async fn a_fenced_append_is_told_once_with_its_error() {
    let header = LogHeader::new(LogId::from_uuid(uuid::Uuid::now_v7()));
    let id = header.id;
    let mut io = MockLogIo::new();
    io.expect_event_count().returning(|| Ok(0));
    // A newer run claimed the log: permanent, so the handle does not retry.
    io.expect_append().times(1).returning(move |_, _| {
        Err(LogError::Fenced {
            id,
            epoch: 1,
            newest: 2,
        })
    });
    let writers = Writers::new();
    let (hook, told) = recording();
    let log =
        LogHandle::writer(header, Arc::new(io), writers.claim(id).unwrap()).with_append_hook(hook);
    let refused = log.append(&sample_events(1)).await;
    assert!(
        matches!(refused, Err(LogError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(*told.lock().unwrap(), ["fenced"]);
}
