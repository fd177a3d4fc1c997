//! The [`TurnLog`] contract. Every case is a public async function taking
//! `&dyn TurnLog`; [`run_all`] runs them in order; the
//! [`log_contract_tests!`](crate::log_contract_tests) macro makes one test per
//! case. Cases use fresh log ids, so a shared service is fine.

use korvus_log::{
    export_jsonl, Access, Author, Event, EventKind, LogError, LogHeader, LogId, Role, TurnLog,
};
use serde_json::json;

use crate::faults::FailingLog;

mod epoch;
mod fence;
mod service;

pub use self::epoch::{
    an_older_writer_epoch_is_refused_and_events_record_theirs,
    an_unclaimed_writer_is_refused_after_a_claim,
};
pub use self::fence::{
    a_fence_is_idempotent, a_fence_older_than_the_newest_claim_is_fenced,
    a_fence_refuses_the_appends_of_the_open_older_writer,
    appends_racing_a_fence_land_before_it_or_are_refused, fencing_a_missing_log_is_not_found,
};
pub use self::service::{
    delete_of_a_log_held_by_a_writer_is_refused, delete_removes_a_log_whole_and_again_is_ok,
    list_names_every_log, unknown_log_is_not_found,
};

crate::__with_cases!(log, [crate::__gen_run_all], (log, TurnLog,));

/// A fresh log id.
pub fn fresh_id() -> LogId {
    LogId::from_uuid(uuid::Uuid::now_v7())
}

/// A header with a label, as the session layer writes it.
pub fn header(id: LogId) -> LogHeader {
    LogHeader::new(id).with_label("incident_id", "contract")
}

/// A turn's worth of events of every kind, with awkward text.
pub fn sample_events(turn: u64) -> Vec<Event> {
    vec![
        Event::now(EventKind::TurnStart { turn }),
        // Who wrote an event is kept like the rest of it.
        Event::new(EventKind::Message {
            role: Role::User,
            text: "why is \"db-1\" full?\nünïcödé ✓ \u{0}".into(),
        })
        .by(Author::Korvus),
        Event::now(EventKind::ToolCall {
            call_id: format!("call-{turn}"),
            tool: "shell".into(),
            input: json!({"cmd": "df -h", "nested": {"b": [1, 2.5, null], "a": true}}),
        }),
        Event::new(EventKind::ToolResult {
            call_id: format!("call-{turn}"),
            ok: true,
            output: json!("100%"),
        }),
        Event::new(EventKind::Note {
            text: "stderr: warning".into(),
        })
        .by(Author::Agent),
        Event::now(EventKind::TurnEnd {
            turn,
            interrupted: false,
        }),
    ]
}

/// `create` of an existing id is `AlreadyExists`.
pub async fn create_refuses_an_existing_id(logs: &dyn TurnLog) {
    let id = fresh_id();
    let h = header(id);
    let w = logs.create(h.clone()).await.unwrap();
    assert_eq!(w.access(), Access::Write);
    assert_eq!(w.header(), &h);
    w.close().await.unwrap();
    assert!(matches!(
        logs.create(header(id)).await,
        Err(LogError::AlreadyExists { id: got }) if got == id
    ));
}

/// A second write handle for one id is `AlreadyOwned`; readers are fine.
pub async fn second_writer_is_already_owned(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    assert!(matches!(
        logs.open(id, Access::Write).await,
        Err(LogError::AlreadyOwned { id: got }) if got == id
    ));
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.access(), Access::Read);
    w.close().await.unwrap();
}

/// After the writer is closed — or dropped — opening for write succeeds.
pub async fn writer_can_reopen_after_close_or_drop(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.append(&sample_events(1)).await.unwrap();
    w.close().await.unwrap();
    let w2 = logs.open(id, Access::Write).await.unwrap();
    w2.append(&sample_events(2)).await.unwrap();
    drop(w2);
    let w3 = logs.open(id, Access::Write).await.unwrap();
    assert_eq!(w3.read(0, None).await.unwrap().len(), 12);
    w3.close().await.unwrap();
}

/// `append` and `flush` through a read handle are `ReadOnly`, and change nothing.
pub async fn read_handle_is_read_only(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.append(&sample_events(1)).await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    let before = logs.stat(id).await.unwrap().revision;
    assert!(matches!(
        r.append(&sample_events(2)).await,
        Err(LogError::ReadOnly { .. })
    ));
    assert!(matches!(r.flush().await, Err(LogError::ReadOnly { .. })));
    assert_eq!(logs.stat(id).await.unwrap().revision, before);
    assert_eq!(r.read(0, None).await.unwrap().len(), 6);
    w.close().await.unwrap();
}

