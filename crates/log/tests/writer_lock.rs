//! One writer per JSONL log across services and processes: the writer's
//! `flock` makes a second write open — from another `JsonlLog` service on
//! the same directory, in this process or another — `AlreadyOwned`, until
//! the first writer closes, is dropped, or its process dies. A `delete`
//! from the other service is refused the same way.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use korvus_log::{Access, JsonlLog, LogError, LogHeader, LogId, TurnLog};
use korvus_testkit::log::{fresh_id, sample_events};

/// Set in the child: the directory of its log, and the log's id.
const CHILD_DIR: &str = "KORVUS_TEST_WRITER_LOCK_DIR";
const CHILD_ID: &str = "KORVUS_TEST_WRITER_LOCK_ID";

fn already_owned(result: korvus_log::Result<korvus_log::LogHandle>, id: LogId) {
    match result {
        Err(LogError::AlreadyOwned { id: got }) => assert_eq!(got, id),
        other => panic!("expected AlreadyOwned, got {other:?}"),
    }
}

#[tokio::test]
async fn a_second_service_on_the_directory_cannot_open_a_log_for_write() {
    let dir = tempfile::tempdir().unwrap();
    let a = JsonlLog::open_dir(dir.path()).unwrap();
    let b = JsonlLog::open_dir(dir.path()).unwrap();
    let id = fresh_id();
    let w = a.create(LogHeader::new(id)).await.unwrap();
    w.append(&sample_events(1)).await.unwrap();
    already_owned(b.open(id, Access::Write).await, id);
    // Readers are never refused. Another service sees the append once the
    // writer's write-behind window has passed (20 ms; polled, not timed).
    let r = b.open(id, Access::Read).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while r.read(0, None).await.unwrap().len() < 6 {
        assert!(
            std::time::Instant::now() < deadline,
            "the append never showed up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(r.read(0, None).await.unwrap().len(), 6);
    // Nor can it delete the log the first one writes (its file lock).
    match b.delete(id).await {
        Err(LogError::AlreadyOwned { id: got }) => assert_eq!(got, id),
        other => panic!("expected AlreadyOwned, got {other:?}"),
    }
    assert_eq!(r.read(0, None).await.unwrap().len(), 6);
    w.close().await.unwrap();
    let w2 = b.open(id, Access::Write).await.unwrap();
    already_owned(a.open(id, Access::Write).await, id);
    drop(w2);
    a.open(id, Access::Write)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
}

/// The child: opens the log for write, says so, and waits to be killed.
async fn child(dir: &str, id: &str) {
    let logs = JsonlLog::open_dir(dir).unwrap();
    let id: LogId = id.parse().unwrap();
    let _w = logs.open(id, Access::Write).await.unwrap();
    println!("writing");
    tokio::time::sleep(std::time::Duration::from_secs(300)).await;
}

#[tokio::test]
async fn a_writer_in_another_process_holds_the_log_until_it_dies() {
    if let (Ok(dir), Ok(id)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_ID)) {
        child(&dir, &id).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let logs = JsonlLog::open_dir(dir.path()).unwrap();
    let id = fresh_id();
    logs.create(LogHeader::new(id))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "writer_lock::a_writer_in_another_process_holds_the_log_until_it_dies",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .env(CHILD_ID, id.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("writing"))),
        "the child opened the log for write"
    );
    already_owned(logs.open(id, Access::Write).await, id);
    // SIGKILL: no close, no destructor; the kernel drops the lock.
    child.kill().unwrap();
    child.wait().unwrap();
    let w = logs.open(id, Access::Write).await.unwrap();
    w.append(&sample_events(2)).await.unwrap();
    w.close().await.unwrap();
}
