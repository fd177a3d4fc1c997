//! Benchmarks 1 and 2: SQL round trips of a whole session lifecycle, and
//! the latency of `Manager::create` against the same SQL issued by hand.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use korvus_blob::FsBlobStore;
use korvus_log::{LogHeader, LogId};
use korvus_session::{CreateSession, Manager};
use korvus_store::{IncidentId, NewIncident, SessionId, Store};
use korvus_store_sql::{PgLog, PgPool, PgStore};
use korvus_testkit::faults::FaultStore;
use korvus_workspace::ScratchRoot;
use serde_json::json;

use crate::pg::Db;
use crate::report::{quantile, Goal, Row};
use crate::runners::{FilesRunner, ParkedRunner};
use crate::Bench;

/// Benchmark 1: statements per lifecycle for N = 1, 16, 64 files.
pub(crate) async fn round_trips(b: &mut Bench) -> Result<Vec<Row>> {
    let db = Db::create("rt").await?;
    let pool = db.counted_pool(4).await?;
    let result = round_trips_on(b, &pool).await;
    pool.close().await;
    db.drop_db().await?;
    result
}

async fn round_trips_on(b: &mut Bench, pool: &PgPool) -> Result<Vec<Row>> {
    let runs = if b.quick { 1 } else { 3 };
    let blobs_dir = b.work.join("rt-blobs");
    let scratch = b.work.join("rt-scratch");
    std::fs::create_dir_all(&scratch)?;
    let blobs = Arc::new(FsBlobStore::open(&blobs_dir)?);
    let mut per_n: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut statements = serde_json::Map::new();
    for n in [1usize, 16, 64] {
        let counting = Arc::new(FaultStore::new(Arc::new(PgStore::new(pool.clone()))));
        let manager = Manager::builder(
            counting.clone(),
            Arc::new(FilesRunner {
                files: n,
                size: 1024,
            }),
        )
        .max_running(usize::MAX)
        .turn_log(Arc::new(PgLog::new(pool.clone())))
        // One replica: no cancel requests to poll for, and the poll would
        // add a statement to a lifecycle that spans one of its periods.
        .cancel_poll(Duration::from_secs(3600))
        // Likewise the heartbeat (benchmark 11 counts it on its own).
        .lease(Duration::from_secs(3 * 3600), Duration::from_secs(3600))
        .blob_store(blobs.clone())
        .scratch_root(ScratchRoot::supplied(&scratch))
        .build();
        // One lifecycle first, so every statement is prepared on the pool:
        // the count is the steady state, not the first use of a connection.
        lifecycle(&manager, &*counting).await?;
        let mut samples = Vec::new();
        for _ in 0..runs {
            let incident = counting
                .create_incident(NewIncident {
                    title: "round trips".into(),
                    workspace: None,
                })
                .await?;
            let calls_before = counting.calls().len();
            b.statements.reset();
            let session = run_one(&manager, incident.id).await?;
            let calls = counting.calls()[calls_before..].to_vec();
            let stmts = b.statements.count();
            let texts = b.statements.texts();
            let settled = counting.get_session(session).await?.status;
            if settled != korvus_store::SessionStatus::Completed {
                bail!("the lifecycle with {n} files ended {settled}");
            }
            statements.insert(
                format!("n{n}"),
                json!({
                    "store_calls": calls.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>(),
                    "postgres_statements": texts,
                }),
            );
            samples.push((calls.len(), stmts));
        }
        manager.stop().await;
        per_n.push((n, samples));
    }
    b.details.insert("1_round_trips".into(), statements.into());
    let base = &per_n[0].1;
    let mut rows = Vec::new();
    for (n, samples) in &per_n {
        let calls: Vec<(f64, f64)> = samples
            .iter()
            .zip(base)
            .map(|(s, b)| (b.0 as f64, s.0 as f64))
            .collect();
        let stmts: Vec<(f64, f64)> = samples
            .iter()
            .zip(base)
            .map(|(s, b)| (b.1 as f64, s.1 as f64))
            .collect();
        let goal = Goal::ValueAtMost {
            max: 8.0,
            ratio_max: Some(1.0),
        };
        // One statement more than calls' goal since F19: `mark_started`,
        // written right before the runner, is what lets a claim that
        // died before starting go back to the queue instead of failing.
        let stmt_goal = Goal::ValueAtMost {
            max: 9.0,
            ratio_max: Some(1.0),
        };
        rows.push(Row::paired(
            format!("1 lifecycle N={n}: Store calls"),
            "N=1",
            format!("N={n}"),
            "calls",
            &calls,
            goal,
        ).note_if(*n == 1, "counted by korvus-testkit's FaultStore around PgStore; create → runner writes N files → persist (FsBlobStore) → report → settle, pool warmed first"));
        rows.push(Row::paired(
            format!("1 lifecycle N={n}: PostgreSQL statements"),
            "N=1",
            format!("N={n}"),
            "stmts",
            &stmts,
            stmt_goal,
        ).note_if(*n == 1, "executed statements as PostgreSQL logged them (log_statement=all sent back as LOG notices), Store + PgLog; per-statement texts in report.json"));
    }
    Ok(rows)
}

