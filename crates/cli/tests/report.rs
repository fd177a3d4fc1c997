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
