//! Benchmark 6: many concurrent sessions on memory backends — resident
//! memory per running session and the time `stop` takes to settle them all.
//!
//! Each measurement runs in a child process of its own (this binary with
//! the hidden `scale-child` command), so the heap the other benchmarks
//! left behind cannot hide or inflate the growth. The baseline is the same
//! number of bare tokio tasks parked on the same kind of barrier.

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use korvus_session::{CreateSession, Manager};
use korvus_store::{forced_cancel, MemoryStore, NewIncident, NewSession, SessionId, Store};
use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use crate::report::{Goal, Row};
use crate::runners::ParkedRunner;
use crate::sql::ms;
use crate::Bench;

/// Sessions per incident: `create` lists the incident's sessions, so one
/// incident for all of them would make the benchmark quadratic.
const PER_INCIDENT: usize = 100;

/// What one child measured.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Sample {
    rss_before_kib: u64,
    rss_parked_kib: u64,
    stop_ms: f64,
}

impl Sample {
    fn kib_each(&self, n: usize) -> f64 {
        self.rss_parked_kib.saturating_sub(self.rss_before_kib) as f64 / n as f64
    }
}

/// `VmRSS` of this process, in KiB.
fn rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")
}

/// The child: `ours` or `baseline` with `n` parked runs; prints a [`Sample`].
pub(crate) fn child(kind: &str, n: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sample = rt.block_on(async {
        match kind {
            "ours" => ours(n).await,
            "baseline" => baseline(n).await,
            "fair" => fair(n).await,
            other => bail!("unknown scale child {other}"),
        }
    })?;
    println!("{}", serde_json::to_string(&sample)?);
    Ok(())
}

async fn ours(n: usize) -> Result<Sample> {
    let store = Arc::new(MemoryStore::new());
    let mut incidents = Vec::new();
    for i in 0..n.div_ceil(PER_INCIDENT) {
        incidents.push(
            store
                .create_incident(NewIncident {
                    title: format!("scale {i}"),
                    workspace: None,
                })
                .await?
                .id,
        );
    }
    let barrier = Arc::new(Barrier::new(n + 1));
    let manager = Manager::builder(
        store,
        Arc::new(ParkedRunner {
            barrier: Some(barrier.clone()),
        }),
    )
    .max_running(usize::MAX)
    .build();
    let before = rss_kib()?;
    for i in 0..n {
        manager
            .create(CreateSession::new(
                incidents[i / PER_INCIDENT],
                "park until stopped",
            ))
            .await?;
    }
    barrier.wait().await;
    let parked = rss_kib()?;
    let t = Instant::now();
    manager.stop().await;
    let stop_ms = ms(t.elapsed());
    Ok(Sample {
        rss_before_kib: before,
        rss_parked_kib: parked,
        stop_ms,
    })
}

async fn baseline(n: usize) -> Result<Sample> {
    let barrier = Arc::new(Barrier::new(n + 1));
    let token = CancellationToken::new();
    let before = rss_kib()?;
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let barrier = barrier.clone();
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            token.cancelled().await;
        }));
    }
    barrier.wait().await;
    let parked = rss_kib()?;
    let t = Instant::now();
    token.cancel();
    for task in tasks {
        task.await?;
    }
    let stop_ms = ms(t.elapsed());
    Ok(Sample {
        rss_before_kib: before,
        rss_parked_kib: parked,
        stop_ms,
    })
}

