//! A run is counted for what it did however it ends: stalled, failed by
//! its agent (`agent_error`) or cancelled by Ctrl-C, the summary, `korvus
//! show`'s row and its report row say what the agent's output said, and
//! the turn log `korvus export` writes holds the usage events that sum to
//! those counters. (`a_failed_run_keeps_its_counters` in `report.rs` is
//! the same for an agent's own exit code.)

use std::path::Path;
use std::process::Stdio;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::{
    korvus, ok, output, read_until_then_rest, script, session_id, stdout, NO_CGROUP,
};

/// What every agent below did before it ended.
const COUNTED: &str = "1 turn(s), 1 tool call(s), 7 input / 3 output tokens";

/// korvus's own protocol: a turn, one tool call and its result, usage 7/3,
/// half a report.
const WORK: &str = "echo '{\"type\":\"turn_start\",\"turn\":1}'\n\
     echo '{\"type\":\"tool_call\",\"call_id\":\"c1\",\"tool\":\"df\"}'\n\
     echo '{\"type\":\"tool_result\",\"call_id\":\"c1\",\"ok\":true}'\n\
     echo '{\"type\":\"usage\",\"input_tokens\":7,\"output_tokens\":3}'\n\
     echo '# half a report' > report.md\n";

/// Asserts that session `id` ended with `reason`, that its row and its
/// report row carry [`COUNTED`], and that the turn log's events add up to
/// the same: one `turn_start`, one `tool_call`, usage events of 7 / 3.
pub(crate) fn assert_counted(data: &Path, said: &str, id: &str, reason: &str) {
    assert!(said.contains(COUNTED), "the summary:\n{said}");
    let show = ok(korvus(data).args(["show", id]));
    assert!(show.contains(reason), "{show}");
    assert!(
        show.matches(COUNTED).count() >= 2,
        "the row's counters and the report row's:\n{show}"
    );
    let log = ok(korvus(data).args(["export", id]));
    let (mut turns, mut calls, mut input, mut output) = (0, 0, 0, 0);
    // The first line is the log's header.
    for line in log.lines().skip(1) {
        let event: serde_json::Value = serde_json::from_str(line).expect("an event line");
        let count = |key: &str| event[key].as_u64().expect(key);
        match event["type"].as_str() {
            Some("turn_start") => turns += 1,
            Some("tool_call") => calls += 1,
            Some("usage") => {
                input += count("input_tokens");
                output += count("output_tokens");
            }
            _ => {}
        }
    }
    assert_eq!((turns, calls, input, output), (1, 1, 7, 3), "{log}");
}

/// A run stopped for printing nothing and using no CPU time past its
/// stall limit keeps what it did before.
#[test]
fn a_stalled_run_keeps_its_counters() {
    let data = tempfile::tempdir().expect("temp dir");
    let sleep = crate::support::unique_sleep();
    let agent = script(
        data.path(),
        "agent.sh",
        &format!("{WORK}exec sleep {sleep}\n"),
    );
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(NO_CGROUP)
            .args(["--stall-timeout", "1"])
            .arg("stall after some work"),
    );
    assert_eq!(run.status.code(), Some(3), "the session failed");
    let said = stdout(&run);
    assert_counted(data.path(), &said, &session_id(&said), "stalled");
}

/// An agent dialect that reports a failed turn and exits 1 ends
/// `agent_error` (korvus's own protocol has no failure event: only the
/// Codex and Claude Code dialects report one), with the turn it completed
/// before counted.
#[test]
fn an_agent_error_run_keeps_its_counters() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(
        data.path(),
        "codex.sh",
        r#"echo '{"type":"thread.started","thread_id":"th-1"}'
echo '{"type":"turn.started"}'
echo '{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"df","aggregated_output":"","exit_code":0,"status":"completed"}}'
echo '# half a report' > report.md
echo '{"type":"turn.completed","usage":{"input_tokens":7,"output_tokens":3}}'
echo '{"type":"turn.failed","error":{"message":"stub failure"}}'
exit 1
"#,
    );
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(NO_CGROUP)
            .args(["--agent-dialect", "codex", "fail after some work"]),
    );
    assert_eq!(run.status.code(), Some(3), "the session failed");
    let said = stdout(&run);
    assert_counted(data.path(), &said, &session_id(&said), "agent_error");
}

/// Ctrl-C (SIGINT) to `korvus run` cancels a run that is still working;
/// what it did before is counted.
#[test]
fn a_cancelled_run_keeps_its_counters() {
    let data = tempfile::tempdir().expect("temp dir");
    let sleep = crate::support::unique_sleep();
    let agent = script(
        data.path(),
        "agent.sh",
        &format!("{WORK}echo 'agent is working'\nexec sleep {sleep}\n"),
    );
    let mut child = korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .args(NO_CGROUP)
        .arg("work until cancelled")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let (lines, rest) = read_until_then_rest(&mut child, "agent is working");
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGINT).expect("send SIGINT");
    let status = child.wait().expect("korvus exits");
    let said = format!("{lines}{}", rest.join().expect("the rest of stdout"));
    assert_eq!(status.code(), Some(4), "the session was cancelled\n{said}");
    assert_counted(data.path(), &said, &session_id(&said), "cancelled");
}
