//! Restore of a session's own output on reopen.

use std::fs;

use korvus_blob::{MemoryBlobStore, Sha256Digest};
use korvus_store::{ArtifactKind, IncidentId, SessionId};
use korvus_workspace::{
    default_trees, read_only_prefixes, restore_own_output, RefuseReason, WorkspaceError,
    WorkspacePath,
};

use crate::support::{artifact, fail_get, fault_blobs, listing, mode, scratch};

fn wp(s: &str) -> WorkspacePath {
    WorkspacePath::new(s).unwrap()
}

#[tokio::test]
async fn the_newest_of_three_revisions_wins_and_archives_are_skipped() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let incident = IncidentId::new();
    let me = s.dir.session_id();
    let kind = ArtifactKind::AgentOutput;
    let r2 = artifact(&blobs, incident, me, kind, "out/a.md", 2, "rev 2").await;
    let r3 = artifact(&blobs, incident, me, kind, "out/a.md", 3, "rev 3").await;
    let r1 = artifact(&blobs, incident, me, kind, "out/a.md", 1, "rev 1").await;
    let report = artifact(
        &blobs,
        incident,
        me,
        ArtifactKind::Report,
        "report.md",
        1,
        "# r\n",
    )
    .await;
    let archive = artifact(
        &blobs,
        incident,
        me,
        ArtifactKind::WorkspaceArchive,
        "workspace.tar.gz",
        3,
        "not really gzip",
    )
    .await;

    // Stored order is not revision order.
    let all = [
        r2.clone(),
        r3.clone(),
        r1.clone(),
        report.clone(),
        archive.clone(),
    ];
    let out = restore_own_output(&s.dir, &all, &read_only_prefixes(&default_trees()), &blobs).await;

    assert!(out.failed.is_empty() && out.refused.is_empty(), "{out:?}");
    assert_eq!(out.archives_skipped, [archive.id]);
    let mut superseded = out.superseded.clone();
    superseded.sort();
    let mut expected = vec![r1.id, r2.id];
    expected.sort();
    assert_eq!(superseded, expected);

    let keys: Vec<&str> = out.restored.keys().map(WorkspacePath::as_str).collect();
    assert_eq!(keys, ["out/a.md", "report.md"]);
    let a = &out.restored[&wp("out/a.md")];
    assert_eq!(a.artifact, r3);
    assert_eq!(a.sha256, Sha256Digest::of(b"rev 3"));
    assert_eq!(a.sha256.to_hex(), r3.sha256);

    let dir = s.dir.path();
    assert_eq!(fs::read_to_string(dir.join("out/a.md")).unwrap(), "rev 3");
    assert!(!dir.join("workspace.tar.gz").exists());
    // Own output stays the session's to change.
    assert_eq!(mode(&dir.join("out/a.md")), 0o644);
    assert_eq!(mode(&dir.join("out")), 0o700);
}

#[tokio::test]
async fn read_only_escaping_and_foreign_paths_are_refused() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let incident = IncidentId::new();
    let me = s.dir.session_id();
    let kind = ArtifactKind::AgentOutput;
    let mut refused = Vec::new();
    for path in [
        "docs/guide.md",
        "skills/x/SKILL.md",
        "context/1-a.md",
        "runbooks",
    ] {
        refused.push((
            artifact(&blobs, incident, me, kind, path, 1, "ro").await,
            RefuseReason::ReadOnly,
        ));
    }
    for path in [
        "../escape.md",
        "/tmp/abs.md",
        "a/../../b.md",
        "a//b",
        "./c",
        "d\0e",
        "",
    ] {
        refused.push((
            artifact(&blobs, incident, me, kind, path, 1, "esc").await,
            RefuseReason::Escapes,
        ));
    }
    refused.push((
        artifact(
            &blobs,
            incident,
            SessionId::new(),
            kind,
            "theirs.md",
            1,
            "x",
        )
        .await,
        RefuseReason::OtherSession,
    ));
    let fine = artifact(&blobs, incident, me, kind, "docs2/ok.md", 1, "ok").await;

    let mut all: Vec<_> = refused.iter().map(|(a, _)| a.clone()).collect();
    all.push(fine.clone());
    let out = restore_own_output(&s.dir, &all, &read_only_prefixes(&default_trees()), &blobs).await;

    assert_eq!(out.refused.len(), refused.len(), "{:?}", out.refused);
    for (a, reason) in &refused {
        let got = out.refused.iter().find(|r| r.artifact == a.id).unwrap();
        assert_eq!(got.reason, *reason, "{:?}", a.path);
        assert_eq!(got.path, a.path);
    }
    assert_eq!(out.restored.len(), 1);
    assert_eq!(out.restored[&wp("docs2/ok.md")].artifact, fine);
    assert_eq!(
        listing(s.dir.path()).into_iter().collect::<Vec<_>>(),
        ["docs2/", "docs2/ok.md"]
    );
    // Nothing landed next to the scratch dir either.
    assert_eq!(
        listing(&s.root).len(),
        3,
        "root holds only the scratch dir: {:?}",
        listing(&s.root)
    );
    assert!(!s.root.join("escape.md").exists());
}

