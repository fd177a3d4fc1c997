//! The epoch lock of a JSONL log held by someone who does not let go (a
//! process stopped in the middle of a write): a fence and a writer's
//! write-out each wait a bounded time, then fail transiently, and nothing
//! is lost or let through; once the lock is free both go on. A fence from
//! another service reaches the writer at its next write-out, which drops
//! what it had buffered.

use std::fs::File;
use std::time::{Duration, Instant};

use korvus_log::{Event, EventKind, JsonlLog, LogError, LogHeader, TurnLog};
use korvus_testkit::log::fresh_id;
use rustix::fs::{flock, FlockOperation};

fn note(text: &str) -> Event {
    Event::new(EventKind::Note { text: text.into() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_epoch_lock_bounds_the_wait_of_fences_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let logs = JsonlLog::open_dir(dir.path()).unwrap();
    let id = fresh_id();
    let w = logs.create(LogHeader::new(id)).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    w.append(&[note("0")]).await.unwrap();
    w.flush().await.unwrap();

    let sidecar = File::open(dir.path().join(format!("{id}.jsonl.epoch"))).unwrap();
    flock(&sidecar, FlockOperation::LockExclusive).unwrap();
    // Another service on the directory, as a reaper in another process.
    let other = JsonlLog::open_dir(dir.path()).unwrap();
    let started = Instant::now();
    let err = other.fence(id, 2).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    // The writer's write-out waits as long, and keeps what it buffered.
    w.append(&[note("1")]).await.unwrap();
    let err = w.flush().await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");

    flock(&sidecar, FlockOperation::Unlock).unwrap();
    w.flush().await.unwrap();
    other.fence(id, 2).await.unwrap();
    // Acknowledged into the buffer, then refused at its write-out.
    w.append(&[note("2, after the fence")]).await.unwrap();
    assert!(
        matches!(
            w.flush().await,
            Err(LogError::Fenced {
                epoch: 1,
                newest: 2,
                ..
            })
        ),
        "the write-out finds the fence"
    );
    assert!(matches!(
        w.append(&[note("3")]).await,
        Err(LogError::Fenced { .. })
    ));
    w.close().await.unwrap();
    let r = other.open(id, korvus_log::Access::Read).await.unwrap();
    let texts: Vec<(Option<u64>, String)> = r
        .read(0, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| match e.kind {
            EventKind::Note { text } => (e.epoch, text),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        texts,
        vec![(Some(1), "0".to_owned()), (Some(1), "1".to_owned())]
    );
}
