//! `korvus salvage` and `korvus reap --apply` store what a run left kept:
//! the blob dir breaks while the agent works, the run's scratch dir is
//! kept, and once the blob dir is back its output lands in the session's
//! revision.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::{korvus, ok, output, script, session_id, spawn_until_working, stdout};

/// Starts `korvus run` with an agent that writes `report.md` and
/// `work/progress.txt`, says so, and finishes once `go` appears in its
/// dir; returns the child, the session id and the run's scratch dir.
fn started(data: &Path) -> (std::process::Child, String, PathBuf) {
    let agent = script(
        data,
        "agent.sh",
        "echo '# What I found' > report.md\n\
         mkdir -p work && echo 'step 3 of 5' > work/progress.txt\n\
         echo 'agent is working'\n\
         n=0; while [ ! -e go ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n",
    );
    let (child, seen) = spawn_until_working(
        korvus(data)
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(crate::support::NO_CGROUP)
            .arg("what happened?"),
    );
    let id = session_id(&seen);
    let dir = data.join("scratch").join(&id).join("1");
    (child, id, dir)
}

/// Breaks the blob dir for writes (its objects dir replaced by a file: a
/// `chmod` does not stop root), lets the agent finish, and waits for
/// `korvus run` to end; returns what it printed.
fn run_with_the_blob_dir_broken(data: &Path, mut child: std::process::Child, dir: &Path) {
    let objects = data.join("blobs").join("objects");
    std::fs::rename(&objects, data.join("objects.away")).unwrap();
    std::fs::write(&objects, "in the way").unwrap();
    std::fs::write(dir.join("go"), "").unwrap();
    let status = child.wait().expect("korvus ends");
    assert!(!status.success(), "nothing was stored: {status:?}");
    assert!(
        dir.join("work/progress.txt").exists(),
        "the only copy is kept"
    );
    std::fs::remove_file(&objects).unwrap();
    std::fs::rename(data.join("objects.away"), &objects).unwrap();
}

/// What `korvus show` and `korvus cat` say of the salvaged session.
fn assert_salvaged(data: &Path, id: &str, dir: &Path) {
    let show = ok(korvus(data).args(["show", id]));
    assert!(show.contains("salvaged from"), "{show}");
    assert!(show.contains(&dir.display().to_string()), "{show}");
    let progress = ok(korvus(data).args(["cat", id, "work/progress.txt"]));
    assert_eq!(progress.trim(), "step 3 of 5");
    let report = ok(korvus(data).args(["cat", id]));
    assert!(report.contains("# What I found"), "{report}");
    assert!(!dir.exists(), "stored whole: the dir is removed");
}

#[test]
fn korvus_salvage_stores_a_kept_dir_once_the_blob_dir_is_back() {
    let data = tempfile::tempdir().expect("temp dir");
    let (child, id, dir) = started(data.path());
    run_with_the_blob_dir_broken(data.path(), child, &dir);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("kept at"), "the row says where: {show}");

    let salvaged = output(korvus(data.path()).args(["salvage", &id]));
    let said = stdout(&salvaged);
    assert!(salvaged.status.success(), "{said}");
    assert!(
        said.contains("revision 1: 2 file(s), report stored"),
        "{said}"
    );
    assert!(said.contains("stored whole"), "{said}");
    assert_salvaged(data.path(), &id, &dir);
    // Nothing left to do.
    let again = ok(korvus(data.path()).args(["salvage", &id]));
    assert!(again.contains("no kept scratch dir"), "{again}");
}

#[test]
fn reap_apply_stores_a_kept_dir_once_the_blob_dir_is_back() {
    let data = tempfile::tempdir().expect("temp dir");
    let (child, id, dir) = started(data.path());
    run_with_the_blob_dir_broken(data.path(), child, &dir);
    let dry = ok(korvus(data.path()).arg("reap"));
    assert!(dry.contains("1 kept scratch dir(s)"), "{dry}");
    assert!(dry.contains(&format!("{id} revision 1: ")), "{dry}");
    let reaped = ok(korvus(data.path()).args(["reap", "--apply"]));
    assert!(
        reaped.contains(&format!("salvaged session {id}")),
        "{reaped}"
    );
    assert_salvaged(data.path(), &id, &dir);
}

/// The disk fills (a tmpfs data dir, filled from outside once the agent
/// wrote its report): nothing korvus prints says a write happened that
/// did not, and the run's scratch dir is kept. Once space is freed,
/// `korvus salvage` lands it — taking the session over first if its
/// outcome was never written — and the row is terminal with the report.
#[test]
fn a_full_disk_keeps_the_dir_and_salvage_lands_it_once_space_is_freed() {
    use korvus_testkit::tmpfs::{fill, Tmpfs};
    const BYTES: u64 = 48 * 1024 * 1024;
    let tmpfs = Tmpfs::mount(BYTES);
    let data = tmpfs.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let short_lease = |cmd: &mut std::process::Command| {
        cmd.env("KORVUS_LEASE_TTL", "2");
    };
    let (mut child, id, dir) = {
        let agent = script(
            &data,
            "agent.sh",
            "echo '# What I found' > report.md\n\
             mkdir -p work && echo 'step 3 of 5' > work/progress.txt\n\
             echo 'agent is working'\n\
             n=0; while [ ! -e go ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n",
        );
        let mut cmd = korvus(&data);
        short_lease(&mut cmd);
        let (child, seen) = spawn_until_working(
            cmd.args(["run", "--agent", "sh", "--agent-arg"])
                .arg(&agent)
                .args(crate::support::NO_CGROUP)
                .arg("what happened?")
                .stderr(Stdio::piped()),
        );
        let id = session_id(&seen);
        let dir = data.join("scratch").join(&id).join("1");
        (child, id, dir)
    };
    let filler = fill(tmpfs.path(), BYTES);
    std::fs::write(dir.join("go"), "").unwrap();
    let status = child.wait().expect("korvus ends");
    let mut said = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
    assert!(!status.success(), "{said}");
    assert!(dir.join("work/progress.txt").exists(), "kept: {said}");
    std::fs::remove_file(&filler).unwrap();

    // Nothing claims a write that did not happen. Which writes the full
    // disk refused depends on how much room SQLite's files still had: when
    // korvus says the outcome was not written, the row is still running;
    // when it settled, the row is terminal without the document its upload
    // could not store.
    let show = ok(korvus(&data).args(["show", &id]));
    if said.contains("outcome was not written") {
        assert!(show.contains("status     running"), "{show}\n{said}");
    } else {
        assert!(!show.contains("status     running"), "{show}\n{said}");
        assert!(
            show.contains("(no report.md)") || show.contains("kept at"),
            "{show}"
        );
    }
    assert!(!show.contains("salvaged from"), "{show}");
    // Past the lease of the exited run.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let salvaged = output(korvus(&data).args(["salvage", &id]));
    let out = stdout(&salvaged);
    assert!(
        salvaged.status.success(),
        "{out}\n{}",
        crate::support::stderr(&salvaged)
    );
    let show = ok(korvus(&data).args(["show", &id]));
    assert!(
        show.contains("failed") || show.contains("completed"),
        "terminal: {show}"
    );
    assert_salvaged(&data, &id, &dir);
    drop(tmpfs);
}