/// The fair `stop` baseline: bare tasks parked the same way, each of
/// which, once cancelled, makes the two store writes a stopped session
/// makes (its report row and its settlement, on a `MemoryStore` holding
/// the same rows). Only its `stop_ms` is used.
async fn fair(n: usize) -> Result<Sample> {
    let store = Arc::new(MemoryStore::new());
    let mut writes = Vec::with_capacity(n);
    for i in 0..n.div_ceil(PER_INCIDENT) {
        let incident = store
            .create_incident(NewIncident {
                title: format!("scale {i}"),
                workspace: None,
            })
            .await?
            .id;
        for _ in 0..PER_INCIDENT.min(n - writes.len()) {
            let session = store
                .create_session(NewSession {
                    runner: None,
                    admission: Default::default(),
                    lease: None,
                    id: SessionId::new(),
                    incident_id: incident,
                    prompt: "park until stopped".into(),
                    workspace_ref: None,
                })
                .await?;
            writes.push(forced_cancel(&session, "stopped".into()));
        }
    }
    let barrier = Arc::new(Barrier::new(n + 1));
    let token = CancellationToken::new();
    let before = rss_kib()?;
    let mut tasks = Vec::with_capacity(n);
    for (settlement, report) in writes {
        let (barrier, token, store) = (barrier.clone(), token.clone(), store.clone());
        let id = report.session_id;
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            token.cancelled().await;
            store.create_report(report).await?;
            store.settle_session(id, settlement).await?;
            anyhow::Ok(())
        }));
    }
    barrier.wait().await;
    let parked = rss_kib()?;
    let t = Instant::now();
    token.cancel();
    for task in tasks {
        task.await??;
    }
    let stop_ms = ms(t.elapsed());
    Ok(Sample {
        rss_before_kib: before,
        rss_parked_kib: parked,
        stop_ms,
    })
}

fn spawn_child(kind: &str, n: usize) -> Result<Sample> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args(["scale-child", kind, &n.to_string()])
        .output()
        .context("running the scale child")?;
    if !out.status.success() {
        bail!(
            "scale child {kind} failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).with_context(|| format!("scale child printed {line:?}"))
}

pub(crate) async fn scale(b: &mut Bench) -> Result<Vec<Row>> {
    let (n, runs) = if b.quick { (200, 2) } else { (10_000, 3) };
    let mut memory = Vec::new();
    let mut stop = Vec::new();
    let mut stop_bare = Vec::new();
    let mut raw = Vec::new();
    for i in 0..runs {
        let mut kinds = ["ours", "baseline", "fair"];
        kinds.rotate_left(i % 3);
        let mut samples = std::collections::BTreeMap::new();
        for kind in kinds {
            samples.insert(kind, spawn_child(kind, n)?);
        }
        let (ours, base, fair) = (&samples["ours"], &samples["baseline"], &samples["fair"]);
        memory.push((base.kib_each(n), ours.kib_each(n)));
        stop.push((fair.stop_ms, ours.stop_ms));
        stop_bare.push((base.stop_ms, ours.stop_ms));
        raw.push(serde_json::json!({"baseline": base, "fair": fair, "ours": ours}));
    }
    b.details.insert(
        "6_scale".into(),
        serde_json::json!({ "sessions": n, "samples": raw }),
    );
    Ok(vec![
        Row::paired(
            format!("6 scale: {n} parked sessions, RSS per session"),
            "bare tokio task",
            "Manager session",
            "KiB",
            &memory,
            Goal::ValueAtMost {
                max: 8.0,
                ratio_max: None,
            },
        )
        .note(format!(
            "VmRSS growth from before the first create until every runner waits on the barrier, / {n}; MemoryStore + MemoryLog, no blob store or scratch dir; one child process per measurement"
        )),
        Row::paired(
            format!("6 scale: stop {n} parked sessions"),
            "cancel + join tasks that write a report row and a settlement",
            "Manager::stop",
            "ms",
            &stop,
            Goal::RatioAtMost { max: 10.0 },
        )
        .note("stop = cancel every run, land (persist skipped), report row, settle, release; the baseline's tasks make the same two MemoryStore writes each"),
        Row::paired(
            format!("6 scale: stop {n} parked sessions, against bare tasks (the baseline before F23)"),
            "cancel + join bare tasks",
            "Manager::stop",
            "ms",
            &stop_bare,
            Goal::None,
        )
        .note("the same runs; this baseline writes nothing; its goal was 10×"),
    ])
}