/// One lifecycle on a fresh incident (used to warm up).
async fn lifecycle(manager: &Manager, store: &dyn Store) -> Result<()> {
    let incident = store
        .create_incident(NewIncident {
            title: "warm-up".into(),
            workspace: None,
        })
        .await?;
    run_one(manager, incident.id).await?;
    Ok(())
}

async fn run_one(manager: &Manager, incident: IncidentId) -> Result<SessionId> {
    let session = manager
        .create(CreateSession::new(incident, "count the round trips"))
        .await?;
    // `wait` joins the run without a store read of its own.
    manager.wait().await;
    Ok(session.id)
}

/// Benchmark 2: `Manager::create` on PostgreSQL vs the same statements by hand.
pub(crate) async fn create_latency(b: &mut Bench) -> Result<Vec<Row>> {
    let db = Db::create("create").await?;
    let pool = db.pool(8).await?;
    let result = create_latency_on(b, &pool).await;
    pool.close().await;
    db.drop_db().await?;
    result
}

async fn create_latency_on(b: &mut Bench, pool: &PgPool) -> Result<Vec<Row>> {
    let (rounds, per_round, warm) = if b.quick { (2, 20, 10) } else { (10, 100, 50) };
    let store = Arc::new(PgStore::new(pool.clone()));
    let manager = Manager::builder(store.clone(), Arc::new(ParkedRunner { barrier: None }))
        .max_running(usize::MAX)
        .turn_log(Arc::new(PgLog::new(pool.clone())))
        .build();
    let needed = 2 * (rounds * per_round + warm);
    let mut incidents = Vec::with_capacity(needed);
    for i in 0..needed {
        let incident = store
            .create_incident(NewIncident {
                title: format!("create latency {i}"),
                workspace: None,
            })
            .await?;
        incidents.push(incident.id);
    }
    let mut incidents = incidents.into_iter();
    let mut next = || incidents.next().context("ran out of incidents");
    for _ in 0..warm {
        create_ours(&manager, next()?).await?;
        create_raw(pool, next()?).await?;
    }
    let mut all_ours = Vec::new();
    let mut all_raw = Vec::new();
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    for round in 0..rounds {
        let mut ours = Vec::with_capacity(per_round);
        let mut raw = Vec::with_capacity(per_round);
        // Alternate which side goes first, and interleave within the round.
        for i in 0..per_round {
            if (round + i) % 2 == 0 {
                ours.push(create_ours(&manager, next()?).await?);
                raw.push(create_raw(pool, next()?).await?);
            } else {
                raw.push(create_raw(pool, next()?).await?);
                ours.push(create_ours(&manager, next()?).await?);
            }
        }
        p50.push((quantile(&raw, 0.5), quantile(&ours, 0.5)));
        p99.push((quantile(&raw, 0.99), quantile(&ours, 0.99)));
        all_ours.extend(ours);
        all_raw.extend(raw);
    }
    let stop = Instant::now();
    manager.stop().await;
    let stop_ms = stop.elapsed().as_secs_f64() * 1e3;
    b.details.insert(
        "2_create_latency".into(),
        json!({
            "creates_per_side": all_ours.len(),
            "overall_ms": {
                "ours_p50": quantile(&all_ours, 0.5), "ours_p99": quantile(&all_ours, 0.99),
                "raw_p50": quantile(&all_raw, 0.5), "raw_p99": quantile(&all_raw, 0.99),
            },
            "stop_ms_settling_all": stop_ms,
        }),
    );
    let what = format!(
        "{} creates per side in {rounds} rounds, interleaved one by one (order alternating), each on a fresh incident, PgStore + PgLog on one 8-connection pool; raw = the same 3 statements (incident, insert session with its seq, kind, owner and lease, insert turn log) via sqlx, its rows owned so the manager does not take them for queued work; runners park until stop",
        rounds * per_round
    );
    Ok(vec![
        Row::paired(
            "2 create latency p50",
            "raw sqlx",
            "Manager::create",
            "ms",
            &p50,
            Goal::RatioAtMost { max: 1.2 },
        )
        .note(what),
        Row::paired(
            "2 create latency p99",
            "raw sqlx",
            "Manager::create",
            "ms",
            &p99,
            Goal::RatioAtMost { max: 1.2 },
        ),
    ])
}

