//! `MockLogIo` and `MockTurnLog` (the `mock` feature) as backends under the
//! rules [`LogHandle`], [`Writers`] and [`export_jsonl`] add to every backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use korvus_log::{
    export_jsonl, Access, Event, EventKind, LogError, LogHandle, LogHeader, LogId, MockLogIo,
    MockTurnLog, TurnLog, Writers,
};

fn header() -> LogHeader {
    LogHeader::new(LogId::from_uuid(uuid::Uuid::now_v7()))
}

fn turns(range: std::ops::Range<u64>) -> Vec<Event> {
    range
        .map(|n| Event::new(EventKind::TurnStart { turn: n }))
        .collect()
}

fn backend_error() -> LogError {
    LogError::backend("mock", std::io::Error::other("disk gone"))
}

#[tokio::test]
async fn a_backend_that_loses_events_is_reported_corrupt_not_shorter() {
    let mut io = MockLogIo::new();
    let reads = AtomicU64::new(0);
    // The first read sees three events, the second only one: the backend
    // lost data under the reader.
    io.expect_read().times(2).returning(move |_, _| {
        Ok(match reads.fetch_add(1, Ordering::SeqCst) {
            0 => turns(1..4),
            _ => turns(1..2),
        })
    });
    let handle = LogHandle::reader(header(), Arc::new(io));
    assert_eq!(handle.read(0, None).await.unwrap().len(), 3);
    let err = handle.read(0, None).await.unwrap_err();
    assert!(matches!(err, LogError::Corrupt { .. }), "{err:?}");
    assert_eq!(handle.seen(), 3);
}

#[tokio::test]
async fn close_runs_the_backend_close_once_reports_its_failure_and_frees_the_writer() {
    let writers = Writers::new();
    let header = header();
    let id = header.id;
    let mut io = MockLogIo::new();
    io.expect_close()
        .times(1)
        .returning(|| Err(backend_error()));
    // No append may reach the backend after close: the mock has no
    // expectation for it, so such a call would panic.
    let handle = LogHandle::writer(header, Arc::new(io), writers.claim(id).unwrap());

    let first = handle.close().await.unwrap_err();
    assert!(matches!(first, LogError::Backend { .. }), "{first:?}");
    handle.close().await.expect("a second close is Ok");
    let after = handle.append(&turns(1..2)).await.unwrap_err();
    assert!(matches!(after, LogError::Closed { .. }), "{after:?}");
    // The claim was released although the backend's close failed.
    drop(writers.claim(id).expect("the log has no writer any more"));
}

#[tokio::test]
async fn the_service_flush_reaches_every_writer_and_names_only_the_failed_ones() {
    let writers = Writers::new();
    let (good_header, bad_header) = (header(), header());
    let (good_id, bad_id) = (good_header.id, bad_header.id);
    let mut good = MockLogIo::new();
    good.expect_flush().times(1).returning(|| Ok(()));
    good.expect_close().returning(|| Ok(()));
    let mut bad = MockLogIo::new();
    bad.expect_flush()
        .times(1)
        .returning(|| Err(backend_error()));
    bad.expect_close().returning(|| Ok(()));
    let good = LogHandle::writer(good_header, Arc::new(good), writers.claim(good_id).unwrap());
    let bad = LogHandle::writer(bad_header, Arc::new(bad), writers.claim(bad_id).unwrap());

    let err = writers.flush_all().await.unwrap_err();
    let failed: Vec<LogId> = err.failures.iter().map(|(id, _)| *id).collect();
    assert_eq!(failed, vec![bad_id]);
    good.close().await.unwrap();
    bad.close().await.unwrap();
}

/// A backend serving events `0..1024` to any read within them, and
/// `then` to a read from offset 1024 on (export reads a few events at a
/// time: it asks on past the first 1024).
fn paged(then: fn() -> korvus_log::Result<Vec<Event>>) -> MockLogIo {
    let mut io = MockLogIo::new();
    io.expect_read()
        .withf(|offset, len| *offset < 1024 && len.is_some())
        .returning(|offset, len| {
            let end = (offset + len.unwrap_or(0)).min(1024);
            Ok(turns(offset..end))
        });
    io.expect_read()
        .withf(|offset, _| *offset >= 1024)
        .times(1)
        .returning(move |_, _| then());
    io
}

#[tokio::test]
async fn export_through_a_service_pages_through_the_whole_log() {
    let id = header().id;
    let mut logs = MockTurnLog::new();
    logs.expect_open()
        .withf(move |asked, access| *asked == id && *access == Access::Read)
        .times(1)
        .returning(|id, _| {
            let io = paged(|| Ok(turns(1024..1026)));
            Ok(LogHandle::reader(LogHeader::new(id), Arc::new(io)))
        });
    // Held as the session layer holds a service.
    let logs: Arc<dyn TurnLog> = Arc::new(logs);

    let handle = logs.open(id, Access::Read).await.unwrap();
    let whole = export_jsonl(&handle).await.unwrap();
    let lines: Vec<&[u8]> = whole.split(|&b| b == b'\n').collect();
    // The header, 1026 events, and the empty rest after the last newline.
    assert_eq!(lines.len(), 1 + 1026 + 1);
    assert!(lines[1026].starts_with(br#"{"type":"turn_start","turn":1025"#));
    assert_eq!(handle.seen(), 1026);
}

#[tokio::test]
async fn export_fails_rather_than_returning_a_prefix_when_a_page_fails() {
    let io = paged(|| Err(backend_error()));
    let handle = LogHandle::reader(header(), Arc::new(io));
    let err = export_jsonl(&handle).await.unwrap_err();
    assert!(matches!(err, LogError::Backend { .. }), "{err:?}");
}
