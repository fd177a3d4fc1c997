//! A private data dir: what korvus makes is closed to other users whatever
//! the umask, and as root the demo and `serve` work from a data dir the
//! agent user cannot reach (a clone in `/root`, a `mktemp -d` directory) —
//! its scratch root goes where that user can reach it, decided once.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Command;

use crate::serve::Server;
use crate::support::{clean, stderr, stdout};

/// The mode bits of `path` (not following a link).
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("stat").mode() & 0o7777
}

#[test]
fn a_private_data_dir_runs_the_demo_and_serve_and_keeps_its_files_private() {
    let parent = tempfile::tempdir().expect("temp dir");
    // As `mktemp -d` makes it: closed to everyone else.
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let data = parent.path().join("data");
    // The umask a login shell has.
    let out = clean(Command::new("sh"))
        .arg("-c")
        .arg("umask 022; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_korvus"))
        .arg("--data-dir")
        .arg(&data)
        .arg("demo")
        .output()
        .expect("korvus starts");
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{said}");
    assert_eq!(
        said.matches("completed (exit reason completed)").count(),
        2,
        "both revisions:\n{said}"
    );
    assert_eq!(mode(&data), 0o700, "the data dir");
    assert_eq!(mode(&data.join("korvus.db")), 0o600, "the database");
    assert_eq!(mode(&data.join("blobs")), 0o700, "the blobs");
    let scratch = data.join("scratch");
    let root = std::fs::canonicalize(&scratch).expect("the scratch root");
    if nix::unistd::geteuid().is_root() {
        assert!(
            std::fs::symlink_metadata(&scratch)
                .unwrap()
                .file_type()
                .is_symlink(),
            "a link to the shared scratch root"
        );
        assert!(root.starts_with("/var/lib/korvus"), "{}", root.display());
        let meta = std::fs::metadata(&root).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o711));
        assert!(
            said.contains(&root.display().to_string()),
            "the demo says where:\n{said}"
        );
    } else {
        assert_eq!(root, std::fs::canonicalize(&data).unwrap().join("scratch"));
    }

    let server = Server::start(&data, None, "0");
    let (status, incidents) = server.call("GET", "/api/incidents", None);
    assert_eq!(status, 200, "{incidents}");
    assert_eq!(
        incidents["items"].as_array().map(Vec::len),
        Some(1),
        "{incidents}"
    );
    drop(server);
    if root.starts_with("/var/lib/korvus") {
        // Every run's dir is gone; the root it made is this test's to remove.
        std::fs::remove_dir(&root).expect("an empty scratch root");
    }
}
