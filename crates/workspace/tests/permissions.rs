//! Read-only trees and `context/` as the session would see them.
//!
//! Mode bits are what makes them read-only, and root (more exactly: a process
//! with `CAP_DAC_OVERRIDE`) ignores mode bits. These tests therefore assert
//! the modes always, then:
//! - without `CAP_DAC_OVERRIDE` (a normal user): a write is refused with
//!   `PermissionDenied`;
//! - with it (root, as on the test machines): a plain write succeeds (today's
//!   documented behaviour, see `docs/workspace.md`), and the same write from
//!   a child with every capability dropped (`setpriv`) is refused — proving
//!   the bits themselves deny it to anyone they bind.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;

use korvus_blob::MemoryBlobStore;
use korvus_store::{ArtifactKind, IncidentId};
use korvus_workspace::{materialize_context, GitSeeder, Seeder};

use crate::support::{
    artifact, ignores_mode_bits, mode, run_without_capabilities, scratch, TestRepo,
};

/// Checks that `file` cannot be modified and no file can be created in
/// `dir` by the session.
fn assert_session_cannot_write(scratch: &Path, dir: &Path, file: &Path) {
    assert_eq!(mode(dir), 0o555, "{}", dir.display());
    assert_eq!(mode(file), 0o444, "{}", file.display());
    let before = fs::read(file).unwrap();
    let planted = dir.join("planted.txt");

    if ignores_mode_bits() {
        // Root ignores mode bits: the plain writes go through. This is the
        // documented behaviour for embedders that run agents as root.
        let mut f = OpenOptions::new().append(true).open(file).unwrap();
        f.write_all(b"x").unwrap();
        drop(f);
        fs::write(&planted, "x").unwrap();
        fs::write(file, &before).unwrap();
        fs::remove_file(&planted).unwrap();

        // Without capabilities, root is bound by the bits like anyone.
        assert!(
            !run_without_capabilities("echo x >> \"$1\"", file),
            "appending to a 0444 file succeeded without CAP_DAC_OVERRIDE"
        );
        assert!(
            !run_without_capabilities("echo x > \"$1\"", &planted),
            "creating a file in a 0555 dir succeeded without CAP_DAC_OVERRIDE"
        );
        // The unprivileged shell can still write elsewhere in the scratch dir,
        // so the refusals above are about the bits, not a broken helper.
        let ok = scratch.join("writable.txt");
        assert!(run_without_capabilities("echo x > \"$1\"", &ok));
        fs::remove_file(&ok).unwrap();
    } else {
        let err = OpenOptions::new().append(true).open(file).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        let err = fs::write(&planted, "x").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    }
    assert_eq!(fs::read(file).unwrap(), before);
    assert!(!planted.exists());
}

#[tokio::test]
async fn writing_into_a_seeded_tree_fails_for_the_session() {
    let repo = TestRepo::new();
    let s = scratch().await;
    GitSeeder::default()
        .seed(&s.dir, Some(&repo.pin(&repo.first)))
        .await
        .unwrap();
    let dir = s.dir.path();
    assert_session_cannot_write(dir, &dir.join("docs"), &dir.join("docs/guide.md"));
    assert_session_cannot_write(
        dir,
        &dir.join("skills/disk"),
        &dir.join("skills/disk/SKILL.md"),
    );
}

#[tokio::test]
async fn writing_into_context_fails_for_the_session() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let incident = IncidentId::new();
    let a = artifact(
        &blobs,
        incident,
        korvus_store::SessionId::new(),
        ArtifactKind::AgentOutput,
        "notes.md",
        1,
        "inherited",
    )
    .await;
    materialize_context(&s.dir, incident, &[a], &blobs)
        .await
        .unwrap();
    let dir = s.dir.path();
    assert_session_cannot_write(dir, &dir.join("context"), &dir.join("context/1-notes.md"));
}