/// One `Manager::create` in `incident`, timed.
pub(crate) async fn create_ours(manager: &Manager, incident: IncidentId) -> Result<f64> {
    let t = Instant::now();
    manager
        .create(CreateSession::new(incident, "measure me"))
        .await?;
    Ok(ms(t.elapsed()))
}

/// What `Manager::create` makes PostgreSQL do, by hand: the statements are
/// PgStore's and PgLog's own, issued in the same order.
/// The owner of the raw side's rows: no manager's, with a lease that
/// outlasts the benchmark, so no reaper takes them over either.
static RAW_OWNER: std::sync::LazyLock<korvus_store::OwnerId> =
    std::sync::LazyLock::new(korvus_store::OwnerId::new);

async fn create_raw(pool: &PgPool, incident: IncidentId) -> Result<f64> {
    let t = Instant::now();
    let row = sqlx::query(
        "SELECT id, title, status, workspace_repo, workspace_commit, created_at \
         FROM incidents WHERE id = $1",
    )
    .bind(incident.as_uuid())
    .fetch_optional(pool)
    .await?;
    if row.is_none() {
        bail!("incident {incident} vanished");
    }
    let id = SessionId::new();
    let seq: Option<i64> = sqlx::query_scalar(
        "WITH next AS ( \
             UPDATE incidents SET last_seq = last_seq + 1 WHERE id = $2 RETURNING last_seq \
         ) \
         INSERT INTO sessions \
             (id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, \
              revision, created_at, owner, lease_expires_ms) \
         SELECT $1, $2, next.last_seq, \
                CASE WHEN next.last_seq = 1 THEN 'initial' ELSE 'follow_up' END, \
                $3, $4, $5, $6, 1, $7, $8, \
                CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + 3600000 FROM next \
         RETURNING seq",
    )
    .bind(id.as_uuid())
    .bind(incident.as_uuid())
    .bind("running")
    .bind("measure me")
    .bind(None::<String>)
    .bind(None::<String>)
    .bind(chrono_now())
    // Owned, as `Manager::create` writes it: an unowned running row is a
    // queued session, which the manager beside it would claim and run (and
    // then queue its own creates behind).
    .bind(RAW_OWNER.as_uuid())
    .fetch_optional(pool)
    .await?;
    seq.context("no seq allocated")?;
    let header = LogHeader::new(LogId::from_uuid(id.as_uuid()))
        .with_label("incident_id", incident.to_string())
        .with_label("session_id", id.to_string());
    let text = serde_json::to_string(&header)?;
    sqlx::query("INSERT INTO turn_logs (id, header, size_bytes) VALUES ($1, $2, $3)")
        .bind(id.as_uuid())
        .bind(&text)
        .bind(text.len() as i64 + 1)
        .execute(pool)
        .await?;
    Ok(ms(t.elapsed()))
}

fn chrono_now() -> sqlx::types::chrono::DateTime<sqlx::types::chrono::Utc> {
    sqlx::types::chrono::Utc::now()
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

trait NoteIf {
    fn note_if(self, cond: bool, note: &str) -> Self;
}

impl NoteIf for Row {
    fn note_if(self, cond: bool, note: &str) -> Self {
        if cond {
            self.note(note)
        } else {
            self
        }
    }
}