/// `read(offset, len)` returns exactly the contiguous slice that exists.
pub async fn reads_are_contiguous_prefixes(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    let events: Vec<Event> = (1..=3).flat_map(sample_events).collect();
    w.append(&events[..7]).await.unwrap();
    w.append(&events[7..]).await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.read(0, None).await.unwrap(), events);
    assert_eq!(r.read(3, Some(4)).await.unwrap(), events[3..7].to_vec());
    assert_eq!(r.read(16, Some(10)).await.unwrap(), events[16..].to_vec());
    assert_eq!(r.read(5, Some(0)).await.unwrap(), Vec::<Event>::new());
    assert!(r.read(18, None).await.unwrap().is_empty());
    assert!(r.read(1000, Some(5)).await.unwrap().is_empty());
    // Reading the middle first, then the start, then past it: still consistent.
    assert_eq!(r.read(10, None).await.unwrap(), events[10..].to_vec());
    assert_eq!(r.read(0, Some(2)).await.unwrap(), events[..2].to_vec());
    w.close().await.unwrap();
}

/// What a handle has seen never shrinks, and later reads see more.
pub async fn reads_never_shrink(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    let mut last = 0;
    for turn in 1..=5 {
        w.append(&sample_events(turn)).await.unwrap();
        let all = r.read(0, None).await.unwrap();
        assert!(
            all.len() >= last,
            "read shrank from {last} to {}",
            all.len()
        );
        assert_eq!(all.len() as u64, turn * 6);
        last = all.len();
        assert!(r.seen() >= last as u64);
    }
    w.close().await.unwrap();
}

/// Once `append` returns, a read started afterwards through another handle —
/// even one opened before the append — sees at least that prefix.
pub async fn read_after_append_sees_it(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    let early = logs.open(id, Access::Read).await.unwrap();
    assert!(early.read(0, None).await.unwrap().is_empty());
    let events = sample_events(1);
    for (i, e) in events.iter().enumerate() {
        w.append(std::slice::from_ref(e)).await.unwrap();
        let seen = early.read(0, None).await.unwrap();
        assert_eq!(seen, events[..=i].to_vec());
        let late = logs.open(id, Access::Read).await.unwrap();
        assert_eq!(late.read(0, None).await.unwrap().len(), i + 1);
    }
    w.flush().await.unwrap();
    w.close().await.unwrap();
    assert_eq!(early.read(0, None).await.unwrap(), events);
}

/// The revision changes on append (not on an empty append), and not on open,
/// read, flush or close.
pub async fn revision_changes_on_append_only(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.flush().await.unwrap();
    let r0 = logs.stat(id).await.unwrap().revision;
    w.append(&sample_events(1)).await.unwrap();
    let r1 = logs.stat(id).await.unwrap().revision;
    assert_ne!(r0, r1, "append changes the revision");
    w.append(&[]).await.unwrap();
    w.flush().await.unwrap();
    w.read(0, None).await.unwrap();
    assert_eq!(logs.stat(id).await.unwrap().revision, r1);
    w.close().await.unwrap();
    assert_eq!(logs.stat(id).await.unwrap().revision, r1, "close keeps it");
    let w2 = logs.open(id, Access::Write).await.unwrap();
    let reader = logs.open(id, Access::Read).await.unwrap();
    reader.read(0, None).await.unwrap();
    assert_eq!(logs.stat(id).await.unwrap().revision, r1, "open keeps it");
    w2.append(&sample_events(2)).await.unwrap();
    let r2 = logs.stat(id).await.unwrap().revision;
    assert_ne!(r1, r2);
    assert_ne!(r0, r2);
    w2.close().await.unwrap();
}

/// `close` is idempotent; afterwards every call on the handle is `Closed`.
pub async fn close_is_idempotent_and_final(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.append(&sample_events(1)).await.unwrap();
    let (a, b) = tokio::join!(w.close(), w.close());
    a.unwrap();
    b.unwrap();
    w.close().await.unwrap();
    assert!(matches!(
        w.append(&sample_events(2)).await,
        Err(LogError::Closed { .. })
    ));
    assert!(matches!(
        w.read(0, None).await,
        Err(LogError::Closed { .. })
    ));
    assert!(matches!(w.flush().await, Err(LogError::Closed { .. })));
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(
        r.read(0, None).await.unwrap().len(),
        6,
        "appends survived close"
    );
    r.close().await.unwrap();
}

