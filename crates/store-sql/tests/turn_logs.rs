//! SQL turn logs beyond the contract: the same export as the reference
//! backends, and appends that never interleave when two services write one
//! log.

use korvus_log::{export_jsonl, Access, Event, EventKind, LogError, LogHeader, MemoryLog, TurnLog};
use korvus_store_sql::{PgLog, SqliteLog};
use korvus_testkit::log::{fresh_id, sample_events};

use crate::support::{PgDb, SqliteDb};

async fn export(logs: &dyn TurnLog, header: &LogHeader, events: &[Event]) -> String {
    let w = logs.create(header.clone()).await.unwrap();
    w.append(&events[..7]).await.unwrap();
    w.append(&events[7..]).await.unwrap();
    w.close().await.unwrap();
    let r = logs.open(header.id, Access::Read).await.unwrap();
    String::from_utf8(export_jsonl(&r).await.unwrap()).unwrap()
}

/// Two services (as in two processes) append to one log at once. Each
/// append names the offset it starts at, checked under the log row's lock:
/// an append whose offset went stale because the other service appended
/// fails with `Conflict` and stores nothing. No append is ever split,
/// interleaved or stored twice, and the numbering stays contiguous.
async fn concurrent_services_never_interleave(a: &dyn TurnLog, b: &dyn TurnLog) {
    let id = fresh_id();
    a.create(LogHeader::new(id))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let wa = a.open(id, Access::Write).await.unwrap();
    let wb = b.open(id, Access::Write).await.unwrap();
    let batches: Vec<_> = (0..10).map(sample_events).collect();
    let appends = batches.iter().enumerate().map(|(turn, events)| {
        let w = if turn % 2 == 0 { &wa } else { &wb };
        w.append(events)
    });
    let mut stored = 0;
    for r in futures::future::join_all(appends).await {
        match r {
            Ok(()) => stored += 1,
            Err(LogError::Conflict { .. }) => {}
            Err(e) => panic!("only conflicts may fail: {e:?}"),
        }
    }
    assert!(stored >= 1, "one of the first appends wins");
    let r = a.open(id, Access::Read).await.unwrap();
    // A handle whose append conflicted notes the lost events before its
    // next append that worked; leave those notes out.
    let all: Vec<Event> = r
        .read(0, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| {
            !matches!(&e.kind, EventKind::Note { text } if text.starts_with(korvus_log::DROPPED_PREFIX))
        })
        .collect();
    assert_eq!(all.len(), 6 * stored);
    // Each append's six events stay together and in order, once.
    let mut turns: Vec<u64> = all
        .chunks(6)
        .map(|chunk| {
            let EventKind::TurnStart { turn } = chunk[0].kind else {
                panic!("an append was split: {chunk:?}");
            };
            let kinds: Vec<&EventKind> = chunk.iter().map(|e| &e.kind).collect();
            let expected = sample_events(turn);
            assert_eq!(kinds, expected.iter().map(|e| &e.kind).collect::<Vec<_>>());
            turn
        })
        .collect();
    turns.sort_unstable();
    turns.dedup();
    assert_eq!(turns.len(), stored, "no append stored twice");
    wa.close().await.unwrap();
    wb.close().await.unwrap();
}

/// Two services (as two processes) hold write handles on one log: the
/// older run's writer (epoch 1) is refused as soon as a newer one (epoch 2)
/// claimed the log, even though its handle is still open; nothing of it
/// lands after the claim.
async fn a_newer_epoch_fences_a_live_older_writer(a: &dyn TurnLog, b: &dyn TurnLog) {
    let id = fresh_id();
    let old = a.create(LogHeader::new(id)).await.unwrap();
    old.claim_epoch(1).await.unwrap();
    old.append(&sample_events(1)).await.unwrap();
    let new = b.open(id, Access::Write).await.unwrap();
    new.claim_epoch(2).await.unwrap();
    let refused = old.append(&sample_events(2)).await;
    assert!(
        matches!(
            refused,
            Err(LogError::Fenced {
                epoch: 1,
                newest: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    new.append(&sample_events(3)).await.unwrap();
    let events = b
        .open(id, Access::Read)
        .await
        .unwrap()
        .read(0, None)
        .await
        .unwrap();
    let epochs: Vec<Option<u64>> = events.iter().map(|e| e.epoch).collect();
    assert_eq!(epochs, [[Some(1); 6], [Some(2); 6]].concat());
    old.close().await.ok();
    new.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let header = LogHeader::new(fresh_id()).with_label("incident_id", "x");
    let events: Vec<Event> = (1..=4).flat_map(sample_events).collect();
    let memory = export(&MemoryLog::new(), &header, &events).await;
    let pg = export(&PgLog::new(db.pool().clone()), &header, &events).await;
    assert_eq!(pg, memory, "byte-identical export");
    concurrent_services_never_interleave(
        &PgLog::new(db.pool().clone()),
        &PgLog::new(db.pool().clone()),
    )
    .await;
    a_newer_epoch_fences_a_live_older_writer(
        &PgLog::new(db.pool().clone()),
        &PgLog::new(db.pool().clone()),
    )
    .await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let db = SqliteDb::create().await;
    let header = LogHeader::new(fresh_id()).with_label("incident_id", "x");
    let events: Vec<Event> = (1..=4).flat_map(sample_events).collect();
    let memory = export(&MemoryLog::new(), &header, &events).await;
    let sqlite = export(&SqliteLog::new(db.pool().clone()), &header, &events).await;
    assert_eq!(sqlite, memory, "byte-identical export");
    concurrent_services_never_interleave(
        &SqliteLog::new(db.pool().clone()),
        &SqliteLog::new(db.pool().clone()),
    )
    .await;
    a_newer_epoch_fences_a_live_older_writer(
        &SqliteLog::new(db.pool().clone()),
        &SqliteLog::new(db.pool().clone()),
    )
    .await;
    db.close().await;
}
