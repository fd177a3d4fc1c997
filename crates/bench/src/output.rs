//! Benchmark 8: how fast an agent's stdout reaches each turn log. A
//! `CommandRunner` agent prints numbered lines as fast as it can and exits;
//! the baseline is the same program with its stdout written to a file (what
//! `cat` of the output into a file costs). Two shapes:
//!
//! - **live**: many lines; the agent is paced by the pipe, so most lines
//!   are stored while it runs;
//! - **at exit**: few enough lines to fit in the pipe's buffer, so the
//!   agent exits at once and its whole output goes through the exit drain.
//!
//! Each run also checks that every line was stored.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use korvus_blob::MemoryBlobStore;
use korvus_command::{CommandRunner, OutputCaps};
use korvus_log::{Access, EventKind, JsonlLog, LogId, TurnLog};
use korvus_session::{CreateSession, Manager};
use korvus_store::{MemoryStore, NewIncident, SessionStatus, Store};
use korvus_store_sql::{PgLog, SqliteLog};
use korvus_workspace::ScratchRoot;

use crate::pg::Db;
use crate::report::{Goal, Row};
use crate::Bench;

/// The program both sides run.
fn program(lines: u64) -> String {
    format!("seq 1 {lines}")
}

/// Milliseconds of the program with its stdout in a file.
fn baseline(b: &Bench, lines: u64) -> Result<f64> {
    let path = b.work.join("output-baseline.txt");
    let file = std::fs::File::create(&path)?;
    let started = Instant::now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(program(lines))
        .stdout(file)
        .status()?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        bail!("the baseline program failed: {status}");
    }
    Ok(ms)
}

/// Milliseconds from `create` to the settled row of a session whose agent
/// prints `lines` lines into `logs`; fails unless every line was stored.
async fn ours(b: &Bench, logs: Arc<dyn TurnLog>, lines: u64) -> Result<f64> {
    let store = Arc::new(MemoryStore::new());
    let scratch = b.work.join("output-scratch");
    std::fs::create_dir_all(&scratch)?;
    let runner = CommandRunner::new("sh")
        .arg("-c")
        .arg(format!("{}\necho '# R' > report.md", program(lines)))
        .output_caps({
            let mut v = OutputCaps::default();
            v.max_events = lines.max(OutputCaps::default().max_events);
            v
        });
    let manager = Manager::builder(store.clone(), Arc::new(runner))
        .max_running(usize::MAX)
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::clone(&logs))
        .scratch_root(ScratchRoot::supplied(&scratch))
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "bench".into(),
            workspace: None,
        })
        .await?;
    let started = Instant::now();
    let session = manager
        .create(CreateSession::new(incident.id, "print"))
        .await?;
    let row = manager
        .await_settled(session.id, Duration::from_secs(600))
        .await?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    manager.stop().await;
    if row.status != SessionStatus::Completed {
        bail!("the session ended {:?}", row);
    }
    let log = logs
        .open(LogId::from_uuid(session.id.as_uuid()), Access::Read)
        .await?;
    let stored = log
        .read(0, None)
        .await?
        .iter()
        // The agent's lines: the prompt is the log's first, a user message.
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Message {
                    role: korvus_log::Role::Assistant,
                    ..
                }
            )
        })
        .count() as u64;
    if stored != lines {
        bail!("{stored} of {lines} lines stored");
    }
    Ok(ms)
}

pub(crate) async fn agent_output(b: &mut Bench) -> Result<Vec<Row>> {
    let (live, exit, runs) = if b.quick {
        (20_000, 2_000, 1)
    } else {
        (200_000, 5_000, 3)
    };
    let dir = b.work.join("output-logs");
    std::fs::create_dir_all(&dir)?;
    let pg = Db::create("output").await?;
    let pool = pg.pool(4).await?;
    let sqlite = crate::fixtures::sqlite(&dir.join("log.db")).await?;
    let backends: [(&str, Arc<dyn TurnLog>); 3] = [
        ("JsonlLog", Arc::new(JsonlLog::open_dir(dir.join("jsonl"))?)),
        ("SqliteLog", Arc::new(SqliteLog::new(sqlite.clone()))),
        ("PgLog", Arc::new(PgLog::new(pool.clone()))),
    ];
    let mut rows = Vec::new();
    for (name, logs) in backends {
        for (shape, lines) in [("live", live), ("at exit", exit)] {
            let mut pairs = Vec::with_capacity(runs);
            for run in 0..runs {
                // A and B alternate which goes first.
                let pair = if run % 2 == 0 {
                    let base = baseline(b, lines)?;
                    (base, ours(b, Arc::clone(&logs), lines).await?)
                } else {
                    let ours = ours(b, Arc::clone(&logs), lines).await?;
                    (baseline(b, lines)?, ours)
                };
                pairs.push(pair);
            }
            let rate = |ms: f64| lines as f64 / (ms / 1e3);
            let median =
                crate::report::quantile(&pairs.iter().map(|p| p.1).collect::<Vec<_>>(), 0.5);
            rows.push(
                Row::paired(
                    format!("8 agent stdout → {name}, {shape}: {lines} lines"),
                    "the same program, stdout into a file",
                    format!("a session whose agent prints them, into {name}"),
                    "ms",
                    &pairs,
                    Goal::None,
                )
                .note(format!(
                    "{:.0} lines/s stored (median), every line checked",
                    rate(median)
                )),
            );
        }
    }
    sqlite.close().await;
    pool.close().await;
    pg.drop_db().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}
