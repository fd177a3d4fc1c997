//! Benchmark 15: admission on PostgreSQL — a burst of creates queued and
//! worked off by 1, 2 and 4 replica processes.
//!
//! The replicas are child processes of this binary (`admission-child`),
//! connected and waiting. The parent creates every session through a
//! manager that claims nothing (each create timed: it answers without
//! waiting for a slot, and all but the first are queued), then lets the
//! replicas go. Every runner sleeps `work` and completes. Measured, per
//! number of replicas: create p50 and p99, the time from the go until
//! every session settled against the ideal — `sessions × work /
//! (replicas × max_running)`, what perfectly packed slots would take —
//! and sessions per second. Figures are reported, not gated: 4 replicas
//! and PostgreSQL on 2 cores measure contention.

use korvus_store::StoreExt as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use korvus_blob::MemoryBlobStore;
use korvus_runner::testing::ScriptRunner;
use korvus_runner::RunOutcome;
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, Counters, NewIncident};
use korvus_store_sql::{PgLog, PgStore};

use crate::pg::Db;
use crate::report::{quantile, Goal, Row};
use crate::Bench;

/// One replica of the pool: `max_running` slots, runners that take
/// `work`.
fn replica(store: Arc<dyn CoordinatedStore>, logs: PgLog, max: usize, work: Duration) -> Manager {
    let runner = ScriptRunner::new(move |_, _| async move {
        tokio::time::sleep(work).await;
        Ok(RunOutcome::completed(Counters::default()))
    });
    Manager::builder(store, Arc::new(runner))
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::new(logs))
        .max_running(max)
        .cancel_poll(Duration::from_millis(100))
        .build()
}

/// The child: a replica on database `name` until its stdin closes.
pub(crate) fn child(name: &str, max: usize, work_ms: u64) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let db = Db::existing(name)?;
        let pool = db.pool(4).await?;
        let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(pool.clone()));
        println!("ready");
        std::io::stdout().flush()?;
        // The parent says go (a line), then closes our stdin to stop us.
        let (go_tx, go_rx) = tokio::sync::oneshot::channel();
        let stdin = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            let mut go = Some(go_tx);
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Some(go) = go.take() {
                    let _ = go.send(());
                }
                line.clear();
            }
        });
        let _ = go_rx.await;
        let manager = replica(
            store,
            PgLog::new(pool.clone()),
            max,
            Duration::from_millis(work_ms),
        );
        stdin.await?;
        manager.stop().await;
        pool.close().await;
        Ok(())
    })
}

/// Child replicas, stopped (stdin closed, then waited for) when dropped.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            drop(c.stdin.take());
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

fn spawn(name: &str, max: usize, work: Duration) -> Result<Child> {
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "admission-child",
            name,
            &max.to_string(),
            &work.as_millis().to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting an admission child")?;
    let mut ready = String::new();
    BufReader::new(child.stdout.take().context("child stdout")?).read_line(&mut ready)?;
    if ready.trim() != "ready" {
        bail!("admission child said {ready:?}");
    }
    Ok(child)
}

/// One measurement: `replicas` replicas work off `n` sessions.
struct Sample {
    create_ms: Vec<f64>,
    all_settled_ms: f64,
}

async fn one(replicas: usize, n: usize, max: usize, work: Duration) -> Result<Sample> {
    let db = Db::create("admission").await?;
    let pool = db.pool(8).await?;
    let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(pool.clone()));
    let mut children = Children(
        (0..replicas)
            .map(|_| spawn(&db.name, max, work))
            .collect::<Result<_>>()?,
    );
    // Creates only: its one slot runs the first session, the rest queue.
    let runner = ScriptRunner::new(move |_, _| async move {
        tokio::time::sleep(work).await;
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = Manager::builder(Arc::clone(&store), Arc::new(runner))
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::new(PgLog::new(pool.clone())))
        .max_running(1)
        .claim_queued(false)
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "burst".into(),
            workspace: None,
        })
        .await?;
    let mut create_ms = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        manager
            .create(CreateSession::new(incident.id, format!("job {i}")))
            .await?;
        create_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let started = Instant::now();
    for c in &mut children.0 {
        writeln!(c.stdin.as_mut().context("child stdin")?, "go")?;
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let sessions = store.all_sessions(incident.id).await?;
        if sessions.iter().all(|s| s.status.is_terminal()) {
            break;
        }
        if Instant::now() > deadline {
            bail!("sessions still running after 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_settled_ms = started.elapsed().as_secs_f64() * 1e3;
    manager.stop().await;
    drop(children);
    pool.close().await;
    db.drop_db().await?;
    Ok(Sample {
        create_ms,
        all_settled_ms,
    })
}

/// Benchmark 15.
pub(crate) async fn admission(b: &mut Bench) -> Result<Vec<Row>> {
    let (n, max, work) = if b.quick {
        (40, 4, Duration::from_millis(10))
    } else {
        (1000, 16, Duration::from_millis(50))
    };
    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();
    for replicas in [1, 2, 4] {
        let s = one(replicas, n, max, work).await?;
        let ideal = (n as f64) * work.as_secs_f64() * 1e3 / (replicas * max) as f64;
        let per_s = n as f64 / (s.all_settled_ms / 1e3);
        let (p50, p99) = (quantile(&s.create_ms, 0.5), quantile(&s.create_ms, 0.99));
        details.insert(
            format!("{replicas}_replicas"),
            serde_json::json!({
                "sessions": n, "max_running": max, "work_ms": work.as_millis(),
                "create_p50_ms": p50, "create_p99_ms": p99,
                "all_settled_ms": s.all_settled_ms, "ideal_ms": ideal,
                "sessions_per_s": per_s,
            }),
        );
        rows.push(
            Row::paired(
                format!("15 admission, {replicas} replica(s): {n} sessions all settled"),
                "ideal: sessions × work / (replicas × max_running)",
                "go -> every row terminal",
                "ms",
                &[(ideal, s.all_settled_ms)],
                Goal::None,
            )
            .note(format!(
                "PostgreSQL; max_running {max} per replica, runners sleep {} ms; {per_s:.0} sessions/s; every session queued first, then the replicas (processes of this binary) let go",
                work.as_millis()
            )),
        );
        rows.push(
            Row::paired(
                format!("15 admission, {replicas} replica(s): create latency"),
                "p50",
                "p99",
                "ms",
                &[(p50, p99)],
                Goal::None,
            )
            .note(
                "Manager::create of a burst that is queued (no slot free): it never waits for one",
            ),
        );
    }
    b.details
        .insert("15_admission".into(), serde_json::Value::Object(details));
    Ok(rows)
}
