//! Benchmark 17: the first page of a list route whatever the table's size.
//! `GET /api/incidents` with 100,000 incidents in the store and `GET
//! /api/incidents/{id}/sessions` of an incident holding 10,000 sessions
//! (1,000 and 100 under `--quick`), against the same routes on a store
//! holding 50 of each, through `korvus-http`'s router in process, on SQLite
//! and PostgreSQL.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use futures::stream::{self, StreamExt, TryStreamExt};
use korvus_log::TurnLog;
use korvus_session::Manager;
use korvus_store::{CoordinatedStore, IncidentId, NewIncident};
use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};
use serde_json::json;

use crate::fixtures::{get_ok, leased_session, sqlite};
use crate::pg::Db;
use crate::report::{quantile, Goal, Row};
use crate::runners::ParkedRunner;
use crate::sql::ms;
use crate::Bench;

/// Rows in the small tables the big ones are compared with.
const SMALL: usize = 50;

/// A router over one store, and the incident whose sessions are listed.
struct Side {
    router: axum::Router,
    manager: Manager,
    incident: IncidentId,
}

pub(crate) async fn first_pages(b: &mut Bench) -> Result<Vec<Row>> {
    let (incidents, sessions) = if b.quick {
        (1_000, 100)
    } else {
        (100_000, 10_000)
    };
    let dir = b.work.join("pages");
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    {
        let big = sqlite(&dir.join("big.db")).await?;
        let small = sqlite(&dir.join("small.db")).await?;
        let side = |pool: &korvus_store_sql::SqlitePool| {
            (
                Arc::new(SqliteStore::new(pool.clone())) as Arc<dyn CoordinatedStore>,
                Arc::new(SqliteLog::new(pool.clone())) as Arc<dyn TurnLog>,
            )
        };
        rows.extend(compare(b, "SQLite", side(&big), side(&small), incidents, sessions).await?);
        big.close().await;
        small.close().await;
    }
    let (big_db, small_db) = (
        Db::create("pagesbig").await?,
        Db::create("pagessmall").await?,
    );
    let (big, small) = (big_db.pool(8).await?, small_db.pool(8).await?);
    let side = |pool: &korvus_store_sql::PgPool| {
        (
            Arc::new(PgStore::new(pool.clone())) as Arc<dyn CoordinatedStore>,
            Arc::new(PgLog::new(pool.clone())) as Arc<dyn TurnLog>,
        )
    };
    let pg = compare(
        b,
        "PostgreSQL",
        side(&big),
        side(&small),
        incidents,
        sessions,
    )
    .await;
    big.close().await;
    small.close().await;
    big_db.drop_db().await?;
    small_db.drop_db().await?;
    rows.extend(pg?);
    Ok(rows)
}

async fn compare(
    b: &mut Bench,
    engine: &str,
    big: (Arc<dyn CoordinatedStore>, Arc<dyn TurnLog>),
    small: (Arc<dyn CoordinatedStore>, Arc<dyn TurnLog>),
    incidents: usize,
    sessions: usize,
) -> Result<Vec<Row>> {
    let fill = Instant::now();
    let big = filled(big, incidents, sessions).await?;
    let fill_secs = fill.elapsed().as_secs_f64();
    let small = filled(small, SMALL, SMALL).await?;
    let (rounds, per_round) = if b.quick { (2, 10) } else { (10, 50) };
    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();
    let path = |label: &str, i: IncidentId| match label {
        "incidents" => format!("/api/incidents?limit={SMALL}"),
        _ => format!("/api/incidents/{i}/sessions?limit={SMALL}"),
    };
    for label in ["incidents", "sessions"] {
        let mut pairs = Vec::new();
        for round in 0..rounds {
            let (mut ours, mut base) = (Vec::new(), Vec::new());
            for i in 0..per_round {
                if (round + i) % 2 == 0 {
                    ours.push(get(&big.router, &path(label, big.incident)).await?);
                    base.push(get(&small.router, &path(label, small.incident)).await?);
                } else {
                    base.push(get(&small.router, &path(label, small.incident)).await?);
                    ours.push(get(&big.router, &path(label, big.incident)).await?);
                }
            }
            pairs.push((quantile(&base, 0.5), quantile(&ours, 0.5)));
        }
        details.insert(label.into(), json!(pairs));
        let big_rows = if label == "incidents" {
            incidents
        } else {
            sessions
        };
        rows.push(
            Row::paired(
                format!("17 first page of GET /api/{label}, {engine}, {big_rows} rows"),
                format!("{SMALL} rows"),
                format!("{big_rows} rows"),
                "ms",
                &pairs,
                Goal::RatioAtMost { max: 1.5 },
            )
            .note(format!(
                "a page of {SMALL} rows (the whole small table) through korvus-http's router in process, \
                 p50 of {per_round} per round, {rounds} rounds, the two stores alternating; \
                 filling the big store took {fill_secs:.1} s"
            )),
        );
    }
    b.details.insert(
        format!("17_first_pages_{engine}"),
        serde_json::Value::Object(details),
    );
    big.manager.stop().await;
    small.manager.stop().await;
    Ok(rows)
}

/// A store holding `incidents` incidents, one of which holds `sessions`
/// sessions (owned by a manager that is not running), behind a router.
async fn filled(
    (store, log): (Arc<dyn CoordinatedStore>, Arc<dyn TurnLog>),
    incidents: usize,
    sessions: usize,
) -> Result<Side> {
    let target = store
        .create_incident(NewIncident {
            title: "the long one".into(),
            workspace: None,
        })
        .await?
        .id;
    stream::iter(1..incidents)
        .map(|i| {
            let store = Arc::clone(&store);
            async move {
                store
                    .create_incident(NewIncident {
                        title: format!("incident {i}"),
                        workspace: None,
                    })
                    .await
            }
        })
        .buffer_unordered(8)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    for _ in 0..sessions {
        leased_session(&*store, target, "x".repeat(256)).await?;
    }
    let manager = Manager::builder(store, Arc::new(ParkedRunner { barrier: None }))
        .turn_log(log)
        .build();
    let router = korvus_http::Api::default()
        .view(false)
        .router(manager.clone());
    Ok(Side {
        router,
        manager,
        incident: target,
    })
}

async fn get(router: &axum::Router, path: &str) -> Result<f64> {
    let t = Instant::now();
    let body = get_ok(router, path).await?;
    if body.is_empty() {
        bail!("{path}: empty answer");
    }
    Ok(ms(t.elapsed()))
}
