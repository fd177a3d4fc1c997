//! Benchmark 9: a cancel made on another replica. Replica B cancels a
//! session replica A runs; B shares only the store with A, so the request
//! goes through the store and A's poller (`cancel_poll`, 500 ms by default)
//! fires the run's cancellation — on PostgreSQL at once, woken by the
//! request's `NOTIFY`. Measured: from `cancel` on B to the run's token
//! firing on A. The baseline is the same cancel made on A itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use korvus_blob::MemoryBlobStore;
use korvus_runner::testing::ScriptRunner;
use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, Counters, NewIncident};
use korvus_store_sql::{PgStore, SqliteStore};
use tokio::sync::mpsc;

use crate::pg::Db;
use crate::report::{quantile, Goal, Row};
use crate::Bench;

/// A runner that reports when its cancellation fired.
fn waits_for_cancel(fired: mpsc::UnboundedSender<Instant>) -> ScriptRunner {
    ScriptRunner::new(move |ctx, _| {
        let fired = fired.clone();
        async move {
            ctx.cancel.cancelled().await;
            let _ = fired.send(Instant::now());
            Ok(RunOutcome::new(ExitReason::CANCELLED, Counters::default())
                .with_author_finished(false))
        }
    })
}

/// Milliseconds from `cancel` on `by` to the token of a run on `runs`.
async fn one(
    store: &Arc<dyn CoordinatedStore>,
    runs: &Manager,
    by: &Manager,
    fired: &mut mpsc::UnboundedReceiver<Instant>,
    jitter: Duration,
) -> Result<f64> {
    let incident = store
        .create_incident(NewIncident {
            title: "bench".into(),
            workspace: None,
        })
        .await?;
    let session = runs.create(CreateSession::new(incident.id, "wait")).await?;
    // Let the run start before it is cancelled, at a point of the poll
    // period that varies from run to run (a fixed pace would always hit
    // the same phase of the poller).
    tokio::time::sleep(Duration::from_millis(20) + jitter).await;
    let started = Instant::now();
    by.cancel(session.id).await?;
    let Some(at) = tokio::time::timeout(Duration::from_secs(30), fired.recv()).await? else {
        bail!("the runner went away");
    };
    runs.await_settled(session.id, Duration::from_secs(30))
        .await?;
    Ok(at.duration_since(started).as_secs_f64() * 1e3)
}

async fn measure(
    name: &str,
    store: Arc<dyn CoordinatedStore>,
    runs: usize,
    p99_max_ms: f64,
    how: &str,
) -> Result<Vec<Row>> {
    let (tx, mut fired) = mpsc::unbounded_channel();
    let replica = |runner: ScriptRunner| {
        Manager::builder(Arc::clone(&store), Arc::new(runner))
            .max_running(usize::MAX)
            .blob_store(Arc::new(MemoryBlobStore::new()))
            .build()
    };
    let a = replica(waits_for_cancel(tx));
    let b_replica = replica(waits_for_cancel(mpsc::unbounded_channel().0));
    let mut local = Vec::with_capacity(runs);
    let mut remote = Vec::with_capacity(runs);
    for i in 0..runs {
        // Spread over one poll period: 0, 97, 194, … ms modulo 500.
        let jitter = Duration::from_millis((i as u64 * 97) % 500);
        local.push(one(&store, &a, &a, &mut fired, jitter).await?);
        remote.push(one(&store, &a, &b_replica, &mut fired, jitter).await?);
    }
    a.stop().await;
    b_replica.stop().await;
    let pairs = |q: f64| vec![(quantile(&local, q), quantile(&remote, q))];
    Ok(vec![
        Row::paired(
            format!("9 cancel from another replica ({name}), p50 of {runs}"),
            "the same cancel on the replica that runs it",
            "cancel on another replica, through the store",
            "ms",
            &pairs(0.5),
            Goal::None,
        ),
        Row::paired(
            format!("9 cancel from another replica ({name}), p99 of {runs}"),
            "the same cancel on the replica that runs it",
            "cancel on another replica, through the store",
            "ms",
            &pairs(0.99),
            Goal::ValueAtMost {
                max: p99_max_ms,
                ratio_max: None,
            },
        )
        .note(how),
    ])
}

pub(crate) async fn cancel_latency(b: &mut Bench) -> Result<Vec<Row>> {
    let runs = if b.quick { 5 } else { 40 };
    let dir = b.work.join("cancel");
    let sqlite = crate::fixtures::sqlite(&dir.join("korvus.db")).await?;
    let mut rows = measure(
        "SQLite",
        Arc::new(SqliteStore::new(sqlite.clone())),
        runs,
        1000.0,
        "polling every 500 ms (ManagerBuilder::cancel_poll)",
    )
    .await?;
    sqlite.close().await;
    let pg = Db::create("cancel").await?;
    let pool = pg.pool(4).await?;
    rows.extend(
        measure(
            "PostgreSQL",
            Arc::new(PgStore::new(pool.clone())),
            runs,
            100.0,
            "LISTEN/NOTIFY (a trigger notifies on every new request), polling every 500 ms as the fallback",
        )
        .await?,
    );
    pool.close().await;
    pg.drop_db().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}
