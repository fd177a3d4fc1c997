//! `korvus cancel <session>` from another process reaches the `korvus run`
//! that drives the session; `cancel --force` ends a row nothing runs.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::support::{korvus, ok, output, script, session_id, stderr};

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
fn a_running_row_without_a_run_needs_force() {
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

    let refused = output(korvus(data.path()).args(["cancel", &id]));
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));

    let forced = ok(korvus(data.path()).args(["cancel", "--force", &id]));
    assert!(forced.contains("marked cancelled"), "{forced}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
}