#[tokio::test]
async fn one_failing_blob_fetch_leaves_the_others_restored() {
    let s = scratch().await;
    let blobs = fault_blobs();
    let incident = IncidentId::new();
    let me = s.dir.session_id();
    let kind = ArtifactKind::AgentOutput;
    let a = artifact(&blobs, incident, me, kind, "a.md", 1, "a").await;
    let b = artifact(&blobs, incident, me, kind, "sub/b.md", 1, "b").await;
    let c = artifact(&blobs, incident, me, kind, "c.md", 2, "c").await;
    fail_get(&blobs, &b.blob_key);

    let out = restore_own_output(&s.dir, &[a, b.clone(), c], &[], &blobs).await;
    let keys: Vec<&str> = out.restored.keys().map(WorkspacePath::as_str).collect();
    assert_eq!(keys, ["a.md", "c.md"]);
    assert_eq!(out.failed.len(), 1);
    assert_eq!(out.failed[0].artifact, b.id);
    assert_eq!(out.failed[0].path, wp("sub/b.md"));
    assert!(matches!(out.failed[0].cause, WorkspaceError::Blob { .. }));
    assert_eq!(
        listing(s.dir.path()).into_iter().collect::<Vec<_>>(),
        ["a.md", "c.md"]
    );
}

#[tokio::test]
async fn a_corrupted_blob_or_a_path_clash_is_a_per_file_failure() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let incident = IncidentId::new();
    let me = s.dir.session_id();
    let kind = ArtifactKind::AgentOutput;
    let mut bad = artifact(&blobs, incident, me, kind, "bad.md", 1, "bytes").await;
    bad.sha256 = Sha256Digest::of(b"other bytes").to_hex();
    // `x` is a file, so `x/y` cannot be written below it.
    let x = artifact(&blobs, incident, me, kind, "x", 1, "file").await;
    let xy = artifact(&blobs, incident, me, kind, "x/y", 1, "under a file").await;

    let out = restore_own_output(&s.dir, &[bad.clone(), x, xy.clone()], &[], &blobs).await;
    assert_eq!(
        out.restored
            .keys()
            .map(WorkspacePath::as_str)
            .collect::<Vec<_>>(),
        ["x"]
    );
    let failed: Vec<_> = out.failed.iter().map(|f| f.artifact).collect();
    assert_eq!(failed, [bad.id, xy.id]);
    assert!(matches!(
        out.failed[0].cause,
        WorkspaceError::DigestMismatch { .. }
    ));
    assert!(matches!(out.failed[1].cause, WorkspaceError::Io { .. }));
    // The mismatched bytes were written as they streamed in, then removed.
    assert!(!s.dir.path().join("bad.md").exists());
    assert_eq!(fs::read_to_string(s.dir.path().join("x")).unwrap(), "file");
}

/// A file of several read chunks (1 MiB each) is streamed into place byte
/// for byte, with its digest, and a context file the same way.
#[tokio::test]
async fn a_file_larger_than_a_chunk_is_restored_whole() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let me = s.dir.session_id();
    let body: String = (0..3_600_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let big = artifact(
        &blobs,
        IncidentId::new(),
        me,
        ArtifactKind::AgentOutput,
        "big.txt",
        1,
        &body,
    )
    .await;
    let out = restore_own_output(&s.dir, std::slice::from_ref(&big), &[], &blobs).await;
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    let restored = &out.restored[&wp("big.txt")];
    assert_eq!(restored.sha256.to_hex(), big.sha256);
    assert_eq!(
        fs::read_to_string(s.dir.path().join("big.txt")).unwrap(),
        body
    );
}

/// A read that fails half-way through a file, and a restore cancelled
/// half-way (its future dropped, as a reopen's cancel does), leave no file
/// behind: the writer keeps a file only when the reader said it was whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_cut_short_by_a_failed_read_or_a_cancel_is_removed() {
    use korvus_testkit::faults::BlobFault;
    let body: String = (0..3_000_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    for fault in [
        BlobFault::FailAfter(1_500_000),
        BlobFault::HangAfter(1_500_000),
    ] {
        let s = scratch().await;
        let blobs = fault_blobs();
        let me = s.dir.session_id();
        let a = artifact(
            &blobs,
            IncidentId::new(),
            me,
            ArtifactKind::AgentOutput,
            "cut.txt",
            1,
            &body,
        )
        .await;
        blobs.fault_get(&a.id.to_string(), fault);
        let restore = restore_own_output(&s.dir, std::slice::from_ref(&a), &[], &blobs);
        match tokio::time::timeout(std::time::Duration::from_secs(2), restore).await {
            Ok(out) => {
                assert_eq!(fault, BlobFault::FailAfter(1_500_000));
                assert!(out.restored.is_empty());
                assert!(matches!(out.failed[0].cause, WorkspaceError::Blob { .. }));
            }
            Err(_) => assert_eq!(fault, BlobFault::HangAfter(1_500_000), "cancelled"),
        }
        let path = s.dir.path().join("cut.txt");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while path.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{fault:?}: a cut-short file was left behind"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Files restored at once into one new nested directory all land: the
/// directories they share are made once, whichever fetch gets there first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_files_of_one_new_directory_are_restored_at_once() {
    let s = scratch().await;
    let blobs = MemoryBlobStore::new();
    let (incident, me) = (IncidentId::new(), s.dir.session_id());
    let mut artifacts = Vec::new();
    for i in 0..40 {
        let path = format!("deep/er/dir/f{i:02}.txt");
        let body = format!("file {i}");
        let kind = ArtifactKind::AgentOutput;
        artifacts.push(artifact(&blobs, incident, me, kind, &path, 1, &body).await);
    }
    let out = restore_own_output(&s.dir, &artifacts, &[], &blobs).await;
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    assert_eq!(out.restored.len(), 40);
    for i in 0..40 {
        let path = s.dir.path().join(format!("deep/er/dir/f{i:02}.txt"));
        assert_eq!(fs::read_to_string(path).unwrap(), format!("file {i}"));
    }
}
