//! The session lifecycle on the production backends: PostgreSQL (`PgStore`,
//! `PgLog`) and S3 (moto), with a real scratch root and `GitSeeder`.

use korvus_store::StoreExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::BlobKey;
use korvus_runner::RunOutcome;
use korvus_session::{CreateSession, Manager};
use korvus_store::{ArtifactKind, Counters, IncidentId, NewIncident, SessionStatus, WorkspaceRef};
use korvus_workspace::{default_trees, GitSeeder, ScratchRoot};

use crate::support::{log_turn, settled, write, Backends, ScriptRunner};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A repository with `skills/` and `docs/`; returns its pinned commit.
fn repo(dir: &Path) -> String {
    git(dir, &["init", "-q", "-b", "main"]);
    write(
        dir,
        "skills/triage/SKILL.md",
        "---\nname: triage\ndescription: Find what broke first\n---\nSteps.\n",
    );
    write(dir, "docs/db.md", "# Databases\n");
    write(dir, "src/ignored.rs", "fn main() {}\n");
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "pinned"]);
    let pinned = git(dir, &["rev-parse", "HEAD"]);
    write(dir, "docs/db.md", "# Changed after the pin\n");
    git(dir, &["commit", "-qam", "later"]);
    pinned
}

#[tokio::test]
async fn postgres_s3_git_end_to_end() {
    let Some(b) = Backends::new().await else {
        return;
    };
    let repo_dir = tempfile::tempdir().unwrap();
    let commit = repo(repo_dir.path());
    let root = tempfile::tempdir().unwrap();
    let incident = b
        .store
        .create_incident(NewIncident {
            title: "db-1 disk full".into(),
            workspace: Some(WorkspaceRef {
                repo: repo_dir.path().display().to_string(),
                commit: commit.clone(),
            }),
        })
        .await
        .unwrap();
    let runner = ScriptRunner::new(|ctx, _| async move {
        let dir = ctx.scratch.clone().expect("scratch dir");
        // Seeded at the pinned commit, read-only, only the configured trees.
        let docs = std::fs::read_to_string(dir.join("docs/db.md")).unwrap();
        assert_eq!(docs, "# Databases\n");
        assert!(!dir.join("src").exists());
        assert!(std::fs::metadata(dir.join("docs/db.md"))
            .unwrap()
            .permissions()
            .readonly());
        assert_eq!(ctx.skills.skills().len(), 1);
        log_turn(&ctx, 1).await;
        write(&dir, "report.md", "# Disk full\n\nThe WAL grew.\n");
        write(&dir, "evidence/df.txt", "100%\n");
        Ok(RunOutcome::completed(Counters {
            turns: 1,
            ..Counters::default()
        }))
    });
    let manager = Manager::builder(Arc::clone(&b.store), Arc::new(runner))
        .blob_store(Arc::clone(&b.blobs))
        .turn_log(b.logs.clone())
        .scratch_root(ScratchRoot::supplied(root.path()))
        .seeder(Arc::new(GitSeeder::default()), default_trees())
        .build();
    let s = manager
        .create(CreateSession::new(incident.id, "why is db-1 full?"))
        .await
        .unwrap();
    let done = settled(&manager, &s).await;
    assert_eq!(done.status, SessionStatus::Completed, "{done:?}");
    let report = b.store.get_report(s.id, 1).await.unwrap();
    let key = BlobKey::new(report.markdown_key.expect("markdown key")).unwrap();
    let doc = b.blobs.get(&key).await.unwrap();
    assert_eq!(&doc.bytes[..], b"# Disk full\n\nThe WAL grew.\n");
    let arts = b.store.all_session_artifacts(s.id).await.unwrap();
    let paths: Vec<&str> = arts.iter().map(|a| a.path.as_str()).collect();
    assert!(
        paths.contains(&"report.md") && paths.contains(&"evidence/df.txt"),
        "{paths:?}"
    );
    assert!(!paths
        .iter()
        .any(|p| p.starts_with("docs/") || p.starts_with("skills/")));
    for a in &arts {
        let blob = b
            .blobs
            .get(&BlobKey::new(a.blob_key.clone()).unwrap())
            .await
            .unwrap();
        assert_eq!(
            korvus_blob::Sha256Digest::of(&blob.bytes).to_hex(),
            a.sha256
        );
    }
    assert_eq!(
        arts.iter().find(|a| a.path == "report.md").unwrap().kind,
        ArtifactKind::Report
    );
    assert!(
        std::fs::read_dir(root.path()).unwrap().next().is_none(),
        "scratch dir released"
    );
    manager.stop().await;
    b.teardown().await;
}

#[tokio::test]
async fn postgres_s3_reopen_restores_and_races() {
    let Some(b) = Backends::new().await else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let incident: IncidentId = b
        .store
        .create_incident(NewIncident {
            title: "reopen".into(),
            workspace: None,
        })
        .await
        .unwrap()
        .id;
    // A reopened run waits until its round's reopens have all returned: a
    // run that ended before a late caller's transition would let that
    // caller reopen the session again, legitimately.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let round_over = Arc::clone(&gate);
    let runner = ScriptRunner::new(move |ctx, msg| {
        let gate = Arc::clone(&gate);
        async move {
            let dir = ctx.scratch.clone().unwrap();
            match msg {
                None => {
                    write(&dir, "report.md", "# R1\n");
                    write(&dir, "same.txt", "same");
                }
                Some(_) => {
                    gate.acquire().await.unwrap().forget();
                    assert_eq!(
                        std::fs::read_to_string(dir.join("same.txt")).unwrap(),
                        "same"
                    );
                    write(&dir, "report.md", format!("# R{}\n", ctx.revision));
                }
            }
            Ok(RunOutcome::completed(Counters::default()))
        }
    });
    let manager = Manager::builder(Arc::clone(&b.store), Arc::new(runner))
        .blob_store(Arc::clone(&b.blobs))
        .turn_log(b.logs.clone())
        .scratch_root(ScratchRoot::supplied(root.path()))
        .settle_timeout(Duration::from_secs(10))
        .build();
    let s = manager
        .create(CreateSession::new(incident, "first"))
        .await
        .unwrap();
    settled(&manager, &s).await;
    for round in 0..10u32 {
        let results =
            futures::future::join_all((0..8).map(|_| manager.reopen(s.id, "again"))).await;
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            1,
            "round {round}"
        );
        round_over.add_permits(1);
        let done = settled(&manager, &s).await;
        assert_eq!(done.status, SessionStatus::Completed);
    }
    let reports = b.store.all_reports(s.id).await.unwrap();
    assert_eq!(reports.len(), 11, "one revision per round");
    let arts = b.store.all_session_artifacts(s.id).await.unwrap();
    assert_eq!(
        arts.iter().filter(|a| a.path == "same.txt").count(),
        1,
        "the unchanged file is stored once"
    );
    manager.stop().await;
    b.teardown().await;
}
