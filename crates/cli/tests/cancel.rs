//! `korvus cancel <session>` from another process reaches the `korvus run`
//! that drives the session through the database; a session whose process
//! was killed is taken over once its lease expired; `cancel --force` ends a
//! row at once.

use std::process::Stdio;

use crate::support::{
    korvus, ok, output, running, script, session_id, stderr, unique_sleep, UNCONTAINED,
};

#[test]
fn cancel_from_another_process_ends_the_run_cancelled() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '# partial' > report.md\necho 'agent is working'\nsleep 600 & wait\n",
    );
    let (mut run, seen) = crate::support::spawn_until_working(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("go")
            .stderr(Stdio::null()),
    );
    let id = session_id(&seen);
    let cancelled = ok(korvus(data.path()).args(["cancel", &id]));
    assert!(
        cancelled.contains(&format!("session {id}: cancelled")),
        "{cancelled}"
    );
    let status = run.wait().expect("korvus run exits");
    assert_eq!(status.code(), Some(4));

    // A second cancel: the session already ended.
    let again = output(korvus(data.path()).args(["cancel", &id]));
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already ended (cancelled)"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn a_session_waiting_for_the_user_is_cancelled_without_force() {
    let data = tempfile::tempdir().expect("temp dir");
    // Exit 75: awaiting the user, the row stays `running` with no run.
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '# question' > report.md\nexit 75\n",
    );
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("go"),
    );
    assert_eq!(run.status.code(), Some(5), "awaiting_user exits 5");
    let id = session_id(&String::from_utf8_lossy(&run.stdout));

    let cancelled = ok(korvus(data.path()).args(["cancel", &id]));
    assert!(cancelled.contains("waiting for the user"), "{cancelled}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
}

/// Starts `korvus run` with `lease` flags and an agent that sleeps; returns
/// the process, the session id and the agent's unique sleep argument once
/// the agent works.
fn killable_run(data: &std::path::Path, lease: &[&str]) -> (std::process::Child, String, String) {
    let nap = unique_sleep();
    let agent = script(
        data,
        "agent.sh",
        &format!("echo 'agent is working'\nexec sleep {nap}\n"),
    );
    let (run, seen) = crate::support::spawn_until_working(
        korvus(data)
            .args(lease)
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(UNCONTAINED)
            .arg("go")
            .stderr(Stdio::null()),
    );
    let id = session_id(&seen);
    (run, id, nap)
}

/// Waits (ten seconds at most) until no process runs `sleep <nap>`.
fn agent_stops(nap: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running(&format!("sleep {nap}")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent was not stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_killed_runs_session_is_taken_over_and_cancelled_once_its_lease_expired() {
    let data = tempfile::tempdir().expect("temp dir");
    let (mut run, id, nap) = killable_run(data.path(), &["--lease-ttl", "1", "--heartbeat", "0.2"]);
    run.kill().expect("SIGKILL");
    let _ = run.wait();
    assert!(
        running(&format!("sleep {nap}")),
        "the agent outlived its run"
    );

    // The request waits for the lease to lapse, then takes the session over.
    let cancelled = ok(korvus(data.path()).args(["cancel", &id]));
    assert!(
        cancelled.contains(&format!("session {id}: cancelled")),
        "{cancelled}"
    );
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
    assert!(show.contains("fence      2"), "taken over once: {show}");
    assert!(
        show.contains("rev 1   cancelled"),
        "its revision has a report row: {show}"
    );
    // The takeover stopped the agent the killed run had recorded.
    agent_stops(&nap);
}

#[test]
fn force_ends_a_session_whose_owner_holds_its_lease_and_reap_stops_its_agent() {
    let data = tempfile::tempdir().expect("temp dir");
    let (mut run, id, nap) = killable_run(data.path(), &["--lease-ttl", "600"]);
    run.kill().expect("SIGKILL");
    let _ = run.wait();

    let ls = ok(korvus(data.path()).args(["ls"]));
    assert!(ls.contains("lease until"), "{ls}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(
        show.contains("owner      ") && show.contains("lease until") && show.contains(" UTC"),
        "{show}"
    );

    let forced = ok(korvus(data.path()).args(["cancel", "--force", &id]));
    assert!(forced.contains("cancelled (forced"), "{forced}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
    // The killed run could not stop its agent: `reap --apply` does, from
    // the record the run left beside its scratch dir.
    assert!(
        running(&format!("sleep {nap}")),
        "the agent outlived its run"
    );
    let dry = ok(korvus(data.path()).args(["reap"]));
    assert!(dry.contains(&id), "{dry}");
    assert!(running(&format!("sleep {nap}")), "a dry run stops nothing");
    let reaped = ok(korvus(data.path()).args(["reap", "--apply"]));
    assert!(reaped.contains("stopped agent process group"), "{reaped}");
    agent_stops(&nap);
}

#[test]
fn a_reopen_stops_the_agent_a_killed_run_left_running() {
    let data = tempfile::tempdir().expect("temp dir");
    let (mut run, id, nap) = killable_run(data.path(), &["--lease-ttl", "600"]);
    run.kill().expect("SIGKILL");
    let _ = run.wait();
    ok(korvus(data.path()).args(["cancel", "--force", &id]));
    assert!(
        running(&format!("sleep {nap}")),
        "the agent outlived its run"
    );
    let next = script(data.path(), "next.sh", "echo '# again' > report.md\n");
    ok(korvus(data.path())
        .args(["reopen", &id, "--agent", "sh", "--agent-arg"])
        .arg(&next)
        .arg("once more"));
    agent_stops(&nap);
}
