//! SQL turn logs beyond the contract: the same export as the reference
//! backends, and contiguous numbering when two services append to one log.

use korvus_log::{export_jsonl, Access, Event, EventKind, LogHeader, MemoryLog, TurnLog};
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

/// Two services (as in two processes) append to one log at once; every
/// event lands exactly once, numbered contiguously.
async fn concurrent_services_append_contiguously(a: &dyn TurnLog, b: &dyn TurnLog) {
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
    for r in futures::future::join_all(appends).await {
        r.unwrap();
    }
    let r = a.open(id, Access::Read).await.unwrap();
    let all = r.read(0, None).await.unwrap();
    assert_eq!(all.len(), 60);
    // Each append's six events stay together and in order.
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
    assert_eq!(turns, (0..10).collect::<Vec<u64>>());
    let stat = a.stat(id).await.unwrap();
    assert_eq!(stat.event_count, Some(60));
    wa.close().await.unwrap();
    wb.close().await.unwrap();
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
    concurrent_services_append_contiguously(
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
    concurrent_services_append_contiguously(
        &SqliteLog::new(db.pool().clone()),
        &SqliteLog::new(db.pool().clone()),
    )
    .await;
    db.close().await;
}
