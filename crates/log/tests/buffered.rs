//! `JsonlLog`'s buffered appends: a read through the same service sees
//! them at once, a dropped handle still writes them, and a buffered write
//! that fails (a file size limit in a child process) keeps the complete
//! lines, reports the loss and refuses further appends.

use korvus_log::{Access, Event, EventKind, JsonlLog, LogError, LogHeader, LogId, TurnLog};

const CHILD_DIR: &str = "KORVUS_TEST_BUFFERED_DIR";
const CHILD_ID: &str = "KORVUS_TEST_BUFFERED_ID";

fn note(text: String) -> Event {
    Event::new(EventKind::Note { text })
}

#[tokio::test]
async fn a_read_through_the_same_service_sees_buffered_appends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let logs = JsonlLog::open_dir(dir.path()).unwrap();
    let id = korvus_testkit::log::fresh_id();
    let w = logs.create(LogHeader::new(id)).await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    for i in 0..10 {
        w.append(&[note(format!("e{i}"))]).await.unwrap();
        // No flush, no wait: a reader of this service drains the buffer.
        assert_eq!(r.read(0, None).await.unwrap().len(), i + 1);
    }
    assert!(logs.stat(id).await.unwrap().size_bytes.unwrap() > 100);
    w.close().await.unwrap();
}

#[tokio::test]
async fn a_dropped_writer_still_writes_what_it_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let id = korvus_testkit::log::fresh_id();
    {
        let logs = JsonlLog::open_dir(dir.path()).unwrap();
        let w = logs.create(LogHeader::new(id)).await.unwrap();
        for i in 0..5 {
            w.append(&[note(format!("e{i}"))]).await.unwrap();
        }
        drop(w);
    }
    // A fresh service (as another process would) reads them at once.
    let logs = JsonlLog::open_dir(dir.path()).unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.read(0, None).await.unwrap().len(), 5);
}

/// The child: 100 small appends (about 50 KB, all buffered, past the
/// 32 KiB file size limit), then a flush that fails.
async fn child(dir: &str, id: &str) {
    let logs = JsonlLog::open_dir(dir).unwrap();
    let id: LogId = id.parse().unwrap();
    let w = logs.create(LogHeader::new(id)).await.unwrap();
    for i in 0..100 {
        w.append(&[note(format!("{i:03} {}", "y".repeat(400)))])
            .await
            .unwrap();
    }
    let flushed = w.flush().await;
    assert!(
        matches!(flushed, Err(LogError::Backend { .. })),
        "{flushed:?}"
    );
    let next = w.append(&[note("after".into())]).await;
    let Err(e) = next else {
        panic!("an append after a lost buffer must fail");
    };
    let text = format!("{:#}", anyhow_like(&e));
    assert!(text.contains("reopen"), "{text}");
}

/// The error and its sources on one line.
fn anyhow_like(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[tokio::test]
async fn a_failed_buffered_write_keeps_whole_lines_and_refuses_further_appends() {
    if let (Ok(dir), Ok(id)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_ID)) {
        child(&dir, &id).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let id = korvus_testkit::log::fresh_id();
    crate::file_limit::run_child(
        "buffered::a_failed_buffered_write_keeps_whole_lines_and_refuses_further_appends",
        CHILD_DIR,
        dir.path(),
        CHILD_ID,
        id,
    );
    let logs = JsonlLog::open_dir(dir.path()).unwrap();
    let events = logs
        .open(id, Access::Read)
        .await
        .unwrap()
        .read(0, None)
        .await
        .expect("whole lines only: the log reads");
    // Some of the 100 made it before the limit, in order; none after.
    assert!(!events.is_empty() && events.len() < 100, "{}", events.len());
    for (i, e) in events.iter().enumerate() {
        let EventKind::Note { text } = &e.kind else {
            panic!("{e:?}");
        };
        assert!(text.starts_with(&format!("{i:03} ")), "{text}");
    }
}
