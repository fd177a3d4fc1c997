//! What `korvus show` tells an operator about a revision whose report
//! could not be stored: the exit reason and the cause, from the report row.

use crate::support::{korvus, ok, output, script, session_id, stdout};

#[test]
fn show_prints_why_a_report_was_not_stored() {
    let data = tempfile::tempdir().expect("temp dir");
    // 9 MiB of report: over the 8 MiB report limit.
    let agent = script(
        data.path(),
        "agent.sh",
        "head -c 9437184 /dev/zero | tr '\\0' '#' > report.md\n",
    );
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("write too much"),
    );
    assert_eq!(run.status.code(), Some(3), "the session failed");
    let id = session_id(&stdout(&run));
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("report_upload_failed"), "{show}");
    assert!(show.contains("(no report.md)"), "{show}");
    assert!(
        show.lines()
            .any(|l| l.trim_start().starts_with('!') && l.contains("report limit")),
        "the cause is printed:\n{show}"
    );
}

#[test]
fn show_prints_what_was_not_stored_of_the_agents_output() {
    let data = tempfile::tempdir().expect("temp dir");
    // 100,000 events is the default cap per run.
    let agent = script(
        data.path(),
        "agent.sh",
        "seq 1 100250\necho '# R' > report.md\n",
    );
    let run = ok(korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("print a lot"));
    let id = session_id(&run);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     completed"), "{show}");
    let dropped: Vec<&str> = show
        .lines()
        .filter(|l| l.trim_start().starts_with("! dropped: "))
        .collect();
    assert_eq!(dropped.len(), 1, "{show}");
    assert!(
        dropped[0].contains("output cap reached: 250 more event(s)"),
        "{show}"
    );
}

/// An agent that takes a turn, calls a tool, reports its usage and exits 3
/// is counted for what it did: the summary, `korvus show`'s row and its
/// report row say 1 turn, 1 tool call, 7 / 3 tokens, as its turn log does
/// (`counters.rs` does the same for the other endings).
#[test]
fn a_failed_run_keeps_its_counters() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '{\"type\":\"turn_start\",\"turn\":1}'\n\
         echo '{\"type\":\"tool_call\",\"call_id\":\"c1\",\"tool\":\"df\"}'\n\
         echo '{\"type\":\"tool_result\",\"call_id\":\"c1\",\"ok\":true}'\n\
         echo '{\"type\":\"usage\",\"input_tokens\":7,\"output_tokens\":3}'\n\
         echo '# half a report' > report.md\n\
         exit 3\n",
    );
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(crate::support::NO_CGROUP)
            .arg("fail after some work"),
    );
    assert_eq!(run.status.code(), Some(3), "the session failed");
    let said = stdout(&run);
    // The summary, the row's counters and the report row's, and the turn
    // log's usage events.
    crate::counters::assert_counted(data.path(), &said, &session_id(&said), "exit_code_3");
}
