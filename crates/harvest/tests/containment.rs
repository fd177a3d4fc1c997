//! Containment: nothing outside the scratch dir is read, even when a file
//! is swapped for a symlink after the walk.

use std::path::Path;
use std::sync::Arc;

use korvus_blob::{BlobStore, MemoryBlobStore};
use korvus_harvest::{persist, PersistConfig, ReportFile};
use korvus_testkit::fixtures::HostileWorkspace;

use crate::support::{env, paths, request, write};

#[tokio::test]
async fn nothing_outside_is_read_from_a_hostile_workspace() {
    let env = env().await;
    let layout = HostileWorkspace::new()
        .with_oversize_bytes(2 * 1024 * 1024)
        .build(env.scratch.path(), env.outside.path());
    let blobs = Arc::new(MemoryBlobStore::new());
    let mut config = PersistConfig::default();
    config.max_file_bytes = 1024 * 1024;
    let outcome = persist(
        Arc::clone(&env.store),
        Some(blobs.clone() as Arc<dyn BlobStore>),
        &config,
        request(&env, 1),
    )
    .await;
    assert!(outcome.attempted);
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    assert_eq!(outcome.stored.len(), 64, "capped");
    assert!(
        paths(&outcome).contains(&"report.md"),
        "report kept by the cap"
    );
    for meta in blobs.list(None).await.unwrap() {
        let blob = blobs.get(&meta.key).await.unwrap();
        assert_ne!(&blob.bytes[..], &layout.secret_bytes[..], "secret leaked");
        assert_ne!(&blob.bytes[..], b"also outside");
    }
    let skipped_reason = |p: &str| {
        outcome
            .skipped
            .iter()
            .find(|s| s.path == p)
            .map(|s| s.reason.to_string())
            .unwrap_or_default()
    };
    assert_eq!(skipped_reason("empty.txt"), "empty file");
    assert!(skipped_reason("big.bin").contains("limit"));
    assert!(outcome.rows_written);
    assert!(matches!(outcome.report, ReportFile::Stored { .. }));
}

#[tokio::test]
async fn a_file_swapped_for_a_symlink_after_the_walk_is_not_followed_outside() {
    // Simulate the race: the walk saw a regular file, then the session
    // swapped it for a symlink to a file outside. Reading goes through
    // the scratch dir's capability, which refuses to leave it.
    let env = env().await;
    write(env.scratch.path(), "data.txt", b"innocent");
    let secret = env.outside.path().join("secret");
    std::fs::write(&secret, b"outside secret").unwrap();
    std::fs::remove_file(env.scratch.path().join("data.txt")).unwrap();
    std::os::unix::fs::symlink(&secret, env.scratch.path().join("data.txt")).unwrap();

    let dir = cap_std_dir(env.scratch.path());
    let opened = dir.open("data.txt");
    assert!(opened.is_err(), "cap-std must refuse an escaping symlink");

    // And through the whole phase (the walk now sees a symlink; the
    // read path refuses symlinks as well).
    let blobs = Arc::new(MemoryBlobStore::new());
    let outcome = persist(
        Arc::clone(&env.store),
        Some(blobs.clone() as Arc<dyn BlobStore>),
        &PersistConfig::default(),
        request(&env, 1),
    )
    .await;
    assert!(outcome.stored.is_empty());
    for meta in blobs.list(None).await.unwrap() {
        assert_ne!(
            &blobs.get(&meta.key).await.unwrap().bytes[..],
            b"outside secret"
        );
    }
}

fn cap_std_dir(p: &Path) -> cap_std::fs::Dir {
    cap_std::fs::Dir::open_ambient_dir(p, cap_std::ambient_authority()).unwrap()
}
