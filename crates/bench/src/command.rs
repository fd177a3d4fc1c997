//! Benchmark 24: what a real `CommandRunner` session costs the host while
//! its agent sleeps. N sessions of `sleep` agents are started by one
//! `Manager` in a child process of their own (this binary with the hidden
//! `command-child` command); the host's resident memory, tokio tasks, OS
//! threads and file descriptors are read before the first create and once
//! every agent runs, and the difference is divided by N. The descriptors
//! that appeared are listed by what they point at, so
//! `docs/operations.md` can name each one. With F19's queue in front, each
//! session's create-to-start latency is read from its row.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use korvus_command::CommandRunner;
use korvus_session::{CreateSession, Manager};
use korvus_store::{MemoryStore, NewIncident, SessionId, Store};
use korvus_workspace::ScratchRoot;
use serde::{Deserialize, Serialize};

use crate::large::status_mib;
use crate::report::{quantile, Goal, Row};
use crate::Bench;

/// Sessions per incident (as benchmark 6).
const PER_INCIDENT: usize = 100;

/// What the child measured.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Sample {
    sessions: usize,
    rss_kib: (f64, f64),
    tasks: (usize, usize),
    threads: (usize, usize),
    /// Threads once idle blocking threads have exited (10 s keep-alive).
    threads_settled: usize,
    /// The threads then, by name.
    thread_names: BTreeMap<String, usize>,
    fds: (usize, usize),
    /// New descriptors by what they point at, summed over all sessions.
    fd_kinds: BTreeMap<String, usize>,
    /// Create-to-start of every session, milliseconds.
    start_ms: Vec<f64>,
    /// From the first create until every agent ran, milliseconds.
    all_started_ms: f64,
}

/// The open descriptors of this process and what each points at.
fn fds() -> Result<HashMap<u32, String>> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(n) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(target) = std::fs::read_link(entry.path()) {
            out.insert(n, target.to_string_lossy().into_owned());
        }
    }
    Ok(out)
}

/// The kind of a descriptor's target: `pipe`, `socket`, `anon_inode:[…]`,
/// or a path with session ids and numbers replaced.
fn fd_kind(target: &str, scratch: &str) -> String {
    if let Some(rest) = target.strip_prefix("anon_inode:") {
        return format!("anon_inode:{rest}");
    }
    for kind in ["pipe", "socket"] {
        if target.starts_with(&format!("{kind}:[")) {
            return kind.to_owned();
        }
    }
    if target.starts_with(scratch) {
        return "a file under the scratch root".to_owned();
    }
    if target.starts_with("/sys/fs/cgroup") {
        return "a cgroup file".to_owned();
    }
    target.to_owned()
}

fn threads() -> Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// This process's threads, counted by name.
fn thread_names() -> Result<BTreeMap<String, usize>> {
    let mut names = BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let comm = std::fs::read_to_string(task?.path().join("comm")).unwrap_or_default();
        *names.entry(comm.trim().to_owned()).or_insert(0) += 1;
    }
    Ok(names)
}

/// The child: `n` sessions of sleeping agents; prints a [`Sample`].
pub(crate) fn child(n: usize, dir: &str) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sample = rt.block_on(sessions(n, dir))?;
    println!("{}", serde_json::to_string(&sample)?);
    Ok(())
}

async fn sessions(n: usize, dir: &str) -> Result<Sample> {
    let store = Arc::new(MemoryStore::new());
    let scratch = std::path::Path::new(dir).join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let runner = CommandRunner::new("sleep").arg("600");
    let manager = Manager::builder(store.clone(), Arc::new(runner))
        .max_running(usize::MAX)
        .scratch_root(ScratchRoot::supplied(&scratch))
        .build();
    let mut incidents = Vec::new();
    for i in 0..n.div_ceil(PER_INCIDENT) {
        let title = format!("sleepers {i}");
        let new = NewIncident {
            title,
            workspace: None,
        };
        incidents.push(store.create_incident(new).await?.id);
    }
    let metrics = tokio::runtime::Handle::current().metrics();
    let rss0 = status_mib("VmRSS:")? * 1024.0;
    let (tasks0, threads0, fds0) = (metrics.num_alive_tasks(), threads()?, fds()?);
    let started = Instant::now();
    let mut ids: Vec<SessionId> = Vec::with_capacity(n);
    for i in 0..n {
        let create = CreateSession::new(incidents[i / PER_INCIDENT], "sleep");
        ids.push(manager.create(create).await?.id);
    }
    let all_started_ms = wait_started(&store, &ids, Duration::from_secs(300)).await?;
    let all_started_ms = all_started_ms.max(started.elapsed().as_secs_f64() * 1e3);
    // Let the runs settle into their wait (the agents' spawns finish).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = status_mib("VmRSS:")? * 1024.0;
    let (tasks1, threads1, fds1) = (metrics.num_alive_tasks(), threads()?, fds()?);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let threads_settled = threads()?;
    let thread_names = thread_names()?;
    let scratch_text = scratch.to_string_lossy().into_owned();
    let mut fd_kinds = BTreeMap::new();
    for (fd, target) in &fds1 {
        // The listing's own descriptor is not the sessions'.
        if fds0.get(fd) != Some(target) && !target.starts_with("/proc/") {
            *fd_kinds.entry(fd_kind(target, &scratch_text)).or_insert(0) += 1;
        }
    }
    let mut start_ms = Vec::with_capacity(n);
    for id in &ids {
        let row = store.get_session(*id).await?;
        let started_at = row.started_at.context("a session without started_at")?;
        start_ms.push(
            (started_at - row.created_at)
                .num_microseconds()
                .unwrap_or(0) as f64
                / 1e3,
        );
    }
    manager.stop().await;
    Ok(Sample {
        sessions: n,
        rss_kib: (rss0, rss1),
        tasks: (tasks0, tasks1),
        threads: (threads0, threads1),
        threads_settled,
        thread_names,
        fds: (fds0.len(), fds1.len()),
        fd_kinds,
        start_ms,
        all_started_ms,
    })
}