/// The service-wide flush reports every failing writer and still flushes the
/// others (checked through [`FailingLog`], which fails chosen logs' flushes).
pub async fn flush_reports_every_failing_writer(logs: &dyn TurnLog) {
    logs.flush().await.expect("flush with no failures");
    let failing = FailingLog::new(logs);
    let ids: Vec<LogId> = (0..5).map(|_| fresh_id()).collect();
    let mut writers = Vec::new();
    for id in &ids {
        let w = failing.create(header(*id)).await.unwrap();
        w.append(&sample_events(1)).await.unwrap();
        writers.push(w);
    }
    failing.fail_flush(ids[1]);
    failing.fail_flush(ids[3]);
    let err = failing.flush().await.expect_err("two flushes fail");
    let mut failed: Vec<LogId> = err.failures.iter().map(|(id, _)| *id).collect();
    failed.sort();
    let mut expected = vec![ids[1], ids[3]];
    expected.sort();
    assert_eq!(failed, expected, "every failure is reported");
    let flushed = failing.flushed();
    for id in [ids[0], ids[2], ids[4]] {
        assert!(
            flushed.contains(&id),
            "{id} was flushed despite the failures"
        );
    }
    for w in &writers {
        w.close().await.unwrap();
    }
    logs.flush().await.expect("backend flush after closes");
}

/// `stat` knows the header, revision and (where given) counts without
/// reading events; an empty flushed log exists.
pub async fn stat_knows_header_without_events(logs: &dyn TurnLog) {
    let id = fresh_id();
    let h = header(id);
    let w = logs.create(h.clone()).await.unwrap();
    w.flush().await.unwrap();
    let empty = logs.stat(id).await.unwrap();
    assert_eq!(empty.header, h);
    if let Some(n) = empty.event_count {
        assert_eq!(n, 0);
    }
    w.append(&sample_events(1)).await.unwrap();
    let full = logs.stat(id).await.unwrap();
    assert_eq!(full.header, h);
    if let Some(n) = full.event_count {
        assert_eq!(n, 6);
    }
    if let (Some(a), Some(b)) = (empty.size_bytes, full.size_bytes) {
        assert!(b > a, "size grows with events");
    }
    w.close().await.unwrap();
}

/// Events of every kind come back equal, through a fresh service handle.
pub async fn events_round_trip_exactly(logs: &dyn TurnLog) {
    let id = fresh_id();
    let h = header(id);
    let w = logs.create(h.clone()).await.unwrap();
    let mut events = sample_events(7);
    events.push(Event::new(EventKind::TurnEnd {
        turn: 8,
        interrupted: true,
    }));
    w.append(&events).await.unwrap();
    w.close().await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.read(0, None).await.unwrap(), events);
    assert_eq!(r.header(), &h);
}

/// The canonical export of a log with fixed header and events; every backend
/// must produce exactly these bytes.
pub fn canonical_export(header: &LogHeader, events: &[Event]) -> Vec<u8> {
    let mut out = serde_json::to_vec(header).expect("header serialises");
    out.push(b'\n');
    for e in events {
        out.extend(serde_json::to_vec(e).expect("event serialises"));
        out.push(b'\n');
    }
    out
}

/// Export is the canonical JSONL, byte for byte — identical across backends.
pub async fn export_is_canonical(logs: &dyn TurnLog) {
    let id = fresh_id();
    let mut h = header(id);
    h.created_at = "2026-01-02T03:04:05.123456789Z".parse().unwrap();
    let mut events: Vec<Event> = (1..=3).flat_map(sample_events).collect();
    for (i, e) in events.iter_mut().enumerate() {
        e.at = e.at.map(|_| {
            format!("2026-01-02T03:04:{:02}.5Z", i % 60)
                .parse()
                .unwrap()
        });
    }
    let w = logs.create(h.clone()).await.unwrap();
    w.append(&events).await.unwrap();
    let expected = canonical_export(&h, &events);
    assert_eq!(
        String::from_utf8(export_jsonl(&w).await.unwrap()).unwrap(),
        String::from_utf8(expected.clone()).unwrap()
    );
    w.close().await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(export_jsonl(&r).await.unwrap(), expected);
}

