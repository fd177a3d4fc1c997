//! Spawning the built `korvus` binary in a clean environment.

use std::path::Path;
use std::process::{Command, Output};

pub(crate) use korvus_runner::testing::unique_sleep;

/// `korvus --data-dir <data>` with no `KORVUS_*` or AWS settings inherited
/// from the calling environment, and the demo agent unpaced.
pub(crate) fn korvus(data: &Path) -> Command {
    let mut cmd = clean(Command::new(env!("CARGO_BIN_EXE_korvus")));
    cmd.arg("--data-dir").arg(data);
    cmd
}

/// `cmd` with no `KORVUS_*` or AWS settings inherited from the calling
/// environment and the demo agent unpaced: for a program that starts
/// `korvus` itself (a terminal, a shell).
pub(crate) fn clean(mut cmd: Command) -> Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("KORVUS_") || key.starts_with("AWS_") {
            cmd.env_remove(&key);
        }
    }
    cmd.env("KORVUS_DEMO_PAUSE", "0");
    cmd
}

/// `run` flags that keep an agent out of any cgroup. Tests whose agent must
/// outlive a killed `korvus` (what a reaper, a takeover or a reopen then
/// stops) pass them: every `korvus` process that starts a run in a cgroup
/// sweeps the cgroups of gone `korvus` processes and kills what is in
/// them, so a parallel test's run would stop the agent first.
pub(crate) const NO_CGROUP: [&str; 4] = ["--memory-limit", "none", "--task-limit", "none"];

/// `run` flags that let an agent outlive a killed `korvus`: no cgroup (see
/// [`NO_CGROUP`]) and no sandbox, whose PID namespace ends with korvus.
/// Tests of what stops such an agent (a reaper, a takeover, a reopen: what
/// an embedder without the sandbox relies on) pass them.
pub(crate) const UNCONTAINED: [&str; 5] = [
    "--memory-limit",
    "none",
    "--task-limit",
    "none",
    "--no-sandbox",
];

/// Runs it to the end.
pub(crate) fn output(cmd: &mut Command) -> Output {
    cmd.output().expect("korvus starts")
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs it and insists on success.
pub(crate) fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// The id printed in a `session <id> started` line.
pub(crate) fn session_id(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("session ")?
                .split_once(" started")
                .map(|(id, _)| id.to_owned())
        })
        .unwrap_or_else(|| panic!("no `session … started` line in:\n{stdout}"))
}

/// Writes an agent script and returns its path.
pub(crate) fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write the agent script");
    path
}

/// Whether a process whose command line starts with `pattern` exists
/// (anchored, so the shell that started it does not count).
pub(crate) fn running(pattern: &str) -> bool {
    Command::new("pgrep")
        .arg("-f")
        .arg(format!("^{pattern}"))
        .output()
        .expect("pgrep runs")
        .status
        .success()
}

/// Reads lines from `from` until one holding `needle` and returns what it
/// read; the output ending first fails the test.
pub(crate) fn lines_until(from: &mut impl std::io::BufRead, needle: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        let mut line = String::new();
        let read = from.read_line(&mut line).expect("a line");
        assert!(read > 0, "the output ended before {needle:?}:\n{seen}");
        seen.push_str(&line);
    }
    seen
}

/// Reads `child`'s stdout until a line holding `needle`, returns what it
/// read, and drains the rest on a thread (a full pipe never blocks it).
pub(crate) fn read_until(child: &mut std::process::Child, needle: &str) -> String {
    read_until_then_rest(child, needle).0
}

/// Reads `child`'s stdout until a line holding `needle` and returns what
/// it read, with a thread that reads the rest to its end and returns it.
pub(crate) fn read_until_then_rest(
    child: &mut std::process::Child,
    needle: &str,
) -> (String, std::thread::JoinHandle<String>) {
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let seen = lines_until(&mut lines, needle);
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut lines, &mut rest);
        rest
    });
    (seen, rest)
}

/// Starts `cmd` with its stdout piped and reads it until the agent says
/// "agent is working" (the rest is drained on a thread); returns the
/// process and what it read.
pub(crate) fn spawn_until_working(cmd: &mut Command) -> (std::process::Child, String) {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("korvus starts");
    let seen = read_until(&mut child, "agent is working");
    (child, seen)
}
