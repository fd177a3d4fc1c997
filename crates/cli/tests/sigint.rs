//! Ctrl-C (SIGINT) during `korvus run`: the session ends `cancelled`, the
//! files the agent wrote are harvested, and no process of the agent's group
//! survives.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::{korvus, ok, running, script, session_id, unique_sleep};

#[test]
fn sigint_during_run_cancels_and_still_lands_the_files() {
    let data = tempfile::tempdir().expect("temp dir");
    let arg = unique_sleep();
    let agent = script(
        data.path(),
        "slow-agent.sh",
        &format!(
            "echo '# Partial findings' > report.md\n\
             echo 'half-way notes' > notes.txt\n\
             echo '{{\"type\":\"turn_start\",\"turn\":1}}'\n\
             sleep {arg} &\n\
             echo 'agent is working'\n\
             wait\n"
        ),
    );
    let mut child = korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("why is db-1 slow?")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("korvus starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.contains("agent is working") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
            }
            Err(e) => panic!("the agent never got going ({e}):\n{seen}"),
        }
    }
    let pattern = format!("sleep {arg}");
    // Forked before the line, but its exec may lag on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !running(&pattern) {
        assert!(Instant::now() < deadline, "the agent's grandchild runs");
        std::thread::sleep(Duration::from_millis(20));
    }

    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGINT).expect("send SIGINT");
    let status = child.wait().expect("korvus exits");
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        seen.push_str(&line);
        seen.push('\n');
    }
    reader.join().expect("reader");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert_eq!(
        status.code(),
        Some(4),
        "exit code of a cancelled session\n{seen}\n{err}"
    );
    assert!(err.contains("cancelling session"), "{err}");
    assert!(
        seen.contains(": cancelled (exit reason cancelled)"),
        "{seen}"
    );

    let id = session_id(&seen);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
    assert!(show.contains("notes.txt"), "files are harvested:\n{show}");
    assert!(
        show.contains("rev 1   cancelled"),
        "the report row landed:\n{show}"
    );
    let report = ok(korvus(data.path()).args(["cat", &id]));
    assert!(report.contains("# Partial findings"), "{report}");
    assert!(
        !running(&pattern),
        "the grandchild was killed with the group"
    );
}

/// Starts `korvus run` of `agent` with its stdout on a pipe and reads until
/// the agent says it is working; returns the process and what it read.
fn started(data: &std::path::Path, agent: &std::path::Path) -> (std::process::Child, String) {
    let mut child = korvus(data)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(agent)
        .args(crate::support::NO_CGROUP)
        .arg("why is db-1 slow?")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("korvus starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = String::new();
    while !seen.contains("agent is working") {
        let mut line = String::new();
        assert!(
            lines.read_line(&mut line).expect("a line") > 0,
            "korvus ended early:\n{seen}"
        );
        seen.push_str(&line);
    }
    // The reader goes away, as `head -1` does after its line.
    drop(lines);
    (child, seen)
}

/// `korvus run … | head -1`: the reader of korvus's stdout goes away, and
/// the session still runs to its end with its report stored; then korvus
/// exits 141, as a process ended by `SIGPIPE` would.
#[test]
fn a_closed_stdout_never_abandons_the_run() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(
        data.path(),
        "chatty-agent.sh",
        "echo 'agent is working'\n\
         for i in 1 2 3 4 5 6 7 8 9 10; do echo \"line $i\"; sleep 0.1; done\n\
         echo '# Findings after the reader left' > report.md\n\
         echo 'done'\n",
    );
    let (mut child, seen) = started(data.path(), &agent);
    let status = child.wait().expect("korvus exits");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert_eq!(status.code(), Some(141), "{err}");
    let id = session_id(&seen);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     completed"), "{show}");
    let report = ok(korvus(data.path()).args(["cat", &id]));
    assert!(
        report.contains("# Findings after the reader left"),
        "{report}"
    );
}

/// `korvus run … | tee` and Ctrl-C: the terminal's SIGINT reaches both, so
/// `tee` is gone when korvus cancels. The session ends `cancelled` with its
/// partial report, and korvus exits 141 (its stdout closed) after that.
#[test]
fn ctrl_c_with_the_reader_gone_still_cancels_and_lands() {
    let data = tempfile::tempdir().expect("temp dir");
    let arg = unique_sleep();
    let agent = script(
        data.path(),
        "slow-agent.sh",
        &format!(
            "echo '# Partial findings' > report.md\n\
             echo 'agent is working'\n\
             exec sleep {arg}\n"
        ),
    );
    let (mut child, seen) = started(data.path(), &agent);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGINT).expect("send SIGINT");
    // A second Ctrl-C while it cancels is still a cancel, never an abandon.
    std::thread::sleep(Duration::from_millis(100));
    let _ = kill(pid, Signal::SIGINT);
    let status = child.wait().expect("korvus exits");
    assert_eq!(status.code(), Some(141));
    let id = session_id(&seen);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
    let report = ok(korvus(data.path()).args(["cat", &id]));
    assert!(report.contains("# Partial findings"), "{report}");
    assert!(!running(&format!("sleep {arg}")));
}
