//! Benchmarks 10 and 11: the owner lease.
//!
//! 10 — orphan latency: replica A runs a session and then stops renewing
//! (it is frozen: every store call it makes from then on hangs, which is
//! what the database sees of a killed process); replica B's reaper takes
//! the session over and settles it. Measured: from the freeze to the
//! terminal row, against ttl + heartbeat period — the bound a reaper that
//! sees the expiry within one period keeps.
//!
//! 11 — heartbeat cost: PostgreSQL statements of the heartbeat per period,
//! for few and for many live sessions on one manager (goal: one,
//! whatever their number).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use korvus_blob::MemoryBlobStore;
use korvus_runner::testing::ScriptRunner;
use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, Counters, NewIncident, SessionStatus};
use korvus_store_sql::{PgLog, PgStore, SqliteStore};
use korvus_testkit::faults::{FaultStore, StoreFault, StoreOp};

use crate::pg::Db;
use crate::report::{quantile, Goal, Row};
use crate::Bench;

/// The lease of benchmark 10.
const TTL: Duration = Duration::from_secs(2);
const PERIOD: Duration = Duration::from_millis(500);

/// A run that parks until cancelled.
fn parks() -> ScriptRunner {
    ScriptRunner::new(|ctx, _| async move {
        ctx.cancel.cancelled().await;
        Ok(RunOutcome {
            exit_reason: ExitReason::CANCELLED,
            author_finished: false,
            counters: Counters::default(),
        })
    })
}

fn replica(store: Arc<dyn CoordinatedStore>, ttl: Duration, period: Duration) -> Manager {
    Manager::builder(store, Arc::new(parks()))
        .max_running(usize::MAX)
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .cancel_poll(Duration::from_secs(3600))
        .lease(ttl, period)
        .build()
}

/// Every store call `frozen` makes from now on hangs.
fn freeze(frozen: &FaultStore) {
    for op in [
        StoreOp::Heartbeat,
        StoreOp::GetSession,
        StoreOp::SettleSession,
        StoreOp::CreateReport,
        StoreOp::CreateArtifacts,
        StoreOp::ExpiredLeases,
        StoreOp::TakeOver,
        StoreOp::SettleWithReport,
        StoreOp::CancelRequests,
    ] {
        frozen.fault(op, StoreFault::Hang);
    }
}

