//! Nothing an agent printed is lost: a `CommandRunner` agent that prints
//! tens of thousands of lines as fast as it can and exits has every line in
//! its turn log, in order, on SQLite and on PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use korvus_blob::MemoryBlobStore;
use korvus_command::{CommandRunner, OutputCaps};
use korvus_log::{Access, EventKind, LogId, TurnLog};
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, NewIncident, SessionStatus};
use korvus_store_sql::testing::{PgDb, SqliteDb};
use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};
use korvus_workspace::ScratchRoot;

/// Runs an agent printing `lines` numbered lines, then checks that every
/// one is in the log, in order, with no note about dropped output.
async fn every_line_lands(store: Arc<dyn CoordinatedStore>, logs: Arc<dyn TurnLog>, lines: u64) {
    let scratch = tempfile::tempdir().unwrap();
    let runner = CommandRunner::new("sh")
        .arg("-c")
        .arg(format!("seq 1 {lines}\necho '# R' > report.md\n"))
        .output_caps({
            let mut v = OutputCaps::default();
            v.max_events = lines.max(OutputCaps::default().max_events);
            v
        });
    let manager = Manager::builder(Arc::clone(&store), Arc::new(runner))
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::clone(&logs))
        .scratch_root(ScratchRoot::supplied(scratch.path()))
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "a chatty agent".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let session = manager
        .create(CreateSession::new(incident.id, "print"))
        .await
        .unwrap();
    let row = manager
        .await_settled(session.id, Duration::from_secs(600))
        .await
        .unwrap();
    manager.stop().await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let log = logs
        .open(LogId::from_uuid(session.id.as_uuid()), Access::Read)
        .await
        .unwrap();
    let mut numbers = Vec::new();
    let mut dropped = Vec::new();
    for event in log.read(0, None).await.unwrap() {
        match event.kind {
            // The agent's lines (the prompt is the log's user message).
            EventKind::Message {
                role: korvus_log::Role::Assistant,
                text,
            } => numbers.push(text),
            EventKind::Note { text } if text.starts_with(korvus_log::DROPPED_PREFIX) => {
                dropped.push(text)
            }
            _ => {}
        }
    }
    assert!(dropped.is_empty(), "{dropped:?}");
    assert_eq!(numbers.len() as u64, lines, "every line is stored");
    assert!(
        numbers
            .iter()
            .zip(1..)
            .all(|(text, n)| *text == n.to_string()),
        "in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_lines_all_land_in_order_on_sqlite() {
    let db = SqliteDb::create().await;
    let store = Arc::new(SqliteStore::new(db.pool().clone()));
    let logs = Arc::new(SqliteLog::new(db.pool().clone()));
    every_line_lands(store, logs, 50_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_lines_with_the_caps_raised_all_land_on_sqlite() {
    let db = SqliteDb::create().await;
    let store = Arc::new(SqliteStore::new(db.pool().clone()));
    let logs = Arc::new(SqliteLog::new(db.pool().clone()));
    every_line_lands(store, logs, 200_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_lines_all_land_in_order_on_postgres() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let store = Arc::new(PgStore::new(db.pool().clone()));
    let logs = Arc::new(PgLog::new(db.pool().clone()));
    every_line_lands(store, logs, 50_000).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_lines_with_the_caps_raised_all_land_on_postgres() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let store = Arc::new(PgStore::new(db.pool().clone()));
    let logs = Arc::new(PgLog::new(db.pool().clone()));
    every_line_lands(store, logs, 200_000).await;
    db.drop_db().await;
}
