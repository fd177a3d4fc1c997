//! What several benchmarks start from: sessions owned by a manager that is
//! not running, long JSONL logs, and GETs through a router in process.

use std::time::Duration;

use anyhow::{bail, Result};
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use korvus_log::{Event, EventKind, JsonlLog, LogHeader, LogId, Role, TurnLog};
use korvus_store::{Admission, IncidentId, Lease, NewSession, OwnerId, Session, SessionId, Store};
use korvus_store_sql::{migrate, open_sqlite, SqlitePool};
use tower::ServiceExt;

/// A migrated SQLite database at `path` (its directory created).
pub(crate) async fn sqlite(path: &std::path::Path) -> Result<SqlitePool> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let pool = open_sqlite(path).await?;
    migrate(&pool).await?;
    Ok(pool)
}

/// A session of `incident` leased for an hour by an owner that never runs
/// it: no manager claims or takes it over while a benchmark measures.
pub(crate) async fn leased_session<S: Store + ?Sized>(
    store: &S,
    incident: IncidentId,
    prompt: String,
) -> Result<Session> {
    Ok(store
        .create_session(NewSession {
            runner: None,
            id: SessionId::new(),
            incident_id: incident,
            prompt,
            workspace_ref: None,
            lease: Some(Lease {
                owner: OwnerId::new(),
                ttl: Duration::from_secs(3600),
            }),
            admission: Admission::default(),
        })
        .await?)
}

/// A `JsonlLog` in `dir` and a memory store holding one incident titled
/// `title`.
pub(crate) async fn logs_and_incident(
    dir: &std::path::Path,
    title: &str,
) -> Result<(
    std::sync::Arc<JsonlLog>,
    std::sync::Arc<korvus_store::MemoryStore>,
    IncidentId,
)> {
    std::fs::create_dir_all(dir)?;
    let logs = std::sync::Arc::new(JsonlLog::open_dir(dir)?);
    let store = std::sync::Arc::new(korvus_store::MemoryStore::new());
    let incident = store
        .create_incident(korvus_store::NewIncident {
            title: title.to_owned(),
            workspace: None,
        })
        .await?
        .id;
    Ok((logs, store, incident))
}

/// Writes a log `id` of `events` one-line agent messages, 1,000 per append,
/// and closes it.
pub(crate) async fn long_log(logs: &JsonlLog, id: LogId, events: u64) -> Result<()> {
    let w = logs.create(LogHeader::new(id)).await?;
    let batch: Vec<Event> = (0..events.min(1000))
        .map(|i| {
            Event::new(EventKind::Message {
                role: Role::Assistant,
                text: format!("line {i} of a long agent's output, as a real one prints"),
            })
        })
        .collect();
    let mut written = 0;
    while written < events {
        let n = (events - written).min(batch.len() as u64) as usize;
        w.append(&batch[..n]).await?;
        written += n as u64;
    }
    w.close().await?;
    Ok(())
}

/// `GET path` through `router` in process: the body of a `200`.
pub(crate) async fn get_ok(router: &axum::Router, path: &str) -> Result<Bytes> {
    let response = router
        .clone()
        .oneshot(Request::get(path).body(Body::empty())?)
        .await?;
    if response.status() != StatusCode::OK {
        bail!("{path}: {}", response.status());
    }
    let body = tokio::time::timeout(
        Duration::from_secs(60),
        axum::body::to_bytes(response.into_body(), usize::MAX),
    )
    .await??;
    Ok(body)
}
