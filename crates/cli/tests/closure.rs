//! Terminal is final, from the command line: `korvus cancel --force`
//! during a run ends it for good (on SQLite and on PostgreSQL), and `korvus
//! reap --apply` racing reopens never touches a run that is active.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::{korvus, ok, read_until, running, script, session_id, unique_sleep};

/// The value of `field` in `korvus show` output.
fn field(show: &str, field: &str) -> String {
    show.lines()
        .find_map(|l| l.strip_prefix(&format!("{field:<11}")))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// `korvus run` whose agent works for a few seconds and would then finish
/// with a report; `korvus cancel --force` from another process ends it.
fn forced_cancel_during_a_run(data: &Path, env: &[(&str, &str)]) {
    let nap = unique_sleep();
    let agent = script(
        data,
        "agent.sh",
        &format!(
            "echo '# partial' > report.md\necho 'agent is working'\nsleep {nap}\n\
             echo '# final' > report.md\necho late > late.txt\n"
        ),
    );
    let started = Instant::now();
    let mut run = korvus(data)
        .envs(env.iter().copied())
        .args(["--lease-ttl", "6", "--heartbeat", "0.5"])
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let id = session_id(&read_until(&mut run, "agent is working"));

    let forced = ok(korvus(data)
        .envs(env.iter().copied())
        .args(["cancel", "--force", &id]));
    let at = Instant::now();
    assert!(forced.contains("cancelled (forced"), "{forced}");
    let show = ok(korvus(data).envs(env.iter().copied()).args(["show", &id]));
    assert_eq!(field(&show, "status"), "cancelled", "{show}");
    let ended = field(&show, "ended");
    assert!(!ended.is_empty(), "{show}");

    // The owner finds its row moved on at its next heartbeat and stops the
    // agent: within one period (0.5 s) plus the kill grace, with room for
    // a loaded machine.
    while running(&format!("sleep {nap}")) {
        assert!(at.elapsed() < Duration::from_secs(15), "the agent runs on");
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = run.wait().expect("korvus run exits");
    assert_eq!(status.code(), Some(4), "cancelled");

    // Past the time the agent would have finished: the forced cancel
    // stands, with its first ended_at and one report row.
    let finish = Duration::from_secs_f64(nap.parse::<f64>().unwrap());
    if let Some(left) = finish.checked_sub(started.elapsed()) {
        std::thread::sleep(left.min(Duration::from_secs(5)));
    }
    let show = ok(korvus(data).envs(env.iter().copied()).args(["show", &id]));
    assert_eq!(field(&show, "status"), "cancelled", "{show}");
    assert_eq!(field(&show, "ended"), ended, "{show}");
    assert_eq!(field(&show, "exit"), "cancelled", "{show}");
    let reports = show.split("\nartifacts").next().unwrap_or_default();
    assert_eq!(reports.matches("  rev ").count(), 1, "{show}");
    assert!(!show.contains("late.txt"), "{show}");
}

#[test]
fn sqlite_a_forced_cancel_during_a_run_stays_cancelled() {
    let data = tempfile::tempdir().expect("temp dir");
    forced_cancel_during_a_run(data.path(), &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_forced_cancel_during_a_run_stays_cancelled() {
    crate::services::with_postgres("korvus_cli_force", |url| {
        let data = tempfile::tempdir().expect("temp dir");
        forced_cancel_during_a_run(data.path(), &[("KORVUS_DATABASE_URL", url)]);
    })
    .await;
}

/// Twenty finished sessions with leftover scratch dirs are reopened at
/// once while `korvus reap --apply` runs again and again: no reopened run
/// loses its agent or its files, and every leftover dir is reaped.
#[test]
fn reap_apply_racing_twenty_reopens_never_touches_an_active_run() {
    let data = tempfile::tempdir().expect("temp dir");
    let data = data.path();
    let quick = script(data, "quick.sh", "echo '# first' > report.md\n");
    let mut ids = Vec::new();
    for i in 0..20 {
        let out = ok(korvus(data)
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&quick)
            .arg(format!("session {i}")));
        ids.push(session_id(&out));
    }
    // Leftovers of a crash: a revision-1 dir in each session's dir.
    let scratch = data.join("scratch");
    for id in &ids {
        let left = scratch.join(id).join("1");
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("leftover.txt"), "x").unwrap();
    }
    let slow = script(
        data,
        "slow.sh",
        "echo 'agent is working'\nsleep 2\necho '# second' > report.md\necho kept > out.txt\n",
    );
    let reopens: Vec<Child> = ids
        .iter()
        .map(|id| {
            korvus(data)
                .args(["reopen", id, "--agent", "sh", "--agent-arg"])
                .arg(&slow)
                .arg("again")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("korvus reopen starts")
        })
        .collect();
    let mut reopens = reopens;
    let mut reaps = 0;
    let mut done = vec![None; reopens.len()];
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "the reopens did not finish");
        let out = crate::support::output(korvus(data).args(["reap", "--apply"]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        reaps += 1;
        for (child, code) in reopens.iter_mut().zip(done.iter_mut()) {
            if code.is_none() {
                *code = child.try_wait().unwrap().map(|s| s.code());
            }
        }
    }
    assert!(reaps > 1, "reap ran during the reopens");
    for (id, code) in ids.iter().zip(&done) {
        let show = ok(korvus(data).args(["show", id]));
        assert_eq!(*code, Some(Some(0)), "reopen of {id} exit: {show}");
        assert_eq!(field(&show, "status"), "completed", "{show}");
        assert!(show.contains("  rev 2   completed"), "{show}");
        assert!(show.contains("out.txt"), "the run's files landed: {show}");
        assert!(!show.contains("signal_9"), "{show}");
    }
    ok(korvus(data).args(["reap", "--apply"]));
    for id in &ids {
        assert!(!scratch.join(id).exists(), "leftovers of {id} reaped");
    }
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A replica paused past its ttl (SIGSTOP of `korvus run`, not of its
/// agent) is taken over by another replica; once resumed (SIGCONT) it
/// stores no event of its run after the takeover's epoch claim and its
/// agent is gone within a heartbeat period plus the kill grace. `a` and
/// `b` are the replicas' data dirs: one dir on SQLite (B, on the same
/// host, may stop A's agent itself at the takeover), two on PostgreSQL (B
/// cannot see A's agent; A must stop it).
fn paused_replica_is_superseded(a: &Path, b: &Path, env: &[(&str, &str)]) {
    let lease = [
        "--lease-ttl",
        "2",
        "--heartbeat",
        "0.5",
        "--resume-orphans",
        "0",
    ];
    let nap = unique_sleep();
    let idle = script(
        b,
        "survivor.sh",
        &format!("echo 'agent is working'\nexec sleep {nap}\n"),
    );
    let mut survivor = korvus(b)
        .envs(env.iter().copied())
        .args(lease)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&idle)
        .arg("survive")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let survivor_id = session_id(&read_until(&mut survivor, "agent is working"));

    let ticker = script(
        a,
        "ticker.sh",
        "echo 'agent is working'\nwhile :; do echo tick; sleep 1; done\n",
    );
    let mut paused = korvus(a)
        .envs(env.iter().copied())
        .args(lease)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&ticker)
        .arg("tick")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let mut lines = BufReader::new(paused.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    let mut ticks = 0;
    // The survivor reaps only after a ttl of its own healthy heartbeats.
    while ticks < 3 {
        let line = lines.next().expect("output").expect("a line");
        ticks += usize::from(line.contains("tick"));
        seen.push_str(&line);
        seen.push('\n');
    }
    let id = session_id(&seen);
    // Right after an event was stored and shown: not inside a write.
    signal(paused.id(), "STOP");
    std::thread::spawn(move || for _ in lines {});
    let agent = format!("sh {}", ticker.display());
    assert!(running(&agent), "the paused replica's agent works on");

    // The survivor takes the session over and settles it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let show = loop {
        let show = ok(korvus(b).envs(env.iter().copied()).args(["show", &id]));
        if field(&show, "status") != "running" || Instant::now() > deadline {
            break show;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(field(&show, "exit"), "owner_lost", "{show}");
    assert_eq!(field(&show, "fence"), "2", "{show}");
    let export = || ok(korvus(b).envs(env.iter().copied()).args(["export", &id]));
    let claimed = export();

    signal(paused.id(), "CONT");
    let resumed = Instant::now();
    while running(&agent) {
        // A period (0.5 s) plus the kill grace (3 s), with room.
        assert!(
            resumed.elapsed() < Duration::from_secs(15),
            "the agent runs on"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = paused.wait().expect("the resumed replica exits");
    assert!(status.code().is_some(), "it exits on its own: {status:?}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        export(),
        claimed,
        "no event of the superseded run after the claim"
    );
    let show = ok(korvus(b).envs(env.iter().copied()).args(["show", &id]));
    assert_eq!(field(&show, "exit"), "owner_lost", "{show}");
    assert_eq!(field(&show, "fence"), "2", "{show}");

    let cancelled = ok(korvus(b)
        .envs(env.iter().copied())
        .args(["cancel", &survivor_id]));
    assert!(cancelled.contains("cancelled"), "{cancelled}");
    assert_eq!(survivor.wait().expect("the survivor exits").code(), Some(4));
}

#[test]
fn sqlite_a_paused_replica_taken_over_stores_nothing_more_and_stops() {
    let data = tempfile::tempdir().expect("temp dir");
    paused_replica_is_superseded(data.path(), data.path(), &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_paused_replica_taken_over_stores_nothing_more_and_stops() {
    crate::services::with_postgres("korvus_cli_paused", |url| {
        let (a, b) = (
            tempfile::tempdir().expect("temp dir"),
            tempfile::tempdir().expect("temp dir"),
        );
        paused_replica_is_superseded(a.path(), b.path(), &[("KORVUS_DATABASE_URL", url)]);
    })
    .await;
}