/// `append_at` stores events at the offset it names; the same append
/// again stores nothing; any other offset is a `Conflict` that stores
/// nothing; and the handle's own appends continue after all of it.
pub async fn append_at_is_idempotent_and_checks_the_offset(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    let events = sample_events(1);
    w.append_at(0, &events[..2]).await.unwrap();
    w.append_at(0, &events[..2]).await.unwrap();
    assert_eq!(w.len().await.unwrap(), 2);
    // (At 1 the log would already hold 1 + 1 events: taken for an earlier
    // try of the same append, by design.)
    for at in [0, 3, 9] {
        let err = w.append_at(at, &events[2..3]).await.unwrap_err();
        assert!(
            matches!(err, LogError::Conflict { expected, found: 2, .. } if expected == at),
            "at {at}: {err:?}"
        );
        assert!(!err.is_transient());
    }
    w.append_at(2, &events[2..4]).await.unwrap();
    w.append(&events[4..]).await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.read(0, None).await.unwrap(), events);
    assert_eq!(r.len().await.unwrap(), 6);
    w.close().await.unwrap();
}

/// An append whose events were stored but whose acknowledgement was lost
/// is retried by the handle and stored once.
pub async fn an_append_whose_ack_was_lost_is_stored_once(logs: &dyn TurnLog) {
    let faulty = FailingLog::new(logs);
    let id = fresh_id();
    let w = faulty.create(header(id)).await.unwrap();
    let events = sample_events(1);
    faulty.lose_acks(id, 1);
    w.append(&events[..3]).await.unwrap();
    faulty.lose_acks(id, 2);
    w.append(&events[3..]).await.unwrap();
    assert_eq!(w.lost().await, 0);
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.read(0, None).await.unwrap(), events, "each event once");
    w.close().await.unwrap();
}

/// Transient failures fewer than the handle's tries lose nothing and leave
/// no note.
pub async fn transient_append_failures_are_retried(logs: &dyn TurnLog) {
    let faulty = FailingLog::new(logs);
    let id = fresh_id();
    let w = faulty.create(header(id)).await.unwrap();
    faulty.fail_appends(id, korvus_log::APPEND_ATTEMPTS - 1, true);
    let events = sample_events(1);
    w.append(&events).await.unwrap();
    w.close().await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    assert_eq!(r.read(0, None).await.unwrap(), events);
}

/// Appends that fail for good count their events as lost; the next append
/// that works first stores one note saying how many, then its own events.
pub async fn failed_appends_are_noted_once_an_append_works(logs: &dyn TurnLog) {
    let faulty = FailingLog::new(logs);
    let id = fresh_id();
    let w = faulty.create(header(id)).await.unwrap();
    let first = sample_events(1);
    let fourth = sample_events(4);
    w.append(&first).await.unwrap();
    // Three appends fail: one permanently, two after every try.
    faulty.fail_appends(id, 1, false);
    assert!(w.append(&sample_events(2)).await.is_err());
    faulty.fail_appends(id, 2 * korvus_log::APPEND_ATTEMPTS, true);
    assert!(w.append(&sample_events(3)[..2]).await.is_err());
    assert!(w.append(&sample_events(3)[2..]).await.is_err());
    assert_eq!(w.lost().await, 12);
    w.append(&fourth).await.unwrap();
    assert_eq!(w.lost().await, 0);
    w.append(&sample_events(5)).await.unwrap();
    w.close().await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    let all = r.read(0, None).await.unwrap();
    assert_eq!(all.len(), 6 + 1 + 6 + 6, "{all:#?}");
    assert_eq!(all[..6], first[..]);
    match &all[6].kind {
        EventKind::Note { text } => {
            assert!(text.starts_with(korvus_log::DROPPED_PREFIX), "{text}");
            assert!(text.contains("12 event(s)"), "{text}");
            assert!(text.contains("injected append failure"), "{text}");
        }
        other => panic!("expected the note about lost events, got {other:?}"),
    }
    assert_eq!(all[7..13], fourth[..]);
}

/// A writer opened on a log that has events appends after them, and the
/// note owed for lost events is stored by `close` at the latest.
pub async fn a_reopened_writer_appends_after_the_stored_events(logs: &dyn TurnLog) {
    let id = fresh_id();
    let w = logs.create(header(id)).await.unwrap();
    w.append(&sample_events(1)).await.unwrap();
    w.close().await.unwrap();
    let faulty = FailingLog::new(logs);
    let w = faulty.open(id, Access::Write).await.unwrap();
    assert_eq!(w.len().await.unwrap(), 6);
    faulty.fail_appends(id, 1, false);
    assert!(w.append(&sample_events(2)).await.is_err());
    w.close().await.unwrap();
    let r = logs.open(id, Access::Read).await.unwrap();
    let all = r.read(0, None).await.unwrap();
    assert_eq!(all.len(), 7, "{all:#?}");
    assert!(
        matches!(&all[6].kind, EventKind::Note { text } if text.contains("6 event(s)")),
        "{:?}",
        all[6]
    );
}
