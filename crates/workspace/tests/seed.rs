//! GitSeeder against a real repository built in the test.

use std::fs;
use std::sync::Arc;

use korvus_store::WorkspaceRef;
use korvus_workspace::{
    tree_prefix, GitSeeder, SeedOutcome, SeedReport, SeedSkipReason, Seeder, WorkspaceError,
};

use crate::support::{
    git, listing, mode, scratch, TestRepo, GUIDE_V1, GUIDE_V2, SKILL_V1, SKILL_V2,
};

fn seeded(outcome: SeedOutcome) -> SeedReport {
    match outcome {
        SeedOutcome::Seeded(report) => report,
        other => panic!("expected Seeded, got {other:?}"),
    }
}

#[tokio::test]
async fn seeding_at_the_first_commit_yields_its_contents_read_only() {
    let repo = TestRepo::new();
    let s = scratch().await;
    let report = seeded(
        GitSeeder::default()
            .seed(&s.dir, Some(&repo.pin(&repo.first)))
            .await
            .unwrap(),
    );
    assert_eq!(report.commit, repo.first);

    let dir = s.dir.path();
    assert_eq!(
        listing(dir).into_iter().collect::<Vec<_>>(),
        [
            "docs/",
            "docs/guide.md",
            "runbooks/",
            "runbooks/restart.md",
            "skills/",
            "skills/disk/",
            "skills/disk/SKILL.md",
        ],
        "only the first commit's files of the three trees, nothing outside them"
    );
    // The first commit's bytes: not HEAD (second commit), not the working tree.
    assert_eq!(
        fs::read_to_string(dir.join("docs/guide.md")).unwrap(),
        GUIDE_V1
    );
    assert_eq!(
        fs::read_to_string(dir.join("skills/disk/SKILL.md")).unwrap(),
        SKILL_V1
    );

    for file in [
        "docs/guide.md",
        "runbooks/restart.md",
        "skills/disk/SKILL.md",
    ] {
        assert_eq!(mode(&dir.join(file)), 0o444, "{file}");
    }
    for d in ["docs", "runbooks", "skills", "skills/disk"] {
        assert_eq!(mode(&dir.join(d)), 0o555, "{d}");
    }
    // The scratch dir itself stays the session's: 0700.
    assert_eq!(mode(dir), 0o700);

    let trees: Vec<&str> = report.trees.iter().map(|t| t.as_str()).collect();
    assert_eq!(trees, ["docs", "runbooks", "skills"]);
    assert!(report.absent_trees.is_empty());
    assert_eq!(report.files.len(), 3);
    assert_eq!(
        report.bytes,
        (GUIDE_V1.len() + "restart it\n".len() + SKILL_V1.len()) as u64
    );
}

#[tokio::test]
async fn seeding_at_the_second_commit_yields_its_contents_and_leaves_symlinks_out() {
    let repo = TestRepo::new();
    let s = scratch().await;
    // An abbreviated id is resolved to the full one.
    let report = seeded(
        GitSeeder::default()
            .seed(&s.dir, Some(&repo.pin(&repo.second[..10])))
            .await
            .unwrap(),
    );
    assert_eq!(report.commit, repo.second);
    let dir = s.dir.path();
    assert_eq!(
        fs::read_to_string(dir.join("docs/guide.md")).unwrap(),
        GUIDE_V2
    );
    assert_eq!(
        fs::read_to_string(dir.join("skills/disk/SKILL.md")).unwrap(),
        SKILL_V2
    );
    assert!(dir.join("docs/new.md").is_file());
    assert!(dir.join("skills/net/SKILL.md").is_file());
    assert!(
        !dir.join("docs/untracked.md").exists(),
        "working tree leaked"
    );
    assert!(
        fs::symlink_metadata(dir.join("docs/link.rs")).is_err(),
        "symlink was seeded"
    );
    assert_eq!(report.left_out.len(), 1);
    assert_eq!(report.left_out[0].path, "docs/link.rs");
    assert_eq!(report.left_out[0].reason, "symlink");
}

#[tokio::test]
async fn a_bare_mirror_configured_on_the_seeder_is_used_for_every_pin() {
    let repo = TestRepo::new();
    let mirror = repo.path.parent().unwrap().join("mirror.git");
    git(
        repo.path.parent().unwrap(),
        &[
            "clone",
            "-q",
            "--bare",
            repo.path.to_str().unwrap(),
            mirror.to_str().unwrap(),
        ],
    );
    let s = scratch().await;
    let pin = WorkspaceRef {
        repo: "https://example.invalid/ops.git".into(),
        commit: repo.first.clone(),
    };
    let report = seeded(
        GitSeeder::default()
            .with_repository(&mirror)
            .seed(&s.dir, Some(&pin))
            .await
            .unwrap(),
    );
    assert_eq!(report.commit, repo.first);
    assert_eq!(
        fs::read_to_string(s.dir.path().join("docs/guide.md")).unwrap(),
        GUIDE_V1
    );
}

#[tokio::test]
async fn configured_trees_replace_the_defaults() {
    let repo = TestRepo::new();
    let s = scratch().await;
    let seeder = GitSeeder::default().with_trees(vec![
        tree_prefix("docs/").unwrap(),
        tree_prefix("missing").unwrap(),
    ]);
    let report = seeded(
        seeder
            .seed(&s.dir, Some(&repo.pin(&repo.first)))
            .await
            .unwrap(),
    );
    assert_eq!(
        listing(s.dir.path()).into_iter().collect::<Vec<_>>(),
        ["docs/", "docs/guide.md"],
        "`docsextra/` shares a prefix but is not under `docs`"
    );
    assert_eq!(report.absent_trees, [tree_prefix("missing").unwrap()]);
    let deny: Vec<String> = seeder
        .read_only_prefixes()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(deny, ["context", "docs", "missing"]);
}

