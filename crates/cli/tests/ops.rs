//! `migrate`, `reap` and `sweep` on the embedded default.

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

/// Plants a blob file in the embedded blob store's layout under `data`,
/// last modified `age` ago.
fn plant(data: &std::path::Path, key: &str, age: std::time::Duration) -> std::path::PathBuf {
    let path = data.join("blobs/objects").join(key);
    std::fs::create_dir_all(path.parent().unwrap()).expect("blob dir");
    std::fs::write(&path, b"stray bytes").expect("blob file");
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(std::time::SystemTime::now() - age)
        .expect("set mtime");
    path
}

#[test]
fn sweep_is_a_dry_run_until_apply_and_deletes_only_old_orphans() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '# done' > report.md\necho x > out.txt\n",
    );
    let run = ok(korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("go"));
    let id = session_id(&run);
    let blobs = data.path().join("blobs/objects");
    let count = || walkdir_count(&blobs);
    let landed = count();
    assert_eq!(landed, 3, "report, out.txt and the manifest");

    let day = std::time::Duration::from_secs(24 * 60 * 60);
    let (i, s) = (
        "01a22678-f028-712c-ae44-e8e012316fd7",
        "01a22678-f028-712c-ae44-e8e012316fd8",
    );
    let old = plant(
        data.path(),
        &format!("incidents/{i}/sessions/{s}/artifacts/a/old.bin"),
        2 * day,
    );
    let young = plant(
        data.path(),
        &format!("incidents/{i}/sessions/{s}/artifacts/b/new.bin"),
        day / 2,
    );

    let dry = ok(korvus(data.path()).arg("sweep"));
    assert!(dry.contains("1 orphan blob(s), 11 B to delete"), "{dry}");
    assert!(dry.contains("old.bin") && !dry.contains("new.bin"), "{dry}");
    assert!(dry.contains("3 referenced, 1 younger"), "{dry}");
    assert!(dry.contains("dry run"), "{dry}");
    assert!(old.exists());

    let short = output(korvus(data.path()).args(["sweep", "--grace", "60"]));
    assert!(!short.status.success());
    assert!(crate::support::stderr(&short).contains("shorter than the persist timeout"));

    let applied = ok(korvus(data.path()).args(["sweep", "--apply"]));
    assert!(
        applied.contains("1 orphan blob(s), 11 B deleted"),
        "{applied}"
    );
    assert!(!old.exists() && young.exists());
    assert_eq!(count(), landed + 1);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("2 stored (out.txt, report.md)"), "{show}");
}

/// Regular files under `dir`, recursively.
fn walkdir_count(dir: &std::path::Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_dir() {
            n += walkdir_count(&entry.path());
        } else {
            n += 1;
        }
    }
    n
}
