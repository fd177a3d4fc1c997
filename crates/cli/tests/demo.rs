//! `korvus demo` on the embedded default, in a fresh data dir.

use crate::support::{korvus, ok};

#[test]
fn demo_runs_the_whole_lifecycle_on_the_embedded_default() {
    let data = tempfile::tempdir().expect("temp dir");
    let out = ok(korvus(data.path()).arg("demo"));
    for expected in [
        // seeded trees
        "1. Git repository",
        "skills/disk-full/SKILL.md",
        "→ list_seeded_trees",
        "skills/replication/SKILL.md",
        // the run manifest names the skills of the seeded trees
        "revision 1; skills: disk-full replication",
        // live events of revision 1
        "── turn 1 started",
        "assistant: Wrote report.md",
        // report revision 1 and its artifacts
        ": completed (exit reason completed)",
        "report revision 1: ",
        "artifacts stored for revision 1:",
        "findings/disk-usage.csv",
        "   │ # Disk full on db-1",
        // reopen, revision 2, unchanged files not stored again
        "4. Reopened session",
        "user: Which files exactly can we delete right now?",
        "── turn 2 started",
        "report revision 2: ",
        "harvest: 2 stored (followups/answer-2.md, report.md); 2 unchanged, not stored again (findings/disk-usage.csv, notes/timeline.md)",
        "## Follow-up (revision 2)",
        // where everything is
        "5. Where everything is stored:",
        "korvus.db",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(data.path().join("korvus.db").is_file());
    assert!(data.path().join("blobs").is_dir());

    // The rows are really there: a second process reads them back.
    let ls = ok(korvus(data.path()).arg("ls"));
    let session = ls
        .lines()
        .find_map(|l| l.trim().strip_prefix("session ")?.split_whitespace().next())
        .expect("a session in ls")
        .to_owned();
    let show = ok(korvus(data.path()).args(["show", &session]));
    assert!(show.contains("status     completed"), "{show}");
    assert!(show.contains("rev 2   completed"), "{show}");
    let report = ok(korvus(data.path()).args(["cat", &session]));
    assert!(report.contains("## Follow-up (revision 2)"), "{report}");
    let csv = ok(korvus(data.path()).args(["cat", &session, "findings/disk-usage.csv"]));
    assert!(csv.starts_with("path,bytes,share"), "{csv}");
    // No scratch dir is left behind.
    let left: Vec<_> = std::fs::read_dir(data.path().join("scratch"))
        .expect("scratch root")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
