//! Scratch roots and dirs: create, refuse, release.

use std::fs;

use korvus_store::SessionId;
use korvus_workspace::{create, create_iteration, GitSeeder, ScratchRoot, Seeder, WorkspaceError};
use tempfile::TempDir;

use crate::support::{listing, mode, TestRepo};

#[tokio::test]
async fn a_scratch_dir_is_made_0700_under_the_session_id() {
    let tmp = TempDir::new().unwrap();
    let id = SessionId::new();
    let dir = create(tmp.path(), id).await.unwrap();
    assert_eq!(dir.path(), tmp.path().join(id.to_string()));
    assert_eq!(dir.session_id(), id);
    assert!(dir.path().is_dir());
    assert_eq!(mode(dir.path()), 0o700);
}

#[tokio::test]
async fn an_existing_session_dir_is_refused_and_left_untouched() {
    let tmp = TempDir::new().unwrap();
    let id = SessionId::new();
    let someone = tmp.path().join(id.to_string());
    fs::create_dir(&someone).unwrap();
    fs::write(someone.join("theirs.txt"), "keep").unwrap();

    let err = create(tmp.path(), id).await.unwrap_err();
    assert!(
        matches!(&err, WorkspaceError::AlreadyExists { path } if *path == someone),
        "{err:?}"
    );
    assert_eq!(
        fs::read_to_string(someone.join("theirs.txt")).unwrap(),
        "keep"
    );

    // Creating twice under one id is the same refusal.
    let id2 = SessionId::new();
    create(tmp.path(), id2).await.unwrap();
    let err = create(tmp.path(), id2).await.unwrap_err();
    assert!(
        matches!(err, WorkspaceError::AlreadyExists { .. }),
        "{err:?}"
    );

    // A symlink under the id is refused too, not followed.
    let id3 = SessionId::new();
    std::os::unix::fs::symlink(
        tmp.path().join("elsewhere"),
        tmp.path().join(id3.to_string()),
    )
    .unwrap();
    let err = create(tmp.path(), id3).await.unwrap_err();
    assert!(
        matches!(err, WorkspaceError::AlreadyExists { .. }),
        "{err:?}"
    );
    assert!(!tmp.path().join("elsewhere").exists());
}

#[tokio::test]
async fn create_is_not_recursive() {
    let tmp = TempDir::new().unwrap();
    let missing_root = tmp.path().join("no/such/root");
    let err = create(&missing_root, SessionId::new()).await.unwrap_err();
    assert!(matches!(err, WorkspaceError::Io { .. }), "{err:?}");
    assert!(!tmp.path().join("no").exists());
}

#[tokio::test]
async fn a_supplied_root_survives_release() {
    let tmp = TempDir::new().unwrap();
    let root = ScratchRoot::supplied(tmp.path());
    assert!(!root.is_owned());
    let dir = root.create(SessionId::new()).await.unwrap();
    fs::write(tmp.path().join("embedder.txt"), "mine").unwrap();
    let dir_path = dir.path().to_path_buf();

    dir.release().await.unwrap();
    assert!(!dir_path.exists());
    root.release().await.unwrap();
    assert!(tmp.path().is_dir());
    assert_eq!(
        listing(tmp.path()).into_iter().collect::<Vec<_>>(),
        ["embedder.txt"]
    );
}

#[tokio::test]
async fn an_owned_root_is_removed_on_release_with_seeded_trees_inside() {
    let tmp = TempDir::new().unwrap();
    let repo = TestRepo::new();
    let root = ScratchRoot::create_owned(tmp.path()).await.unwrap();
    assert!(root.is_owned());
    assert_eq!(mode(root.path()), 0o700);
    let path = root.path().to_path_buf();
    assert!(path.starts_with(tmp.path()));

    // A dir that was never released, with read-only trees in it.
    let dir = root.create(SessionId::new()).await.unwrap();
    GitSeeder::default()
        .seed(&dir, Some(&repo.pin(&repo.first)))
        .await
        .unwrap();
    // A symlink out of the root must be removed, not followed.
    let outside = tmp.path().join("outside.txt");
    fs::write(&outside, "keep").unwrap();
    std::os::unix::fs::symlink(&outside, dir.path().join("link")).unwrap();

    root.release().await.unwrap();
    assert!(!path.exists());
    assert_eq!(fs::read_to_string(&outside).unwrap(), "keep");
}