#[tokio::test]
async fn unpinned_or_repository_less_sessions_are_skipped_with_a_reason() {
    let s = scratch().await;
    let seeder = GitSeeder::default();
    assert_eq!(
        seeder.seed(&s.dir, None).await.unwrap(),
        SeedOutcome::Skipped(SeedSkipReason::NotPinned)
    );
    let no_repo = WorkspaceRef {
        repo: "  ".into(),
        commit: "abc".into(),
    };
    let outcome = seeder.seed(&s.dir, Some(&no_repo)).await.unwrap();
    assert_eq!(outcome, SeedOutcome::Skipped(SeedSkipReason::NoRepository));
    assert_eq!(
        SeedSkipReason::NoRepository.to_string(),
        "no repository is configured"
    );
    assert!(listing(s.dir.path()).is_empty());
}

#[tokio::test]
async fn an_unknown_commit_is_a_typed_error_and_leaves_the_dir_clean() {
    let repo = TestRepo::new();
    let s = scratch().await;
    for commit in [
        "0123456789abcdef0123456789abcdef01234567",
        "no-such-branch",
        "--help",
        "",
        "a b",
    ] {
        let err = GitSeeder::default()
            .seed(&s.dir, Some(&repo.pin(commit)))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, WorkspaceError::UnknownCommit { commit: c, .. } if c == commit),
            "{commit:?}: {err:?}"
        );
    }
    // A tree id is an object, but not a commit.
    let tree = git(
        &repo.path,
        &["rev-parse", &format!("{}^{{tree}}", repo.first)],
    );
    let err = GitSeeder::default()
        .seed(&s.dir, Some(&repo.pin(&tree)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorkspaceError::UnknownCommit { .. }),
        "{err:?}"
    );
    assert!(listing(s.dir.path()).is_empty());
}

#[tokio::test]
async fn a_missing_git_binary_is_a_typed_error_and_leaves_the_dir_clean() {
    let repo = TestRepo::new();
    let s = scratch().await;
    let err = GitSeeder::default()
        .with_git_program("/nonexistent/bin/git")
        .seed(&s.dir, Some(&repo.pin(&repo.first)))
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::GitNotFound { .. }), "{err:?}");
    assert!(listing(s.dir.path()).is_empty());
}

#[tokio::test]
async fn a_path_that_is_not_a_repository_is_a_typed_error() {
    let repo = TestRepo::new();
    let s = scratch().await;
    // A plain directory inside a checkout must not be mistaken for the checkout.
    let inside = repo.path.join("src");
    for path in [inside, repo.path.join("does-not-exist")] {
        let pin = WorkspaceRef {
            repo: path.to_string_lossy().into_owned(),
            commit: repo.first.clone(),
        };
        let err = GitSeeder::default()
            .seed(&s.dir, Some(&pin))
            .await
            .unwrap_err();
        assert!(
            matches!(err, WorkspaceError::NotARepository { .. }),
            "{err:?}"
        );
    }
    assert!(listing(s.dir.path()).is_empty());
}

#[tokio::test]
async fn a_corrupt_repository_is_a_typed_error_and_no_half_seeded_tree_remains() {
    let repo = TestRepo::new();
    // `skills/` is written last (git's tree order), so `docs/` and
    // `runbooks/` are already written when the missing blob is hit.
    let object = repo.object_file(&format!("{}:skills/disk/SKILL.md", repo.first));
    fs::remove_file(&object).unwrap();
    let s = scratch().await;
    let err = GitSeeder::default()
        .seed(&s.dir, Some(&repo.pin(&repo.first)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorkspaceError::CorruptRepository { .. }),
        "{err:?}"
    );
    assert!(
        listing(s.dir.path()).is_empty(),
        "{:?}",
        listing(s.dir.path())
    );

    // A missing tree object fails before anything is written.
    let repo = TestRepo::new();
    let tree = repo.object_file(&format!("{}:docs", repo.first));
    fs::remove_file(&tree).unwrap();
    let err = GitSeeder::default()
        .seed(&s.dir, Some(&repo.pin(&repo.first)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorkspaceError::CorruptRepository { .. }),
        "{err:?}"
    );
    assert!(listing(s.dir.path()).is_empty());
}

#[tokio::test]
async fn the_seeder_is_object_safe() {
    let repo = TestRepo::new();
    let s = scratch().await;
    let seeder: Arc<dyn Seeder> = Arc::new(GitSeeder::default());
    let outcome = seeder
        .seed(&s.dir, Some(&repo.pin(&repo.first)))
        .await
        .unwrap();
    assert!(matches!(outcome, SeedOutcome::Seeded(_)));
}

#[cfg(feature = "mock")]
#[tokio::test]
async fn the_mock_seeder_stands_in_for_the_real_one() {
    let s = scratch().await;
    let mut mock = korvus_workspace::MockSeeder::new();
    // An embedder's test can build the whole outcome itself.
    let report = SeedReport {
        commit: "c0ffee".into(),
        trees: vec![tree_prefix("skills").unwrap()],
        absent_trees: Vec::new(),
        files: Vec::new(),
        bytes: 0,
        left_out: Vec::new(),
    };
    let returned = report.clone();
    mock.expect_seed()
        .times(1)
        .returning(move |_, _| Ok(SeedOutcome::Seeded(returned.clone())));
    let seeder: Arc<dyn Seeder> = Arc::new(mock);
    assert_eq!(
        seeder.seed(&s.dir, None).await.unwrap(),
        SeedOutcome::Seeded(report)
    );
}
