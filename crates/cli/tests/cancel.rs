//! `korvus cancel <session>` from another process reaches the `korvus run`
//! that drives the session; `cancel --force` ends a row nothing runs.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::support::{korvus, ok, output, running, script, session_id, stderr, unique_sleep};

#[test]
fn cancel_from_another_process_ends_the_run_cancelled() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '# partial' > report.md\necho 'agent is working'\nsleep 600 & wait\n",
    );
    let mut run = korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    while !seen.contains("agent is working") {
        let line = lines
            .next()
            .expect("output until the agent works")
            .expect("a line");
        seen.push_str(&line);
        seen.push('\n');
    }
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

    // A stale pid file naming an unrelated live process: never signalled.
    let mut unrelated = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep starts");
    let runs = data.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(
        runs.join(format!("{id}.pid")),
        format!("{} 1", unrelated.id()),
    )
    .unwrap();

    let cancelled = ok(korvus(data.path()).args(["cancel", &id]));
    assert!(cancelled.contains("waiting for the user"), "{cancelled}");
    assert!(
        unrelated.try_wait().expect("wait").is_none(),
        "the unrelated process was not signalled"
    );
    unrelated.kill().unwrap();
    let _ = unrelated.wait();
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
}

#[test]
fn a_running_row_without_a_run_needs_force() {
    let data = tempfile::tempdir().expect("temp dir");
    // A run killed outright leaves its row `running` with no process.
    let nap = unique_sleep();
    let agent = script(
        data.path(),
        "agent.sh",
        &format!("echo 'agent is working'\nexec sleep {nap}\n"),
    );
    let mut run = korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    while !seen.contains("agent is working") {
        let line = lines.next().expect("output").expect("a line");
        seen.push_str(&line);
        seen.push('\n');
    }
    let id = session_id(&seen);
    run.kill().expect("SIGKILL");
    let _ = run.wait();

    let refused = output(korvus(data.path()).args(["cancel", &id]));
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    // The request stays on the row, for whichever process runs it.
    let ls = ok(korvus(data.path()).args(["ls"]));
    assert!(ls.contains("(cancel requested)"), "{ls}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("fence      1 (cancel requested)"), "{show}");

    let forced = ok(korvus(data.path()).args(["cancel", "--force", &id]));
    assert!(forced.contains("marked cancelled"), "{forced}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
    // The killed run could not stop its agent: `reap` does, from the
    // record the run left beside its scratch dir.
    assert!(
        running(&format!("sleep {nap}")),
        "the agent outlived its run"
    );
    let reaped = ok(korvus(data.path()).args(["reap"]));
    assert!(reaped.contains("stopped agent process group"), "{reaped}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running(&format!("sleep {nap}")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent was not stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