#[tokio::test]
async fn releasing_a_seeded_dir_removes_the_read_only_trees() {
    let tmp = TempDir::new().unwrap();
    let repo = TestRepo::new();
    let dir = create(tmp.path(), SessionId::new()).await.unwrap();
    GitSeeder::default()
        .seed(&dir, Some(&repo.pin(&repo.second)))
        .await
        .unwrap();
    let path = dir.path().to_path_buf();
    assert_eq!(mode(&path.join("docs")), 0o555);
    dir.release().await.unwrap();
    assert!(!path.exists());
    assert!(listing(tmp.path()).is_empty());
}

#[tokio::test]
async fn an_iteration_dir_is_made_0700_under_a_searchable_session_dir() {
    let tmp = TempDir::new().unwrap();
    let id = SessionId::new();
    let dir = create_iteration(tmp.path(), id, 1).await.unwrap();
    let session_dir = tmp.path().join(id.to_string());
    assert_eq!(dir.path(), session_dir.join("1"));
    assert_eq!(dir.session_id(), id);
    assert_eq!(dir.revision(), Some(1));
    // Others may walk through the session dir (to reach an iteration dir
    // handed to an agent user) but not list it.
    assert_eq!(mode(&session_dir), 0o711);
    assert_eq!(mode(dir.path()), 0o700);
    // The session layout has no revision.
    assert_eq!(
        create(tmp.path(), SessionId::new())
            .await
            .unwrap()
            .revision(),
        None
    );

    // Releasing the only iteration takes the session's dir with it.
    dir.release().await.unwrap();
    assert!(!session_dir.exists());
}

#[tokio::test]
async fn a_leftover_earlier_iteration_does_not_block_the_next() {
    let tmp = TempDir::new().unwrap();
    let id = SessionId::new();
    let session_dir = tmp.path().join(id.to_string());
    // Revision 1's dir is left behind (never released), with a seeded-like
    // read-only tree in it.
    let first = create_iteration(tmp.path(), id, 1).await.unwrap();
    fs::create_dir(first.path().join("docs")).unwrap();
    fs::write(first.path().join("docs/a.md"), "a").unwrap();
    fs::set_permissions(
        first.path().join("docs"),
        std::os::unix::fs::PermissionsExt::from_mode(0o555),
    )
    .unwrap();
    drop(first);

    let second = create_iteration(tmp.path(), id, 2).await.unwrap();
    assert_eq!(second.path(), session_dir.join("2"));
    // Releasing it leaves the session's dir, which still holds revision 1.
    second.release().await.unwrap();
    assert!(!session_dir.join("2").exists());
    assert_eq!(
        fs::read_to_string(session_dir.join("1/docs/a.md")).unwrap(),
        "a"
    );

    // The leftover revision itself is refused, untouched.
    let err = create_iteration(tmp.path(), id, 1).await.unwrap_err();
    assert!(
        matches!(&err, WorkspaceError::AlreadyExists { path } if *path == session_dir.join("1")),
        "{err:?}"
    );
    assert_eq!(
        fs::read_to_string(session_dir.join("1/docs/a.md")).unwrap(),
        "a"
    );

    // The session layout's leftover (a dir made by `create`) does not block
    // an iteration either: it is the session's dir, reused.
    let old = SessionId::new();
    create(tmp.path(), old).await.unwrap();
    create_iteration(tmp.path(), old, 3)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(!tmp.path().join(old.to_string()).exists());
}

#[tokio::test]
async fn a_session_path_that_is_not_a_directory_is_refused_not_followed() {
    let tmp = TempDir::new().unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let linked = SessionId::new();
    std::os::unix::fs::symlink(&elsewhere, tmp.path().join(linked.to_string())).unwrap();
    let err = create_iteration(tmp.path(), linked, 1).await.unwrap_err();
    assert!(
        matches!(err, WorkspaceError::AlreadyExists { .. }),
        "{err:?}"
    );
    assert!(
        listing(&elsewhere).is_empty(),
        "nothing made through the link"
    );

    let file = SessionId::new();
    fs::write(tmp.path().join(file.to_string()), "a file").unwrap();
    let err = create_iteration(tmp.path(), file, 1).await.unwrap_err();
    assert!(
        matches!(err, WorkspaceError::AlreadyExists { .. }),
        "{err:?}"
    );

    // And the root must exist: nothing is made recursively above it.
    let err = create_iteration(&tmp.path().join("no/root"), SessionId::new(), 1)
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::Io { .. }), "{err:?}");
    assert!(!tmp.path().join("no").exists());
}