/// Milliseconds from freezing the replica that runs a session to its
/// terminal row, written by `reaper`'s manager.
async fn one_orphan(store: &Arc<dyn CoordinatedStore>, jitter: Duration) -> Result<f64> {
    let frozen = Arc::new(FaultStore::new(Arc::clone(store)));
    let a = replica(frozen.clone(), TTL, PERIOD);
    let incident = store
        .create_incident(NewIncident {
            title: "bench".into(),
            workspace: None,
        })
        .await?;
    let session = a
        .create(CreateSession {
            incident_id: incident.id,
            prompt: "orphan".into(),
            context: vec![],
        })
        .await?;
    // At a point of A's heartbeat period that varies from run to run.
    tokio::time::sleep(Duration::from_millis(100) + jitter).await;
    freeze(&frozen);
    let killed = Instant::now();
    let deadline = killed + TTL * 5;
    loop {
        let row = store.get_session(session.id).await?;
        if row.status.is_terminal() {
            if row.status != SessionStatus::Failed {
                bail!("the orphan ended {}", row.status);
            }
            break;
        }
        if Instant::now() > deadline {
            bail!("the orphan was not reaped within {:?}", TTL * 5);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ms = killed.elapsed().as_secs_f64() * 1e3;
    // A stays frozen (its tasks hang); dropping it leaks them until exit.
    drop(a);
    Ok(ms)
}

async fn orphans(name: &str, store: Arc<dyn CoordinatedStore>, runs: usize) -> Result<Vec<Row>> {
    // The surviving replica: healthy for a full ttl before it reaps.
    let b = replica(Arc::clone(&store), TTL, PERIOD);
    tokio::time::sleep(TTL + PERIOD).await;
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let jitter = Duration::from_millis((i as u64 * 97) % 500);
        samples.push(one_orphan(&store, jitter).await?);
    }
    b.stop().await;
    let bound = (TTL + PERIOD).as_secs_f64() * 1e3;
    let pairs = |q: f64| vec![(bound, quantile(&samples, q))];
    Ok(vec![
        Row::paired(
            format!("10 orphan latency ({name}), p50 of {runs}"),
            "ttl + heartbeat period",
            "replica frozen -> terminal row by another replica",
            "ms",
            &pairs(0.5),
            Goal::None,
        ),
        Row::paired(
            format!("10 orphan latency ({name}), max of {runs}"),
            "ttl + heartbeat period",
            "replica frozen -> terminal row by another replica",
            "ms",
            &pairs(1.0),
            Goal::RatioAtMost { max: 1.1 },
        )
        .note("ttl 2 s, heartbeat 500 ms; the frozen replica's store calls hang from the freeze on (what the database sees of a SIGKILL); goal: within ttl + period, 10% for the reaper's own statements"),
    ])
}

/// Benchmark 10.
pub(crate) async fn orphan_latency(b: &mut Bench) -> Result<Vec<Row>> {
    let runs = if b.quick { 3 } else { 12 };
    let dir = b.work.join("orphans");
    let sqlite = crate::fixtures::sqlite(&dir.join("korvus.db")).await?;
    let mut rows = orphans("SQLite", Arc::new(SqliteStore::new(sqlite.clone())), runs).await?;
    sqlite.close().await;
    let pg = Db::create("orphans").await?;
    let pool = pg.pool(4).await?;
    rows.extend(orphans("PostgreSQL", Arc::new(PgStore::new(pool.clone())), runs).await?);
    pool.close().await;
    pg.drop_db().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// Heartbeat statements per period with `live` parked sessions on one
/// manager, counted from PostgreSQL's statement log over `periods` periods.
async fn heartbeats(b: &mut Bench, db: &Db, live: usize, periods: u32) -> Result<f64> {
    let pool = db.counted_pool(8).await?;
    let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(pool.clone()));
    let period = Duration::from_millis(250);
    let manager = Manager::builder(Arc::clone(&store), Arc::new(parks()))
        .max_running(usize::MAX)
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::new(PgLog::new(pool.clone())))
        .cancel_poll(Duration::from_secs(3600))
        .lease(Duration::from_secs(3600), period)
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "heartbeat".into(),
            workspace: None,
        })
        .await?;
    for _ in 0..live {
        manager
            .create(CreateSession {
                incident_id: incident.id,
                prompt: "live".into(),
                context: vec![],
            })
            .await?;
    }
    // Let the creates' runs start, then count whole periods.
    tokio::time::sleep(period * 2).await;
    b.statements.reset();
    tokio::time::sleep(period * periods).await;
    let beats = b
        .statements
        .texts()
        .iter()
        .filter(|t| t.contains("SET lease_expires_ms"))
        .count();
    manager.stop().await;
    pool.close().await;
    Ok(beats as f64 / f64::from(periods))
}

/// Benchmark 11.
pub(crate) async fn heartbeat_cost(b: &mut Bench) -> Result<Vec<Row>> {
    let many = if b.quick { 200 } else { 1000 };
    let periods = if b.quick { 8 } else { 20 };
    let db = Db::create("heartbeat").await?;
    let few = heartbeats(b, &db, 1, periods).await?;
    let lots = heartbeats(b, &db, many, periods).await?;
    db.drop_db().await?;
    Ok(vec![Row::paired(
        format!("11 heartbeat statements per period, 1 vs {many} live sessions"),
        "1 live session",
        format!("{many} live sessions"),
        "statements",
        &[(few, lots)],
        Goal::ValueAtMost {
            max: 1.05,
            ratio_max: Some(1.05),
        },
    )
    .note(format!(
        "PostgreSQL statements of the heartbeat (UPDATE … SET lease_expires_ms) per 250 ms period over {periods} periods, counted from the server's statement log"
    ))])
}
