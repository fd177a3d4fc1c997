//! `migrate` and `reap` on the embedded default.

use crate::support::{korvus, ok, output, script, session_id};

#[test]
fn migrate_creates_and_migrates_the_embedded_database() {
    let data = tempfile::tempdir().expect("temp dir");
    let out = ok(korvus(data.path()).arg("migrate"));
    assert!(out.starts_with("migrations applied: "), "{out}");
    assert!(out.trim_end().ends_with("korvus.db"), "{out}");
    // Idempotent.
    ok(korvus(data.path()).arg("migrate"));
    assert!(data.path().join("korvus.db").is_file());
}

#[test]
fn reap_removes_crash_leftovers_and_lists_rows_left_running() {
    let data = tempfile::tempdir().expect("temp dir");
    ok(korvus(data.path()).arg("migrate"));
    let scratch = data.path().join("scratch");
    let leftover = scratch.join("01a22678-f028-712c-ae44-e8e012316fd7");
    std::fs::create_dir_all(leftover.join("sub")).expect("a crashed run's dir");
    std::fs::write(leftover.join("sub/out.txt"), "x").expect("a file in it");
    let other = scratch.join("not-a-session");
    std::fs::create_dir_all(&other).expect("another dir");

    // A row left `running` with no run: a session awaiting the user.
    let agent = script(data.path(), "agent.sh", "echo '# q' > report.md\nexit 75\n");
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("go"),
    );
    assert_eq!(run.status.code(), Some(5));
    let id = session_id(&String::from_utf8_lossy(&run.stdout));

    let out = ok(korvus(data.path()).arg("reap"));
    assert!(out.contains("reaped 1 scratch dir(s)"), "{out}");
    assert!(
        out.contains("removed 01a22678-f028-712c-ae44-e8e012316fd7"),
        "{out}"
    );
    assert!(
        out.contains(&format!("session {id} is `running` with no run here")),
        "{out}"
    );
    assert!(!leftover.exists());
    assert!(other.is_dir(), "only UUID-named dirs are reaped");
}
