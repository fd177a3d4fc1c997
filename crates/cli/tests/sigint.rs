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
    let seen = crate::support::lines_until(&mut lines, "agent is working");
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
    // By the time korvus has exited, the row is terminal and the report
    // row and its document are stored.
    let id = session_id(&seen);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     completed"), "{show}");
    assert!(
        show.contains("rev 1   completed"),
        "the report row landed:\n{show}"
    );
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
    let agent = partial_then_sleep(data.path(), &arg);
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

/// A real Ctrl-C on a terminal: `korvus run … | tee out` runs as the
/// foreground process group of a pseudo-terminal (`script` from
/// util-linux), and the terminal's interrupt character is typed, so the
/// kernel sends `SIGINT` to the whole group — korvus and `tee` alike. The
/// session ends `cancelled` with its
/// partial report stored, and korvus, whose stdout `tee` no longer reads,
/// exits 141 once it has.
#[test]
fn ctrl_c_on_a_terminal_with_tee_cancels_lands_and_exits_141() {
    let data = tempfile::tempdir().expect("temp dir");
    let arg = unique_sleep();
    let agent = partial_then_sleep(data.path(), &arg);
    let dir = data.path();
    let out = dir.join("out");
    let rc = dir.join("rc");
    let korvus_bin = env!("CARGO_BIN_EXE_korvus");
    // Run by `script`, the shell is the session leader of the terminal and
    // the pipeline runs in its process group, the foreground one: the
    // interrupt reaches all three. The shell outlives it, as an
    // interactive shell does (a trap, which its children do not inherit),
    // and records both exit statuses.
    let job = format!(
        "trap : INT; '{korvus_bin}' --data-dir '{data}' run --agent sh --agent-arg '{agent}' \
         --memory-limit none --task-limit none 'why is db-1 slow?' | tee '{out}'; \
         echo \"${{PIPESTATUS[0]}} ${{PIPESTATUS[1]}}\" > '{rc}'",
        data = dir.display(),
        agent = agent.display(),
        out = out.display(),
        rc = rc.display(),
    );
    // `script` runs its command with `$SHELL -c` (`/bin/sh` when unset, as
    // in CI); dash does not exec a last command, and without a trap of its
    // own it would die of the interrupt and end the terminal. `exec` leaves
    // bash, with its trap, as the terminal's only shell whatever `$SHELL` is.
    let mut terminal = crate::support::clean(std::process::Command::new("script"))
        .env_remove("SHELL")
        .args(["-qfe", "-c"])
        .arg(format!(
            "exec bash --norc --noprofile -c {}",
            shell_quote(&job)
        ))
        .arg("/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) starts");
    let mut keys = terminal.stdin.take().expect("the terminal's keyboard");
    let screen = read_to_end(terminal.stdout.take().expect("the screen"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&out).is_ok_and(|s| s.contains("agent is working")) {
        assert!(Instant::now() < deadline, "the agent never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Ctrl-C: the terminal's interrupt character (VINTR).
    std::io::Write::write_all(&mut keys, b"\x03").expect("type Ctrl-C");
    std::io::Write::flush(&mut keys).expect("type Ctrl-C");
    let status = terminal.wait().expect("the terminal's shell ends");
    drop(keys);
    let screen = screen.join().expect("the screen");
    assert!(status.success(), "{status}:\n{screen}");
    let codes = std::fs::read_to_string(&rc).expect("the shell recorded the job's statuses");
    assert_eq!(
        codes.trim(),
        "141 130",
        "korvus exits 141 (its reader gone), tee died of SIGINT:\n{screen}"
    );
    let seen = std::fs::read_to_string(&out).expect("what tee wrote");
    let id = session_id(&seen);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
    assert!(
        show.contains("rev 1   cancelled"),
        "the report row landed:\n{show}"
    );
    let report = ok(korvus(data.path()).args(["cat", &id]));
    assert!(report.contains("# Partial findings"), "{report}");
    assert!(!running(&format!("sleep {arg}")));
}

/// An agent that writes a partial report, says it is working and sleeps
/// (`sleep <arg>`, for [`running`] to find).
fn partial_then_sleep(dir: &std::path::Path, arg: &str) -> std::path::PathBuf {
    script(
        dir,
        "slow-agent.sh",
        &format!(
            "echo '# Partial findings' > report.md\n\
             echo 'agent is working'\n\
             exec sleep {arg}\n"
        ),
    )
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Reads `from` to its end on a thread and returns it.
fn read_to_end(mut from: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = from.read_to_end(&mut all);
        String::from_utf8_lossy(&all).into_owned()
    })
}
