//! Per-run limits through a cgroup of the run's own (v1 on the development
//! and CI hosts; the v2 code path is unit-tested against a fake cgroupfs):
//! memory, tasks, scratch size and stall end the run with their exit
//! reason and keep what it wrote; the defaults hold; nothing a run started
//! outlives its settle, however it ends; required limits that cannot be had
//! fail the run before its program starts.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use korvus_blob::MemoryBlobStore;
use korvus_command::{CommandRunner, Limits};
use korvus_log::EventKind;
use korvus_runner::exit;
use korvus_runner::{RunContext, RunError, RunOutcome, Runner};
use korvus_session::{CreateSession, Manager};
use korvus_store::{MemoryStore, NewIncident, Session, SessionStatus, Store};
use korvus_workspace::ScratchRoot;

use crate::support::{eventually, harness, harness_with, running, sh, unique_sleep, Harness};

/// Whether cgroups can be used here (root, on a host with a writable
/// hierarchy). Under `cargo xtask test` (`KORVUS_REQUIRE_SERVICES=1`) they
/// must: these tests fail instead of skipping.
fn cgroups() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        assert!(
            std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "the limit tests need root (a writable cgroup); `cargo xtask test` must run as root"
        );
        eprintln!("skipped: the limit tests need root (a writable cgroup)");
    }
    root
}

/// Fast checks.
fn fast() -> Limits {
    Limits::default().poll(Duration::from_millis(100))
}

fn reason(row: &Session) -> &str {
    row.exit_reason.as_deref().unwrap_or_default()
}

/// The final summary note of the run.
async fn summary(h: &Harness, row: &Session) -> String {
    h.texts(row.id)
        .await
        .into_iter()
        .rev()
        .find(|t| t.contains("exit reason"))
        .unwrap_or_default()
}

/// The number after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The prompt `hog` allocates 1 GiB after writing a file; any other
/// prompt uses 64 MiB a few times over and completes.
const HOG: &str = r#"
    read prompt
    if [ "$prompt" = hog ]; then
        echo kept > before.txt
        grep -E 'memory|pids' /proc/self/cgroup
        python3 -c "x = b'x' * (1 << 30); print('allocated')"
        sleep 30
    else
        for i in 1 2 3; do python3 -c "x = b'x' * (64 << 20)"; done
        echo '# ok' > report.md
    fi
"#;

#[tokio::test]
async fn a_memory_hog_ends_memory_exceeded_its_files_kept_and_a_neighbour_completes() {
    if !cgroups() {
        return;
    }
    let runner = sh(HOG).limits(fast().memory(Some(256 << 20)));
    let h = harness(runner).await;
    let hog = h.start("hog").await;
    let neighbour = h
        .manager
        .create(CreateSession::new(h.incident, "neighbour"))
        .await
        .expect("create");
    let started = Instant::now();
    let row = h.settled(hog.id).await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert_eq!(reason(&row), exit::MEMORY_EXCEEDED);
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the sleep was cut"
    );
    let texts = h.texts(row.id).await;
    assert!(!texts.iter().any(|t| t == "allocated"), "{texts:?}");
    // The agent joined its run's cgroups before its program ran.
    let pid = std::process::id();
    for controller in ["memory", "pids"] {
        assert!(
            texts.iter().any(|t| t.contains(controller)
                && t.contains(&format!("/korvus.{pid}-"))
                && t.contains(&format!("/runs/run-{}", hog.id))),
            "{controller}: {texts:?}"
        );
    }
    let artifacts = h.store_artifacts(row.id).await;
    assert!(
        artifacts.contains(&"before.txt".to_owned()),
        "{artifacts:?}"
    );
    // The neighbour, started beside the hog under the same limit, is
    // untouched by it.
    let neighbour = h.settled(neighbour.id).await;
    assert_eq!(neighbour.status, SessionStatus::Completed, "{neighbour:?}");
    h.stop().await;
}

/// Starts `n` sleepers from Python, printing how many started.
fn sleepers(n: u32, arg: &str) -> String {
    format!(
        r#"python3 -c "
import subprocess
ps = []
for i in range({n}):
    try:
        ps.append(subprocess.Popen(['sleep', '{arg}']))
    except OSError:
        pass
print('started', len(ps))
"
echo '# ok' > report.md"#
    )
}