/// Waits until every session's row says its run started; milliseconds.
async fn wait_started(store: &MemoryStore, ids: &[SessionId], limit: Duration) -> Result<f64> {
    let t = Instant::now();
    let mut left: Vec<SessionId> = ids.to_vec();
    while !left.is_empty() {
        if t.elapsed() > limit {
            bail!("{} of {} sessions never started", left.len(), ids.len());
        }
        let mut still = Vec::new();
        for id in left {
            if store.get_session(id).await?.started_at.is_none() {
                still.push(id);
            }
        }
        left = still;
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// Benchmark 24.
pub(crate) async fn command_sessions(b: &mut Bench) -> Result<Vec<Row>> {
    let n = if b.quick { 20 } else { 1_000 };
    let dir = b.work.join("command-sessions");
    std::fs::create_dir_all(&dir)?;
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args(["command-child", &n.to_string()])
        .arg(&dir)
        .output()
        .context("running the command child")?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        bail!(
            "command child failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let s: Sample = serde_json::from_str(line.trim())
        .with_context(|| format!("command child printed {line:?}"))?;
    let each = |a: f64, b: f64| (b - a) / n as f64;
    let rss = each(s.rss_kib.0, s.rss_kib.1);
    let tasks = each(s.tasks.0 as f64, s.tasks.1 as f64);
    let threads = each(s.threads.0 as f64, s.threads.1 as f64);
    let threads_settled = each(s.threads.0 as f64, s.threads_settled as f64);
    let fds = each(s.fds.0 as f64, s.fds.1 as f64);
    let kinds = s
        .fd_kinds
        .iter()
        .map(|(k, c)| format!("{k}: {:.2}", *c as f64 / n as f64))
        .collect::<Vec<_>>()
        .join(", ");
    let (p50, p99) = (quantile(&s.start_ms, 0.5), quantile(&s.start_ms, 0.99));
    b.details
        .insert("24_command_sessions".into(), serde_json::to_value(&s)?);
    let value = |max| Goal::ValueAtMost {
        max,
        ratio_max: None,
    };
    Ok(vec![
        Row::paired(
            format!("24 command sessions: {n} sleeping agents, host RSS per session"),
            "KiB (none expected)",
            "VmRSS growth / sessions",
            "KiB",
            &[(0.0, rss)],
            value(64.0),
        )
        .note("CommandRunner running `sleep 600` per session, MemoryStore + MemoryLog, a scratch dir each; one child process; read 2 s after every row said started"),
        Row::paired(
            format!("24 command sessions: {n} sleeping agents, tokio tasks per session"),
            "tasks (none expected)",
            "alive tasks / sessions",
            "tasks",
            &[(0.0, tasks)],
            value(4.0),
        ),
        Row::paired(
            format!("24 command sessions: {n} sleeping agents, OS threads per session"),
            "threads (none expected)",
            "threads / sessions, 13 s after (idle blocking threads gone)",
            "threads",
            &[(threads, threads_settled)],
            Goal::None,
        )
        .note(format!(
            "baseline column: right after every run started ({} → {} threads); ours: after the blocking pool's 10 s keep-alive ({}: {:?}); the extra threads are tokio's blocking pool, sized by the burst of starts and kept by the trickle of blocking checks, not one per session",
            s.threads.0, s.threads.1, s.threads_settled, s.thread_names
        )),
        Row::paired(
            format!("24 command sessions: {n} sleeping agents, file descriptors per session"),
            "descriptors (none expected)",
            "open descriptors / sessions",
            "fds",
            &[(0.0, fds)],
            Goal::None,
        )
        .note(format!("new descriptors per session by target: {kinds}")),
        Row::paired(
            format!("24 command sessions: create to start, {n} at once"),
            "p50",
            "p99",
            "ms",
            &[(p50, p99)],
            Goal::None,
        )
        .note(format!(
            "started_at − created_at of each row (max_running unbounded); all {n} running {:.0} ms after the first create",
            s.all_started_ms
        )),
    ])
}
