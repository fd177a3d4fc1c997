//! Admission under a descriptor limit: a burst of 300 sessions of real
//! agent processes (`sleep 2`), all created at once, in a process whose
//! soft `RLIMIT_NOFILE` is 1,024, on SQLite rows, JSONL turn logs and
//! files. Every live run holds a few descriptors (its log file, the
//! agent's pipes): with every agent started at once (`max_running` raised
//! past 300) two thirds of them failed `runner_failed` here; with the
//! default `max_running` (64) the rest queue, and all 300 complete with
//! their report.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_blob::FsBlobStore;
use korvus_command::CommandRunner;
use korvus_log::JsonlLog;
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, NewIncident, SessionStatus};
use korvus_store_sql::{migrate, open_sqlite, SqliteStore};
use korvus_workspace::ScratchRoot;

/// Set in the child process: its data dir.
const CHILD: &str = "KORVUS_E2E_DESCRIPTORS_CHILD";
const SESSIONS: usize = 300;

/// The child: only does something when started by the test below, under
/// `ulimit -S -n 1024`. Prints its limit and what became of the sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_limited_process() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let limits = std::fs::read_to_string("/proc/self/limits").expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a descriptor limit");
    println!("{line}");
    let pool = open_sqlite(&dir.join("korvus.db")).await.expect("sqlite");
    migrate(&pool).await.expect("migrate");
    let store: Arc<dyn CoordinatedStore> = Arc::new(SqliteStore::new(pool.clone()));
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let runner = CommandRunner::new("sh").args(["-c", "echo '# slept' > report.md; exec sleep 2"]);
    let manager = Manager::builder(Arc::clone(&store), Arc::new(runner))
        .turn_log(Arc::new(
            JsonlLog::open_dir(dir.join("logs")).expect("log dir"),
        ))
        .blob_store(Arc::new(
            FsBlobStore::open(dir.join("blobs")).expect("blobs"),
        ))
        .scratch_root(ScratchRoot::supplied(&scratch))
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "storm".into(),
            workspace: None,
        })
        .await
        .expect("incident");
    // A burst: all 300 creates at once.
    let started = Instant::now();
    let creates = (0..SESSIONS).map(|i| {
        let manager = manager.clone();
        let request = CreateSession::new(incident.id, format!("sleep {i}"));
        async move {
            let asked = Instant::now();
            let s = manager.create(request).await.expect("create");
            (s, asked.elapsed())
        }
    });
    let created = futures::future::join_all(creates).await;
    let slowest = created.iter().map(|(_, d)| *d).max().unwrap_or_default();
    let sessions: Vec<_> = created.into_iter().map(|(s, _)| s).collect();
    let queued = sessions.iter().filter(|s| s.is_queued()).count();
    let (mut completed, mut reports, mut other) = (0, 0, Vec::new());
    for s in &sessions {
        let row = manager
            .await_settled(s.id, Duration::from_secs(300))
            .await
            .expect("settled");
        if row.status == SessionStatus::Completed {
            completed += 1;
        } else {
            other.push(format!("{:?}/{:?}", row.status, row.exit_reason));
        }
        let report = store.get_report(s.id, 1).await.expect("report row");
        reports += usize::from(report.markdown_key.is_some());
    }
    manager.stop().await;
    println!(
        "completed {completed} reports {reports} queued-at-create {queued} slowest-create {:?} all-settled {:?} other {other:?}",
        slowest,
        started.elapsed()
    );
}

#[test]
fn three_hundred_agents_under_a_1024_descriptor_limit_all_complete() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new("sh")
        .args(["-c", "ulimit -S -n 1024 && exec \"$0\" \"$@\""])
        .arg(exe)
        .args([
            "--exact",
            "descriptors::descriptor_limited_process",
            "--nocapture",
        ])
        .env(CHILD, dir.path())
        .env("KORVUS_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let limit = stdout
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        limit.split_whitespace().nth(3),
        Some("1024"),
        "soft limit: {limit}"
    );
    let result = stdout
        .lines()
        .find(|l| l.starts_with("completed "))
        .unwrap_or_else(|| panic!("{stdout}"));
    eprintln!("descriptors: {result}");
    assert!(
        result.starts_with(&format!("completed {SESSIONS} reports {SESSIONS} ")),
        "{result}"
    );
}
