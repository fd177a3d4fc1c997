//! A JSONL append cut short by the file system (here a file size limit in a
//! child process) is cut back to the last complete line: the log stays
//! readable and the next append that fits succeeds.

use korvus_log::{Access, Event, EventKind, JsonlLog, LogHeader, LogId, TurnLog};

/// Set in the child: the directory of its log, and the log's id.
const CHILD_DIR: &str = "KORVUS_TEST_SHORT_WRITE_DIR";
const CHILD_ID: &str = "KORVUS_TEST_SHORT_WRITE_ID";

fn note(text: String) -> Event {
    Event::new(EventKind::Note { text })
}

/// The child: small appends, then one too big for the file size limit,
/// then a small one that must still fit.
async fn child(dir: &str, id: &str) {
    let logs = JsonlLog::open_dir(dir).unwrap();
    let id: LogId = id.parse().unwrap();
    let w = logs.create(LogHeader::new(id)).await.unwrap();
    for i in 0..3 {
        w.append(&[note(format!("small {i}"))]).await.unwrap();
    }
    let big = w.append(&[note("x".repeat(64 * 1024))]).await;
    assert!(big.is_err(), "the limit stops the big append");
    w.append(&[note("after".into())])
        .await
        .expect("an append that fits still works after a short write");
    w.close().await.unwrap();
}

#[tokio::test]
async fn a_short_append_is_cut_back_and_the_log_stays_readable() {
    if let (Ok(dir), Ok(id)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_ID)) {
        child(&dir, &id).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let id = korvus_testkit::log::fresh_id();
    // Room for the small events only.
    crate::file_limit::run_child(
        "short_write::a_short_append_is_cut_back_and_the_log_stays_readable",
        CHILD_DIR,
        dir.path(),
        CHILD_ID,
        id,
    );
    let logs = JsonlLog::open_dir(dir.path()).unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    let texts: Vec<String> = r
        .read(0, None)
        .await
        .expect("the log reads without a corrupt line")
        .into_iter()
        .map(|e| match e.kind {
            EventKind::Note { text } => text,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts[..3], ["small 0", "small 1", "small 2"]);
    // The failed append is noted before the next one that worked.
    assert!(
        texts[3].starts_with("dropped: 1 event(s) could not be stored"),
        "{texts:?}"
    );
    assert_eq!(texts[4..], ["after"]);
}
