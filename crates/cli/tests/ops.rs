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
fn reap_is_a_dry_run_until_apply_and_spares_nothing_it_should_not_remove() {
    let data = tempfile::tempdir().expect("temp dir");
    ok(korvus(data.path()).arg("migrate"));
    let scratch = data.path().join("scratch");
    let leftover = scratch.join("01a22678-f028-712c-ae44-e8e012316fd7");
    std::fs::create_dir_all(leftover.join("sub")).expect("a crashed run's dir");
    std::fs::write(leftover.join("sub/out.txt"), "x").expect("a file in it");
    let other = scratch.join("not-a-session");
    std::fs::create_dir_all(&other).expect("another dir");

    // A session awaiting the user: running, but no run and no lease.
    let agent = script(data.path(), "agent.sh", "echo '# q' > report.md\nexit 75\n");
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("go"),
    );
    assert_eq!(run.status.code(), Some(5));
    let id = session_id(&String::from_utf8_lossy(&run.stdout));

    let dry = ok(korvus(data.path()).arg("reap"));
    assert!(dry.contains("0 orphan(s)"), "{dry}");
    assert!(
        dry.contains("01a22678-f028-712c-ae44-e8e012316fd7"),
        "{dry}"
    );
    assert!(dry.contains("dry run"), "{dry}");
    assert!(leftover.exists(), "a dry run removes nothing");

    let out = ok(korvus(data.path()).args(["reap", "--apply"]));
    assert!(out.contains("settled 0 orphan(s)"), "{out}");
    assert!(
        out.contains("removed 01a22678-f028-712c-ae44-e8e012316fd7"),
        "{out}"
    );
    assert!(!leftover.exists());
    assert!(other.is_dir(), "only UUID-named dirs are reaped");
    // The idle session is not an orphan: it waits for the user.
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     running"), "{show}");
}
