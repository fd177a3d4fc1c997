//! The operator's terminal is out of the agent's reach. `korvus run` runs
//! under `script` (the operator's pseudo-terminal, whose path the test
//! records); while it runs, the operator types a line. The agent tries to
//! open that terminal, push input into it (`TIOCSTI`), take it over
//! (`TIOCSCTTY`), read what is typed and write a banner into the pane; it
//! still makes a pseudo-terminal of its own with `script`.
//!
//! As root with the default runner (the agent runs as `nobody`), as root
//! with `--agent-user root --network host`, and as an ordinary user (a
//! copy of the binary in a directory that user can reach).

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::host::{can_make_users, shell_line, ThrowawayUser};
use crate::support::{korvus, ok, script, session_id};

/// The agent: `$1` names a file holding the operator's terminal.
const PROBE: &str = r##"
import fcntl, os, select, subprocess, sys, termios

def say(key, value):
    print(f"{key}={value}", flush=True)

def try_ioctls(name, fd):
    for what, request, arg in (("tiocsti", termios.TIOCSTI, b"x"), ("tiocsctty", termios.TIOCSCTTY, 1)):
        try:
            fcntl.ioctl(fd, request, arg)
            say(f"{what}-{name}", "ok")
        except OSError:
            say(f"{what}-{name}", "denied")

pty = open(sys.argv[1]).read().strip()
try:
    fd = os.open(pty, os.O_RDWR | os.O_NOCTTY)
    say("open", "opened")
    os.write(fd, b"\r\nAGENT-BANNER\r\n")
    try_ioctls("operator", fd)
    ready, _, _ = select.select([fd], [], [], 3)
    if ready:
        say("typed", os.read(fd, 200).decode(errors="replace").strip())
except OSError:
    say("open", "denied")
for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
    try_ioctls(name, fd)
try:
    os.open("/dev/tty", os.O_RDWR)
    say("devtty", "opened")
except OSError:
    say("devtty", "denied")
say("pts", ",".join(sorted(os.listdir("/dev/pts"))))
made = subprocess.run(["script", "-qc", "true", "/dev/null"], stdin=subprocess.DEVNULL)
say("script", "ok" if made.returncode == 0 else "failed")
open("report.md", "w").write("# R\n")
"##;

/// What the operator types while the agent runs.
const TYPED: &str = "operator-typed-line";

/// Runs `korvus run <flags>` with the probe under `script` (as `user`, if
/// given: the terminal is then that user's) and checks nothing crossed.
fn probe(data: &Path, binary: &Path, user: Option<&ThrowawayUser>, flags: &[&str]) {
    let agent = script(data, "probe.py", PROBE);
    let pty_file = data.join("pty");
    let mut run = korvus(data);
    run.args(["run"])
        .args(flags)
        .args(["--agent", "/usr/bin/python3", "--agent-arg"])
        .arg(&agent)
        .arg("--agent-arg")
        .arg(&pty_file)
        .arg("terminal");
    let line = format!(
        "tty > '{}'; {}",
        pty_file.display(),
        shell_line(&run).replacen(
            env!("CARGO_BIN_EXE_korvus"),
            &binary.display().to_string(),
            1
        )
    );
    let mut operator = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", &u.name, "--", "script", "-qec", &line, "/dev/null"]);
            c
        }
        None => {
            let mut c = Command::new("script");
            c.args(["-qec", &line, "/dev/null"]);
            c
        }
    };
    for (key, value) in run.get_envs() {
        match value {
            Some(v) => operator.env(key, v),
            None => operator.env_remove(key),
        };
    }
    let mut child = operator
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("script starts");
    // Typed at once: it waits in the terminal's input queue for a reader.
    let mut keyboard = child.stdin.take().expect("stdin");
    keyboard
        .write_all(format!("{TYPED}\n").as_bytes())
        .expect("type");
    let mut pane = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut pane)
        .expect("the pane");
    let status = child.wait().expect("script ends");
    drop(keyboard);
    assert!(status.success(), "{flags:?}: {status}\n{pane}");
    let log = ok(korvus(data).args(["export", &session_id(&pane)]));
    let tiocsti = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .unwrap_or_else(|_| "(no such sysctl)".to_owned());
    let context = format!(
        "{flags:?}, user {:?}, dev.tty.legacy_tiocsti {}",
        user.map(|u| &u.name),
        tiocsti.trim()
    );
    assert!(
        log.contains("open=denied"),
        "{context}: the operator's terminal:\n{log}"
    );
    assert!(log.contains("devtty=denied"), "{context}:\n{log}");
    for who in ["operator", "stdin", "stdout", "stderr"] {
        for what in ["tiocsti", "tiocsctty"] {
            let went = format!("{what}-{who}=ok");
            assert!(!log.contains(&went), "{context}: {went}:\n{log}");
        }
    }
    assert!(
        log.contains("pts=ptmx\""),
        "{context}: the agent sees other terminals:\n{log}"
    );
    assert!(
        log.contains("script=ok"),
        "{context}: its own pseudo-terminal:\n{log}"
    );
    assert!(
        !log.contains(TYPED),
        "{context}: the agent read the typed line:\n{log}"
    );
    assert!(
        !pane.contains("AGENT-BANNER"),
        "{context}: the banner reached the pane:\n{pane}"
    );
}

/// A directory other users may enter, for the probe and the terminal's name.
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    dir
}

#[test]
fn as_root_no_agent_reaches_the_operators_terminal() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs korvus as root (CI does)"
    );
    let binary = Path::new(env!("CARGO_BIN_EXE_korvus"));
    let data = open_dir();
    probe(data.path(), binary, None, &[]);
    let data = open_dir();
    probe(
        data.path(),
        binary,
        None,
        &["--agent-user", "root", "--network", "host"],
    );
}

#[test]
fn as_an_ordinary_user_the_agent_cannot_reach_the_operators_terminal() {
    if !can_make_users() {
        return;
    }
    let user = ThrowawayUser::make();
    let bin = open_dir();
    let binary = bin.path().join("korvus");
    std::fs::copy(env!("CARGO_BIN_EXE_korvus"), &binary).expect("copy the binary");
    let data = open_dir();
    user.own(data.path());
    probe(data.path(), &binary, Some(&user), &[]);
}