/// Starts `n` sleepers under `limits` (whose task limit is `limit`): fewer
/// than `limit` start, the cgroup's peak stays within it, and none is left
/// after the run.
async fn stays_within(n: u32, limit: u64, limits: Limits) {
    let arg = unique_sleep();
    let h = harness(sh(&sleepers(n, &arg)).limits(limits)).await;
    let row = h.run("sleepers").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    let started = texts
        .iter()
        .find_map(|t| number_after(t, "started "))
        .unwrap_or_else(|| panic!("{texts:?}"));
    assert!(
        started < limit,
        "{started} sleepers under a limit of {limit}"
    );
    let note = summary(&h, &row).await;
    let peak = number_after(&note, "tasks peak ").unwrap_or_else(|| panic!("{note}"));
    assert!(
        peak <= limit && note.contains(&format!("of {limit}")),
        "{note}"
    );
    eventually("the sleepers are gone", || {
        !running(&format!("sleep {arg}"))
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn a_fork_loop_never_exceeds_its_task_limit() {
    if !cgroups() {
        return;
    }
    stays_within(200, 64, fast().tasks(Some(64))).await;
}

#[tokio::test]
async fn a_full_scratch_dir_ends_disk_quota_exceeded_within_a_poll() {
    let runner = sh("echo kept > before.txt; echo \"writing $(date +%s%N)\"; \
         dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; sleep 30")
    .limits(fast().scratch(Some(64 << 20)));
    let h = harness(runner).await;
    let took = ends_failed_keeping_its_file(&h, exit::DISK_QUOTA_EXCEEDED).await;
    assert!(
        took < Duration::from_secs(25),
        "the sleep was cut: {took:?}"
    );
    // From the moment the agent began writing to the moment its run was
    // stopped (the summary note, written once its processes are gone):
    // writing 100 MiB, one poll (100 ms), one walk of a two-file tree.
    // Landing the files afterwards is not the limit's business.
    let row = h.store.all_sessions(h.incident).await.expect("sessions")[0].clone();
    let events = h.events(row.id).await;
    let texts = h.texts(row.id).await;
    let writing: i64 = texts
        .iter()
        .find_map(|t| t.strip_prefix("writing ")?.trim().parse().ok())
        .expect("the agent's timestamp");
    let stopped = events
        .iter()
        .find(|e| matches!(&e.kind, EventKind::Note { text } if text.contains("exit reason")))
        .and_then(|e| e.at)
        .expect("the summary note")
        .timestamp_nanos_opt()
        .expect("ns");
    let after = Duration::from_nanos(u64::try_from(stopped - writing).unwrap_or(0));
    assert!(
        after < Duration::from_secs(3),
        "stopped {after:?} after the agent began to fill its scratch dir: {texts:?}"
    );
    h.stop().await;
}

/// Runs a session to its end and checks it ended `failed` / `reason`
/// with `before.txt` harvested; returns how long it took.
async fn ends_failed_keeping_its_file(h: &Harness, reason_: &str) -> Duration {
    let started = Instant::now();
    let row = h.run("limit").await;
    let took = started.elapsed();
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert_eq!(reason(&row), reason_);
    let artifacts = h.store_artifacts(row.id).await;
    assert!(
        artifacts.contains(&"before.txt".to_owned()),
        "{artifacts:?}"
    );
    took
}

#[tokio::test]
async fn a_silent_idle_agent_ends_stalled() {
    let runner = sh("echo started; echo kept > before.txt; sleep 60")
        .limits(fast().stall(Some(Duration::from_secs(2))));
    let h = harness(runner).await;
    let took = ends_failed_keeping_its_file(&h, exit::STALLED).await;
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_busy_silent_agent_is_not_stalled() {
    // CPU time counts as activity: a second of computing with no output.
    let runner = sh("i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; echo '# ok' > report.md")
        .limits(fast().stall(Some(Duration::from_millis(800))));
    let h = harness(runner).await;
    let row = h.run("busy").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    h.stop().await;
}

#[tokio::test]
async fn by_default_three_thousand_sleepers_never_exceed_1024_tasks() {
    if !cgroups() {
        return;
    }
    stays_within(3000, 1024, Limits::default()).await;
}

#[tokio::test]
async fn by_default_holding_six_gib_never_exceeds_four_gib() {
    if !cgroups() {
        return;
    }
    let runner = sh("python3 -c \"x = b'x' * (6 << 30); print('held')\"; sleep 30");
    let h = harness(runner).await;
    let row = h.run("hold").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert_eq!(reason(&row), exit::MEMORY_EXCEEDED);
    let note = summary(&h, &row).await;
    let peak = note
        .split("memory peak ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|m| m.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{note}"));
    assert!(peak <= 4096.0, "{note}");
    assert!(note.contains("of 4096.0 MiB"), "{note}");
    h.stop().await;
}

#[tokio::test]
async fn required_limits_on_a_directory_that_is_not_a_cgroup_fail_before_the_program() {
    let fake = tempfile::tempdir().expect("temp dir");
    let marker = tempfile::tempdir().expect("temp dir");
    let script = format!(
        "touch {}/started; echo '# ok' > report.md",
        marker.path().display()
    );
    let required = fast().cgroup_root(fake.path()).required();
    let h = harness(sh(&script).limits(required)).await;
    let row = h.run("required").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert!(
        !marker.path().join("started").exists(),
        "the agent never ran"
    );
    let texts = h.texts(row.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.contains("limits are required but not in force")
                && t.contains("is not a cgroup")),
        "{texts:?}"
    );
    h.stop().await;
    // Not required: the run goes on, and says the limits are not in force.
    let h = harness(sh(&script).limits(fast().cgroup_root(fake.path()))).await;
    let row = h.run("degraded").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(
        texts.iter().any(|t| t.starts_with("limits not in force")),
        "{texts:?}"
    );
    h.stop().await;
}

/// Starts a `setsid` daemon and a double-forked one (each a `sleep` with
/// `arg`), writes the report, then does `then`.
fn daemons(arg: &str, then: &str) -> String {
    format!(
        "setsid sleep {arg} >/dev/null 2>&1 < /dev/null &
         ( ( sleep {arg} >/dev/null 2>&1 < /dev/null & ) & )
         until [ \"$(pgrep -fc '^sleep {arg}')\" -ge 2 ]; do sleep 0.05; done
         echo '# r' > report.md; echo daemons; {then}"
    )
}

/// A runner that panics a second into the inner run (dropping it).
#[derive(Debug)]
struct PanicsMidRun(CommandRunner);

#[async_trait]
impl Runner for PanicsMidRun {
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
        tokio::select! {
            r = self.0.run(ctx) => r,
            // Long enough for the test to see the daemons run first.
            () = tokio::time::sleep(Duration::from_secs(3)) => panic!("the runner panics mid-run"),
        }
    }

    async fn resume(&self, ctx: RunContext, _message: String) -> Result<RunOutcome, RunError> {
        self.run(ctx).await
    }
}

/// One way a run ends, for the daemons test.
struct Ending {
    case: &'static str,
    /// What the agent does once its daemons run.
    then: &'static str,
    limits: Limits,
    /// The runner's own timeout.
    timeout: Option<Duration>,
    /// The manager's run timeout.
    run_timeout: Option<Duration>,
    reason: &'static str,
}

fn endings() -> [Ending; 6] {
    let ending = |case, then, reason| Ending {
        case,
        then,
        limits: fast(),
        timeout: None,
        run_timeout: None,
        reason,
    };
    [
        // A second before it exits: the test must see the daemons run
        // before the run's end stops them.
        ending("completed", "sleep 1; exit 0", exit::COMPLETED),
        Ending {
            timeout: Some(Duration::from_secs(2)),
            ..ending("runner timeout", "sleep 60", exit::TIMEOUT)
        },
        Ending {
            run_timeout: Some(Duration::from_secs(2)),
            ..ending("manager run timeout", "sleep 60", exit::TIMEOUT)
        },
        ending("cancelled", "sleep 60", exit::CANCELLED),
        Ending {
            limits: fast().stall(Some(Duration::from_secs(1))),
            ..ending("stalled", "sleep 60", exit::STALLED)
        },
        Ending {
            limits: fast().memory(Some(64 << 20)),
            ..ending(
                "memory",
                "sleep 1; python3 -c \"x = b'x' * (1 << 30)\"; sleep 60",
                exit::MEMORY_EXCEEDED,
            )
        },
    ]
}

#[tokio::test]
async fn daemons_of_an_agent_are_gone_after_the_settle_however_the_run_ends() {
    if !cgroups() {
        return;
    }
    for e in endings() {
        let arg = unique_sleep();
        let mut runner = sh(&daemons(&arg, e.then)).limits(e.limits);
        if let Some(t) = e.timeout {
            runner = runner.timeout(t);
        }
        let h = harness_with(runner, |b| match e.run_timeout {
            Some(t) => b.run_timeout(t),
            None => b,
        })
        .await;
        let s = h.start(e.case).await;
        let pattern = format!("sleep {arg}");
        eventually("the daemons run", || running(&pattern)).await;
        if e.case == "cancelled" {
            h.manager.cancel(s.id).await.expect("cancel");
        }
        let row = h.settled(s.id).await;
        assert_eq!(reason(&row), e.reason, "{}: {row:?}", e.case);
        assert!(
            !running(&pattern),
            "{}: a daemon outlived the settle ({row:?})",
            e.case
        );
        h.stop().await;
    }
    // The runner panics: the dropped run's cgroup kills everything.
    let arg = unique_sleep();
    let root = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(MemoryStore::new());
    let runner = PanicsMidRun(sh(&daemons(&arg, "sleep 60")).limits(fast()));
    let manager = Manager::builder(store.clone(), Arc::new(runner))
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .scratch_root(ScratchRoot::supplied(root.path()))
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "panic".into(),
            workspace: None,
        })
        .await
        .expect("incident");
    let s = manager
        .create(CreateSession::new(incident.id, "panic"))
        .await
        .expect("create");
    let pattern = format!("sleep {arg}");
    eventually("the daemons run", || running(&pattern)).await;
    let row = manager
        .await_settled(s.id, Duration::from_secs(60))
        .await
        .expect("settled");
    assert_eq!(row.exit_reason.as_deref(), Some(exit::PANICKED), "{row:?}");
    assert!(!running(&pattern), "a daemon outlived the panic");
    manager.stop().await;
}

#[tokio::test]
async fn limits_none_makes_no_cgroup() {
    let h = harness_with(
        sh("cat /proc/self/cgroup; echo '# ok' > report.md").limits(Limits::none()),
        |b| b,
    )
    .await;
    let row = h.run("none").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(!texts.iter().any(|t| t.contains("/runs/run-")), "{texts:?}");
    assert!(!texts.iter().any(|t| t.starts_with("limits")), "{texts:?}");
    h.stop().await;
}
