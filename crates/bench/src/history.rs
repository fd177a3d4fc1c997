//! Benchmark 16: what history costs. `Manager::create` timed in incidents
//! that already hold k sessions (1, 1,000 and 10,000; 1, 10 and 100 under
//! `--quick`), on SQLite and PostgreSQL: create decides nothing from the
//! incident's sessions (the store derives the kind from the seq it
//! assigns), so its time must not grow with k.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use korvus_log::TurnLog;
use korvus_session::Manager;
use korvus_store::{IncidentId, NewIncident, Store};
use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};
use serde_json::json;

use crate::fixtures::leased_session;
use crate::pg::Db;
use crate::report::{quantile, Goal, Row};
use crate::runners::ParkedRunner;
use crate::sql::create_ours;
use crate::Bench;

/// Bytes of each pre-filled session's prompt (create used to read them
/// all back).
const PROMPT_BYTES: usize = 1024;

pub(crate) async fn create_with_history(b: &mut Bench) -> Result<Vec<Row>> {
    let sqlite = crate::fixtures::sqlite(&b.work.join("history").join("korvus.db")).await?;
    let mut rows = measure(
        b,
        "SQLite",
        Arc::new(SqliteStore::new(sqlite.clone())),
        Arc::new(SqliteLog::new(sqlite.clone())),
    )
    .await?;
    sqlite.close().await;
    let db = Db::create("history").await?;
    let pool = db.pool(8).await?;
    let pg = measure(
        b,
        "PostgreSQL",
        Arc::new(PgStore::new(pool.clone())),
        Arc::new(PgLog::new(pool.clone())),
    )
    .await;
    pool.close().await;
    db.drop_db().await?;
    rows.extend(pg?);
    Ok(rows)
}

async fn measure<S: korvus_store::CoordinatedStore + 'static>(
    b: &mut Bench,
    engine: &str,
    store: Arc<S>,
    log: Arc<dyn TurnLog>,
) -> Result<Vec<Row>> {
    let ks: [usize; 3] = if b.quick {
        [1, 10, 100]
    } else {
        [1, 1_000, 10_000]
    };
    let (rounds, per_round) = if b.quick { (2, 5) } else { (10, 20) };
    let fill = Instant::now();
    let mut incidents = Vec::new();
    for k in ks {
        incidents.push(prefilled(&*store, k).await?);
    }
    let fill_secs = fill.elapsed().as_secs_f64();
    let manager = Manager::builder(store, Arc::new(ParkedRunner { barrier: None }))
        .max_running(usize::MAX)
        .turn_log(log)
        .build();
    for incident in &incidents {
        create_ours(&manager, *incident).await?;
    }
    // p50 of each round, per k; the order of the ks rotates within a round.
    let mut p50: Vec<Vec<f64>> = vec![Vec::new(); ks.len()];
    for round in 0..rounds {
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); ks.len()];
        for i in 0..per_round {
            for j in 0..ks.len() {
                let at = (j + i + round) % ks.len();
                times[at].push(create_ours(&manager, incidents[at]).await?);
            }
        }
        for (at, t) in times.iter().enumerate() {
            p50[at].push(quantile(t, 0.5));
        }
    }
    manager.stop().await;
    b.details.insert(
        format!("16_create_with_history_{engine}"),
        json!({ "ks": ks, "prefill_secs": fill_secs, "round_p50_ms": p50 }),
    );
    let how = format!(
        "{} creates per k in {rounds} rounds (the order of the incidents rotating), {engine}, \
         runners park until stop; each pre-filled session has a {PROMPT_BYTES}-byte prompt",
        rounds * per_round
    );
    let mut rows = Vec::new();
    for at in 1..ks.len() {
        let pairs: Vec<(f64, f64)> = p50[0]
            .iter()
            .copied()
            .zip(p50[at].iter().copied())
            .collect();
        let row = Row::paired(
            format!(
                "16 create p50, {engine}, {} sessions in the incident",
                ks[at]
            ),
            "1 session",
            format!("{} sessions", ks[at]),
            "ms",
            &pairs,
            Goal::RatioAtMost { max: 1.1 },
        );
        rows.push(if at == 1 { row.note(how.clone()) } else { row });
    }
    Ok(rows)
}

/// An incident holding `k` sessions, owned by a manager that is not
/// running (a lease of an hour: nobody takes them over meanwhile).
async fn prefilled<S: Store + ?Sized>(store: &S, k: usize) -> Result<IncidentId> {
    let incident = store
        .create_incident(NewIncident {
            title: format!("history of {k}"),
            workspace: None,
        })
        .await?;
    let prompt = "x".repeat(PROMPT_BYTES);
    for _ in 0..k {
        leased_session(store, incident.id, prompt.clone()).await?;
    }
    Ok(incident.id)
}
