//! `reap(root)`: only UUID-named directories, never through symlinks.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

use korvus_store::SessionId;
use korvus_workspace::reap;
use tempfile::TempDir;
use uuid::Uuid;

use crate::support::listing;

#[tokio::test]
async fn reap_removes_only_uuid_named_directories() {
    let tmp = TempDir::new().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("precious.txt"), "keep").unwrap();

    // Two crash leftovers; one with a read-only tree and links out of it.
    let crashed = SessionId::new();
    let crashed_dir = root.join(crashed.to_string());
    fs::create_dir_all(crashed_dir.join("docs")).unwrap();
    fs::write(crashed_dir.join("docs/a.md"), "a").unwrap();
    fs::set_permissions(
        crashed_dir.join("docs/a.md"),
        fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    fs::set_permissions(crashed_dir.join("docs"), fs::Permissions::from_mode(0o555)).unwrap();
    symlink(&outside, crashed_dir.join("link-dir")).unwrap();
    symlink(outside.join("precious.txt"), crashed_dir.join("link-file")).unwrap();
    let empty = SessionId::new();
    fs::create_dir(root.join(empty.to_string())).unwrap();

    // Things reap must leave alone.
    let uuid_file = Uuid::now_v7().to_string();
    fs::write(root.join(&uuid_file), "a file named like a session").unwrap();
    let uuid_link = Uuid::now_v7().to_string();
    symlink(&outside, root.join(&uuid_link)).unwrap();
    let upper = Uuid::now_v7().to_string().to_uppercase();
    fs::create_dir(root.join(&upper)).unwrap();
    let simple = Uuid::now_v7().simple().to_string();
    fs::create_dir(root.join(&simple)).unwrap();
    fs::create_dir(root.join("korvus-scratch-x")).unwrap();
    fs::create_dir(root.join("not-a-uuid")).unwrap();

    let reaped = reap(&root).await.unwrap();
    let mut removed = reaped.removed.clone();
    removed.sort();
    let mut expected = vec![crashed, empty];
    expected.sort();
    assert_eq!(removed, expected);
    assert!(reaped.failed.is_empty());

    let mut left: Vec<String> = listing(&root)
        .into_iter()
        .filter(|p| !p.trim_end_matches('/').contains('/'))
        .collect();
    left.sort();
    let mut want = vec![
        uuid_file.clone(),
        uuid_link.clone(),
        format!("{upper}/"),
        format!("{simple}/"),
        "korvus-scratch-x/".to_owned(),
        "not-a-uuid/".to_owned(),
    ];
    want.sort();
    assert_eq!(left, want);
    // The symlinks were not followed: the target and its file are intact.
    assert_eq!(
        fs::read_to_string(outside.join("precious.txt")).unwrap(),
        "keep"
    );
    assert!(fs::symlink_metadata(root.join(&uuid_link))
        .unwrap()
        .file_type()
        .is_symlink());

    // Reaping again finds nothing.
    assert!(reap(&root).await.unwrap().removed.is_empty());
}

#[tokio::test]
async fn reaping_a_missing_root_is_an_error() {
    let tmp = TempDir::new().unwrap();
    assert!(reap(&tmp.path().join("missing")).await.is_err());
}

#[tokio::test]
async fn reap_removes_leftovers_of_both_layouts() {
    let tmp = TempDir::new().unwrap();
    let root = tmp.path().to_path_buf();

    // The session layout: `<root>/<session>`.
    let old = korvus_workspace::create(&root, SessionId::new())
        .await
        .unwrap();
    fs::write(old.path().join("report.md"), "r").unwrap();
    let old_id = old.session_id();
    drop(old);

    // The iteration layout: `<root>/<session>/<revision>`, two iterations
    // left behind, one with a read-only tree.
    let id = SessionId::new();
    let first = korvus_workspace::create_iteration(&root, id, 1)
        .await
        .unwrap();
    fs::create_dir(first.path().join("docs")).unwrap();
    fs::write(first.path().join("docs/a.md"), "a").unwrap();
    fs::set_permissions(first.path().join("docs"), fs::Permissions::from_mode(0o555)).unwrap();
    let second = korvus_workspace::create_iteration(&root, id, 2)
        .await
        .unwrap();
    fs::write(second.path().join("out.txt"), "o").unwrap();
    drop((first, second));

    let reaped = reap(&root).await.unwrap();
    let mut removed = reaped.removed.clone();
    removed.sort();
    let mut expected = vec![old_id, id];
    expected.sort();
    assert_eq!(removed, expected);
    assert!(reaped.failed.is_empty(), "{:?}", reaped.failed);
    assert!(listing(&root).is_empty(), "{:?}", listing(&root));

    // The next iteration of the reaped session starts clean.
    let next = korvus_workspace::create_iteration(&root, id, 3)
        .await
        .unwrap();
    assert!(listing(next.path()).is_empty());
}
