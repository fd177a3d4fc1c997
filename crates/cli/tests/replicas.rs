//! Several `korvus` processes on one database, as replicas: one is
//! SIGKILLed mid-run, and a surviving one — another process — takes its
//! sessions over, salvages what their agents had written (the scratch
//! dirs are on this host), settles each `owner_lost` exactly once with a
//! report row holding the salvaged `report.md`. The dead replica's agents
//! died with it (their PID namespaces end with korvus). On SQLite (one
//! data dir) and on PostgreSQL (a database of its own; scratch dirs and
//! bytes still in the shared data dir, as on one host).

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::{korvus, ok, running, script, session_id, unique_sleep, NO_CGROUP};

/// The lease of every replica: a ttl of 2 s, renewed every 0.5 s.
/// The lease, and no resume: these replicas settle what a dead one ran.
const LEASE: [&str; 6] = [
    "--lease-ttl",
    "2",
    "--heartbeat",
    "0.5",
    "--resume-orphans",
    "0",
];

/// A replica: `korvus run` whose agent sleeps until killed.
struct Replica {
    process: Child,
    session: String,
    nap: String,
}

fn start(data: &Path, env: &[(&str, &str)], name: &str) -> Replica {
    let nap = unique_sleep();
    // Like an agent part-way through: a report and a progress file
    // written, more work to do.
    let agent = script(
        data,
        &format!("{name}.sh"),
        &format!(
            "printf '# findings of {name}\\n' > report.md\nmkdir -p work\n\
             echo 'step 3 of 5' > work/progress.txt\necho 'agent is working'\nexec sleep {nap}\n"
        ),
    );
    let (process, seen) = crate::support::spawn_until_working(
        korvus(data)
            .envs(env.iter().copied())
            .args(LEASE)
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(NO_CGROUP)
            .arg(name)
            .stderr(Stdio::null()),
    );
    Replica {
        process,
        session: session_id(&seen),
        nap,
    }
}

/// `korvus show` of a session, polled until it no longer runs (or 30 s).
fn ended(data: &Path, env: &[(&str, &str)], id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let show = ok(korvus(data).envs(env.iter().copied()).args(["show", id]));
        if !show.contains("status     running") || Instant::now() > deadline {
            return show;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills three replicas mid-run while a fourth survives; checks what the
/// survivor did, from the rows (`korvus show`) and the process table.
fn killed_replicas_are_settled_by_a_survivor(data: &Path, env: &[(&str, &str)]) {
    let mut survivor = start(data, env, "survivor");
    let mut victims: Vec<Replica> = (0..3)
        .map(|i| start(data, env, &format!("victim{i}")))
        .collect();
    // The survivor reaps only after a ttl of its own healthy heartbeats.
    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    for v in &mut victims {
        v.process.kill().expect("SIGKILL");
        let _ = v.process.wait();
    }
    // Within 2 s of the kill, before any takeover.
    for v in &victims {
        while running(&format!("sleep {}", v.nap)) {
            assert!(
                killed.elapsed() < Duration::from_secs(2),
                "an agent outlived its replica by 2 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for v in &victims {
        let show = ended(data, env, &v.session);
        let latency = killed.elapsed();
        eprintln!("session {} settled {latency:?} after the kill", v.session);
        assert!(show.contains("status     failed"), "{show}");
        assert!(show.contains("exit       owner_lost"), "{show}");
        // Exactly once: one takeover (fence 1 -> 2) and one report row.
        assert!(show.contains("fence      2"), "{show}");
        let reports = show.split("\nartifacts").next().unwrap_or_default();
        assert_eq!(reports.matches("  rev ").count(), 1, "{show}");
        assert!(show.contains("rev 1   owner_lost"), "{show}");
        // What the agent wrote before the kill is stored: its report
        // adopted, its progress file an artifact, and the row says where
        // the output came from.
        assert!(!show.contains("(no report.md)"), "{show}");
        assert!(show.contains("salvaged from the scratch dir"), "{show}");
        assert!(show.contains("work/progress.txt"), "{show}");
        let report = ok(korvus(data)
            .envs(env.iter().copied())
            .args(["cat", &v.session]));
        assert!(report.contains("# findings of victim"), "{report}");
        // A loose bound, far above ttl + period (2.5 s): the latency itself
        // is measured by `cargo xtask bench`.
        assert!(latency < Duration::from_secs(30), "{latency:?}");
    }
    // The survivor's own session was never touched.
    let show = ok(korvus(data)
        .envs(env.iter().copied())
        .args(["show", &survivor.session]));
    assert!(show.contains("status     running"), "{show}");
    assert!(show.contains("fence      1"), "{show}");
    let cancelled = ok(korvus(data)
        .envs(env.iter().copied())
        .args(["cancel", &survivor.session]));
    assert!(cancelled.contains("cancelled"), "{cancelled}");
    let status = survivor.process.wait().expect("the survivor exits");
    assert_eq!(status.code(), Some(4), "cancelled");
    assert!(!running(&format!("sleep {}", survivor.nap)));
}

#[test]
fn sqlite_replicas_settle_a_killed_replicas_sessions_owner_lost_once() {
    let data = tempfile::tempdir().expect("temp dir");
    killed_replicas_are_settled_by_a_survivor(data.path(), &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_settle_a_killed_replicas_sessions_owner_lost_once() {
    crate::services::with_postgres("korvus_cli_replicas", |url| {
        let data = tempfile::tempdir().expect("temp dir");
        killed_replicas_are_settled_by_a_survivor(data.path(), &[("KORVUS_DATABASE_URL", url)]);
    })
    .await;
}
