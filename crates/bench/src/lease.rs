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
        Ok(RunOutcome::new(ExitReason::CANCELLED, Counters::default()).with_author_finished(false))
    })
}

fn replica(store: Arc<dyn CoordinatedStore>, ttl: Duration, period: Duration) -> Manager {
    Manager::builder(store, Arc::new(parks()))
        .max_running(usize::MAX)
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .cancel_poll(Duration::from_secs(3600))
        .lease(ttl, period)
        // Benchmark 10 measures the settlement of an orphan.
        .resume_orphans(0, Duration::ZERO)
        .build()
}

/// Every store call `frozen` makes from now on hangs.
pub(crate) fn freeze(frozen: &FaultStore) {
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
    let session = a.create(CreateSession::new(incident.id, "orphan")).await?;
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
    /// Rows of `sessions` and `owners` PostgreSQL wrote
    /// (`pg_stat_user_tables`: inserted + updated + deleted).
    rows: f64,
    /// CPU time of every PostgreSQL process, milliseconds.
    server_cpu_ms: f64,
    /// CPU time of this process (the manager and its parked runs), ms.
    client_cpu_ms: f64,
}

/// Fields of `/proc/<pid>/stat` after the command name, from field 3 on.
fn stat_fields(pid: &str) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    rest.split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect()
}

/// CPU time (user + system, fields 14 and 15) of process `pid`, plus with
/// `reaped` what its reaped children used (16 and 17), in milliseconds.
pub(crate) fn cpu_of(pid: &str, reaped: bool) -> u64 {
    let f = stat_fields(pid);
    // Indexes count from field 4 (after the state).
    let at = |n: usize| f.get(n - 4).copied().unwrap_or(0);
    let own = at(14) + at(15);
    // USER_HZ is 100 on Linux: a tick is 10 ms.
    10 * if reaped { own + at(16) + at(17) } else { own }
}

/// CPU time of this cluster's PostgreSQL, in milliseconds: its postmaster
/// (the parent of `backend`), every live child of it, and what the
/// children that exited used (the postmaster reaped them), so a
/// connection closed in between still counts and another cluster on the
/// host does not.
fn cluster_cpu_ms(backend: i32) -> f64 {
    let postmaster = stat_fields(&backend.to_string())
        .first()
        .copied()
        .unwrap_or(0)
        .to_string();
    let children: u64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            stat_fields(pid).first().map(u64::to_string).as_deref() == Some(postmaster.as_str())
        })
        .map(|pid| cpu_of(&pid, false))
        .sum();
    (cpu_of(&postmaster, true) + children) as f64
}

/// Rows of `sessions` and `owners` written so far (inserted, updated or
/// deleted), by PostgreSQL's statistics.
async fn rows_updated(pool: &sqlx::PgPool) -> Result<f64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT CAST(COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0) AS BIGINT) \
         FROM pg_stat_user_tables WHERE relname IN ('sessions', 'owners')",
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
    ttl: Duration,
    period: Duration,
    periods: u32,
) -> Result<Beats> {
    // One connection: PostgreSQL reports a backend's statistics at the end
    // of a transaction at most once a second, else after 10 s idle, so a
    // pool of several would report the heartbeat's updates late and
    // unevenly. With one, every beat reports the one before.
    let pool = db.counted_pool(1).await?;
    let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(pool.clone()));
    let manager = Manager::builder(Arc::clone(&store), Arc::new(parks()))
        .max_running(usize::MAX)
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::new(PgLog::new(pool.clone())))
        .cancel_poll(Duration::from_secs(3600))
        .lease(ttl, period)
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "heartbeat".into(),
            workspace: None,
        })
        .await?;
    for _ in 0..live {
        manager
            .create(CreateSession::new(incident.id, "live"))
            .await?;
    }
    // Let the creates' runs start, their claims expire (from then on each
    // row is held by the owner's lease alone, and every beat reads it to
    // find the ones to release), the reaper start (after a healthy ttl) and
    // the statistics catch up (backends report them at most once a
    // second), then count whole periods.
    let stats = db.pool(1).await?;
    tokio::time::sleep(ttl + period * 3 + Duration::from_secs(3)).await;
    let rows0 = rows_updated(&stats).await?;
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&stats)
        .await?;
    let (server0, client0) = (cluster_cpu_ms(backend), cpu_of("self", false) as f64);
    b.statements.reset();
    tokio::time::sleep(period * periods).await;
    let (server1, client1) = (cluster_cpu_ms(backend), cpu_of("self", false) as f64);
    // Both reads lag the one connection's last report (at most a beat or
    // two), so the difference covers the window.
    let rows1 = rows_updated(&stats).await?;
    let beats = b
        .statements
        .texts()
        .iter()
        .filter(|t| t.contains("INSERT INTO owners"))
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
    // The default ttl is three periods: claims expire, and the reaper runs,
    // within the warm-up.
    let ttl = period * 3;
    let few = heartbeats(b, &db, 1, ttl, period, periods).await?;
    let lots = heartbeats(b, &db, many, ttl, period, periods).await?;
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
            "PostgreSQL statements of the heartbeat (one WITH renewing the owner's row) per 1 s period over {periods} periods, counted from the server's statement log"
        )),
        Row::paired(
            format!("11 heartbeat: rows written per period, 1 vs {many} live sessions"),
            "1 live session",
            format!("{many} live sessions"),
            "rows",
            &[(few.rows, lots.rows)],
            // One owner row per beat whatever the runs; the slack is the
            // statistics' lag at the window's edges.
            Goal::ValueAtMost {
                max: 1.5,
                ratio_max: None,
            },
        )
        .note("pg_stat_user_tables n_tup_ins + n_tup_upd + n_tup_del of sessions and owners over the same periods, read before and after the window through the manager's one connection (both reads lag its last report by a beat or two; nothing but the heartbeat writes them then): the owner-level lease writes the owner's row, not the runs' rows"),
        Row::paired(
            format!("11 heartbeat: PostgreSQL CPU per period, 1 vs {many} live sessions"),
            "1 live session",
            format!("{many} live sessions"),
            "ms",
            &[(few.server_cpu_ms, lots.server_cpu_ms)],
            Goal::None,
        )
        .note(format!(
            "user + system time of this cluster's postmaster, its live children and (through the postmaster's reaped-children times) those that exited, per 1 s period (10 ms ticks); the manager's own process: {:.1} ms (1) and {:.1} ms ({many}) per period",
            few.client_cpu_ms, lots.client_cpu_ms
        )),
    ])
}