#[tokio::test]
async fn reap_stops_the_agents_a_dead_run_recorded_and_only_those() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let tmp = TempDir::new().unwrap();
    let start = |secs: &str| {
        std::process::Command::new("sleep")
            .arg(secs)
            .process_group(0)
            .spawn()
            .unwrap()
    };
    // A run that died: its agent group still runs, recorded beside its dir.
    let dead = create_iteration(tmp.path(), SessionId::new(), 1)
        .await
        .unwrap();
    let mut orphan = start("300.1");
    let pgid = i32::try_from(orphan.id()).unwrap();
    korvus_workspace::record_agent(dead.path(), pgid).unwrap();
    // A record whose process is another one now (its start time differs):
    // never signalled.
    let stale = create_iteration(tmp.path(), SessionId::new(), 1)
        .await
        .unwrap();
    let mut bystander = start("300.2");
    let other = i32::try_from(bystander.id()).unwrap();
    std::fs::write(
        korvus_workspace::agent_record_path(stale.path()).unwrap(),
        format!("{other} 1\n"),
    )
    .unwrap();

    let reaped = korvus_workspace::reap(tmp.path()).await.unwrap();
    assert_eq!(reaped.agents_stopped, vec![pgid]);
    assert_eq!(orphan.wait().unwrap().signal(), Some(9), "SIGKILL");
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the other process lives"
    );
    bystander.kill().unwrap();
    bystander.wait().unwrap();
    assert_eq!(reaped.removed.len(), 2);
}

#[tokio::test]
async fn reap_through_a_revision_never_touches_a_later_runs_dir_or_agent() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let tmp = TempDir::new().unwrap();
    let session = SessionId::new();
    let start = || {
        std::process::Command::new("sleep")
            .arg("300.3")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    // Revisions 1 and 2 are left over (2's agent still runs); revision 3
    // is a run that started after the caller read the row.
    let one = create_iteration(tmp.path(), session, 1).await.unwrap();
    std::fs::write(one.path().join("left.txt"), "x").unwrap();
    let two = create_iteration(tmp.path(), session, 2).await.unwrap();
    let mut old_agent = start();
    let old = i32::try_from(old_agent.id()).unwrap();
    korvus_workspace::record_agent(two.path(), old).unwrap();
    let three = create_iteration(tmp.path(), session, 3).await.unwrap();
    std::fs::write(three.path().join("live.txt"), "mine").unwrap();
    let mut live_agent = start();
    let live = i32::try_from(live_agent.id()).unwrap();
    korvus_workspace::record_agent(three.path(), live).unwrap();

    let reaped = korvus_workspace::reap_session_through(tmp.path(), session, 2)
        .await
        .unwrap();
    assert_eq!(reaped.agents_stopped, vec![old]);
    assert_eq!(old_agent.wait().unwrap().signal(), Some(9));
    assert!(
        live_agent.try_wait().unwrap().is_none(),
        "the later run's agent lives"
    );
    assert!(!one.path().exists() && !two.path().exists());
    assert!(
        three.path().join("live.txt").exists(),
        "the later run's dir stays"
    );
    assert!(korvus_workspace::agent_record_path(three.path())
        .unwrap()
        .exists());
    assert!(
        reaped.removed.is_empty(),
        "the session's dir is still in use"
    );

    // Once that run is over too, everything goes.
    let reaped = korvus_workspace::reap_session_through(tmp.path(), session, 3)
        .await
        .unwrap();
    assert_eq!(reaped.agents_stopped, vec![live]);
    assert_eq!(live_agent.wait().unwrap().signal(), Some(9));
    assert_eq!(reaped.removed, vec![session]);
    assert!(!tmp.path().join(session.to_string()).exists());

    // The one-dir layout is removed whole; a missing dir is nothing to do.
    let flat = korvus_workspace::create(tmp.path(), SessionId::new())
        .await
        .unwrap();
    std::fs::write(flat.path().join("notes.md"), "x").unwrap();
    let reaped = korvus_workspace::reap_session_through(tmp.path(), flat.session_id(), 0)
        .await
        .unwrap();
    assert_eq!(reaped.removed, vec![flat.session_id()]);
    assert!(!flat.path().exists());
    let none = korvus_workspace::reap_session_through(tmp.path(), SessionId::new(), 9)
        .await
        .unwrap();
    assert!(none.removed.is_empty() && none.failed.is_empty());
}
