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
//! whatever their number), and what a period costs: rows written and CPU.

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

/// What one heartbeat measurement found, per period.
struct Beats {
    /// Heartbeat statements.
    statements: f64,
    /// Session rows PostgreSQL updated (`pg_stat_user_tables.n_tup_upd`).
    rows: f64,
    /// CPU time of every PostgreSQL process, milliseconds.
    server_cpu_ms: f64,
    /// CPU time of this process (the manager and its parked runs), ms.
    client_cpu_ms: f64,
}

/// CPU time (user + system) of the processes whose `comm` is `name`, or
/// of this process when `None`, in milliseconds.
fn cpu_ms(name: Option<&str>) -> f64 {
    let ticks = |stat: &str| -> u64 {
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15, the 12th and 13th after `)`.
        f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    };
    // cutime and cstime (fields 16 and 17): the children a process reaped.
    let reaped = |stat: &str| -> u64 {
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        f.get(13).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(14).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    };
    let total: u64 = match name {
        None => ticks(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default()),
        // Every live process of that name, and what the ones that exited
        // used (their parent, the postmaster, reaped them): a connection
        // closed in between still counts.
        Some(name) => std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
            .map(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                ticks(&stat) + reaped(&stat)
            })
            .sum(),
    };
    // USER_HZ is 100 on Linux: a tick is 10 ms.
    total as f64 * 10.0
}

/// Session rows updated so far, by PostgreSQL's statistics.
async fn rows_updated(pool: &sqlx::PgPool) -> Result<f64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COALESCE(n_tup_upd, 0) FROM pg_stat_user_tables WHERE relname = 'sessions'",
    )
    .fetch_one(pool)
    .await?;
    Ok(n as f64)
}

/// Heartbeats with `live` parked sessions on one manager over `periods`
/// periods: statements counted from PostgreSQL's statement log, rows from
/// its statistics, CPU from `/proc`.
async fn heartbeats(
    b: &mut Bench,
    db: &Db,
    live: usize,
    period: Duration,
    periods: u32,
) -> Result<Beats> {
    let pool = db.counted_pool(8).await?;
    let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(pool.clone()));
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
    // Let the creates' runs start and the statistics catch up (backends
    // report them at most once a second), then count whole periods.
    let stats = db.pool(1).await?;
    tokio::time::sleep(period * 2 + Duration::from_secs(2)).await;
    let rows0 = rows_updated(&stats).await?;
    let (server0, client0) = (cpu_ms(Some("postgres")), cpu_ms(None));
    b.statements.reset();
    tokio::time::sleep(period * periods).await;
    let (server1, client1) = (cpu_ms(Some("postgres")), cpu_ms(None));
    // Backends report their statistics at most once a second, so both
    // reads lag the same way and the difference covers the window.
    let rows1 = rows_updated(&stats).await?;
    let beats = b
        .statements
        .texts()
        .iter()
        .filter(|t| t.contains("SET lease_expires_ms"))
        .count();
    manager.stop().await;
    stats.close().await;
    pool.close().await;
    let per = f64::from(periods);
    Ok(Beats {
        statements: beats as f64 / per,
        rows: (rows1 - rows0) / per,
        server_cpu_ms: (server1 - server0) / per,
        client_cpu_ms: (client1 - client0) / per,
    })
}

/// Benchmark 11.
pub(crate) async fn heartbeat_cost(b: &mut Bench) -> Result<Vec<Row>> {
    let many = if b.quick { 200 } else { 10_000 };
    let periods = if b.quick { 8 } else { 10 };
    // Shorter than the default 10 s so the run is short, long enough for
    // one renewal of 10,000 runs on this machine.
    let period = Duration::from_secs(1);
    let db = Db::create("heartbeat").await?;
    let few = heartbeats(b, &db, 1, period, periods).await?;
    let lots = heartbeats(b, &db, many, period, periods).await?;
    db.drop_db().await?;
    Ok(vec![
        Row::paired(
            format!("11 heartbeat statements per period, 1 vs {many} live sessions"),
            "1 live session",
            format!("{many} live sessions"),
            "statements",
            &[(few.statements, lots.statements)],
            Goal::ValueAtMost {
                max: 1.05,
                ratio_max: Some(1.05),
            },
        )
        .note(format!(
            "PostgreSQL statements of the heartbeat (UPDATE … SET lease_expires_ms) per 1 s period over {periods} periods, counted from the server's statement log"
        )),
        Row::paired(
            format!("11 heartbeat: session rows written per period, 1 vs {many} live sessions"),
            "1 live session",
            format!("{many} live sessions"),
            "rows",
            &[(few.rows, lots.rows)],
            Goal::None,
        )
        .note("pg_stat_user_tables.n_tup_upd of sessions over the same periods read before and after the window (both lag the backends' once-a-second report the same way): every live run's row is rewritten every period"),
        Row::paired(
            format!("11 heartbeat: PostgreSQL CPU per period, 1 vs {many} live sessions"),
            "1 live session",
            format!("{many} live sessions"),
            "ms",
            &[(few.server_cpu_ms, lots.server_cpu_ms)],
            Goal::None,
        )
        .note(format!(
            "user + system time of every postgres process (and of those that exited, from the postmaster's reaped-children times) per 1 s period (10 ms ticks); the manager's own process: {:.1} ms (1) and {:.1} ms ({many}) per period",
            few.client_cpu_ms, lots.client_cpu_ms
        )),
    ])
}
