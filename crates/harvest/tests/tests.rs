//! Integration tests of korvus-harvest: the walk over hostile workspaces,
//! containment, the persist phase's orderings and its fault matrix, on
//! memory and filesystem backends.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::{BlobKey, BlobStore, FsBlobStore, MemoryBlobStore, Sha256Digest};
use korvus_harvest::{
    persist, PersistConfig, PersistOutcome, PersistRequest, ReportFile, MANIFEST_PATH,
};
use korvus_store::{
    ArtifactKind, MemoryStore, NewIncident, NewSession, Session, SessionId, SessionKind, Store,
    StoreExt,
};
use korvus_workspace::{RestoredFile, WorkspacePath};

/// A store with one running session, and a scratch dir.
struct Env {
    store: Arc<dyn Store>,
    session: Session,
    scratch: tempfile::TempDir,
    outside: tempfile::TempDir,
}

async fn env_with(store: Arc<dyn Store>) -> Env {
    let incident = store
        .create_incident(NewIncident {
            title: "harvest".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let session = store
        .create_session(NewSession {
            id: SessionId::new(),
            incident_id: incident.id,
            kind: SessionKind::Initial,
            prompt: "go".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    Env {
        store,
        session,
        scratch: tempfile::tempdir().unwrap(),
        outside: tempfile::tempdir().unwrap(),
    }
}

async fn env() -> Env {
    env_with(Arc::new(MemoryStore::new())).await
}

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn request(env: &Env, revision: u32) -> PersistRequest {
    PersistRequest {
        incident: env.session.incident_id,
        session: env.session.id,
        revision,
        scratch: Some(env.scratch.path().to_path_buf()),
        skip_prefixes: korvus_workspace::read_only_prefixes(&korvus_workspace::default_trees()),
        restored: BTreeMap::new(),
    }
}

fn paths(outcome: &PersistOutcome) -> Vec<&str> {
    outcome.stored.iter().map(|s| s.path.as_str()).collect()
}

mod walk {
    use korvus_harvest::{apply_cap, harvest_candidates, SkipReason};
    use korvus_testkit::fixtures::HostileWorkspace;

    #[test]
    fn hostile_workspace_skips_are_counted_with_reasons() {
        let scratch = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let layout = HostileWorkspace::new()
            .with_many_files(10_000)
            .build(scratch.path(), outside.path());
        let mut walk = harvest_candidates(scratch.path(), &[]);
        let found: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        // Every regular file is a candidate (empty and over-size ones too:
        // the persist phase skips those after reading).
        for rel in &layout.regular {
            assert!(found.contains(&rel.as_str()), "{rel} missing");
        }
        assert!(found.contains(&"empty.txt") && found.contains(&"big.bin"));
        assert_eq!(found.len(), layout.regular.len() + 2);
        let mut sorted = found.clone();
        sorted.sort();
        assert_eq!(found, sorted, "lexical order");
        let reason_of = |p: &str| {
            walk.skipped
                .iter()
                .find(|s| s.path == p)
                .map(|s| s.reason.clone())
                .unwrap_or_else(|| panic!("{p} not reported as skipped"))
        };
        for link in &layout.symlinks {
            assert_eq!(
                reason_of(link),
                SkipReason::NotRegular {
                    kind: "symlink".into()
                }
            );
        }
        assert_eq!(
            reason_of(&layout.fifo),
            SkipReason::NotRegular {
                kind: "fifo".into()
            }
        );
        for hidden in &layout.hidden {
            assert_eq!(reason_of(hidden), SkipReason::Hidden);
        }
        assert_eq!(reason_of(".env"), SkipReason::Hidden);
        assert!(
            !walk.skipped.iter().any(|s| s.path.starts_with(".git/")),
            "never descended"
        );
        assert_eq!(reason_of("new\nline.txt"), SkipReason::InvalidName);
        assert_eq!(
            walk.skipped
                .iter()
                .filter(|s| s.reason == SkipReason::InvalidName)
                .count(),
            2,
            "the non-UTF-8 name too"
        );
        assert!(found.contains(&layout.deep.as_str()), "40-level deep path");

        apply_cap(&mut walk, 64);
        assert_eq!(walk.candidates.len(), 64);
        assert!(walk
            .candidates
            .iter()
            .any(|c| c.path.as_str() == "report.md"));
        let over = walk
            .skipped
            .iter()
            .filter(|s| s.reason == SkipReason::OverCap { cap: 64 })
            .count();
        assert_eq!(over, layout.regular.len() + 2 - 64);
    }

    #[test]
    fn read_only_prefixes_are_pruned() {
        let scratch = tempfile::tempdir().unwrap();
        super::write(scratch.path(), "skills/a/SKILL.md", b"x");
        super::write(scratch.path(), "context/1-in.md", b"x");
        super::write(scratch.path(), "skillsets/kept.md", b"x");
        let prefixes = korvus_workspace::read_only_prefixes(&korvus_workspace::default_trees());
        let walk = harvest_candidates(scratch.path(), &prefixes);
        let found: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(found, ["skillsets/kept.md"]);
        let ro: Vec<&str> = walk
            .skipped
            .iter()
            .filter(|s| s.reason == SkipReason::ReadOnly)
            .map(|s| s.path.as_str())
            .collect();
        assert_eq!(ro, ["context", "skills"]);
    }

    #[test]
    fn unreadable_subtree_is_skipped_and_the_walk_goes_on() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().unwrap();
        super::write(scratch.path(), "locked/inner.txt", b"x");
        super::write(scratch.path(), "open.txt", b"x");
        let locked = scratch.path().join("locked");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let walk = harvest_candidates(scratch.path(), &[]);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        let found: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert!(found.contains(&"open.txt"));
        if nix_is_root() {
            // Root ignores mode bits: the subtree is readable, so it is harvested.
            assert!(found.contains(&"locked/inner.txt"));
        } else {
            assert!(walk
                .skipped
                .iter()
                .any(|s| matches!(s.reason, SkipReason::Unreadable { .. })));
        }
    }

    fn nix_is_root() -> bool {
        std::process::Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false)
    }
}

mod containment {
    use super::*;
    use korvus_testkit::fixtures::HostileWorkspace;

    #[tokio::test]
    async fn nothing_outside_is_read_from_a_hostile_workspace() {
        let env = env().await;
        let layout = HostileWorkspace::new()
            .with_oversize_bytes(2 * 1024 * 1024)
            .build(env.scratch.path(), env.outside.path());
        let blobs = Arc::new(MemoryBlobStore::new());
        let config = PersistConfig {
            max_file_bytes: 1024 * 1024,
            ..PersistConfig::default()
        };
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
        let walk = korvus_harvest::harvest_candidates(env.scratch.path(), &[]);
        assert_eq!(walk.candidates.len(), 1);
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
}

mod persist_phase {
    use super::*;
    use korvus_testkit::faults::{BlobFault, FaultBlobStore, FaultStore, StoreFault, StoreOp};

    async fn run(env: &Env, blobs: Arc<dyn BlobStore>, req: PersistRequest) -> PersistOutcome {
        persist(
            Arc::clone(&env.store),
            Some(blobs),
            &PersistConfig::default(),
            req,
        )
        .await
    }

    #[tokio::test]
    async fn skipped_not_failed_without_blob_store_or_scratch() {
        let env = env().await;
        let outcome = persist(
            Arc::clone(&env.store),
            None,
            &PersistConfig::default(),
            request(&env, 1),
        )
        .await;
        assert!(!outcome.attempted);
        assert!(outcome.reason.unwrap().contains("blob store"));
        let mut req = request(&env, 1);
        req.scratch = None;
        let outcome = run(&env, Arc::new(MemoryBlobStore::new()), req).await;
        assert!(!outcome.attempted);
        assert!(outcome.reason.unwrap().contains("scratch"));
    }

    #[tokio::test]
    async fn files_land_bytes_first_rows_second_with_derived_keys() {
        let env = env().await;
        write(env.scratch.path(), "report.md", b"# R\n");
        write(env.scratch.path(), "out/data.csv", b"a,b\n1,2\n");
        let blobs = Arc::new(MemoryBlobStore::new());
        let outcome = run(&env, blobs.clone(), request(&env, 1)).await;
        assert_eq!(paths(&outcome), ["out/data.csv", "report.md"]);
        let rows = env
            .store
            .list_session_artifacts(env.session.id)
            .await
            .unwrap();
        assert_eq!(rows.len(), 3, "two files and the manifest");
        for row in &rows {
            let blob = blobs
                .get(&BlobKey::new(row.blob_key.clone()).unwrap())
                .await
                .unwrap();
            assert_eq!(Sha256Digest::of(&blob.bytes).to_hex(), row.sha256);
            assert_eq!(blob.bytes.len() as u64, row.size_bytes);
        }
        let report = rows.iter().find(|a| a.path == "report.md").unwrap();
        assert_eq!(report.kind, ArtifactKind::Report);
        assert_eq!(report.content_type, "text/markdown");
        let expected_key = korvus_blob::report_key(
            env.session.incident_id.as_uuid(),
            env.session.id.as_uuid(),
            1,
        );
        assert_eq!(report.blob_key, expected_key.as_str());
        assert_eq!(
            outcome.report,
            ReportFile::Stored {
                key: expected_key.to_string(),
                bytes: 4
            }
        );
        let csv = rows.iter().find(|a| a.path == "out/data.csv").unwrap();
        assert_eq!(csv.kind, ArtifactKind::AgentOutput);
        assert_eq!(csv.content_type, "text/csv");
        assert!(csv.blob_key.ends_with(&format!("{}/data.csv", csv.id)));
        // The manifest says what happened, for an operator.
        let manifest = rows.iter().find(|a| a.path == MANIFEST_PATH).unwrap();
        let bytes = blobs
            .get(&BlobKey::new(manifest.blob_key.clone()).unwrap())
            .await
            .unwrap()
            .bytes;
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["stored"].as_array().unwrap().len(), 2);
        assert_eq!(
            outcome.manifest_key.as_deref(),
            Some(manifest.blob_key.as_str())
        );
    }

    #[tokio::test]
    async fn sixty_four_files_take_one_row_round_trip() {
        let inner = env().await;
        let faults = Arc::new(FaultStore::new(Arc::clone(&inner.store)));
        let env = Env {
            store: faults.clone(),
            ..inner
        };
        for i in 0..63 {
            write(env.scratch.path(), &format!("f{i:02}.txt"), b"data");
        }
        write(env.scratch.path(), "report.md", b"# R\n");
        let outcome = run(&env, Arc::new(MemoryBlobStore::new()), request(&env, 1)).await;
        assert_eq!(outcome.stored.len(), 64);
        assert_eq!(faults.calls(), vec![StoreOp::CreateArtifacts]);
    }

    #[tokio::test]
    async fn failed_upload_gets_no_row_and_the_rest_land() {
        let env = env().await;
        write(env.scratch.path(), "good.txt", b"good");
        write(env.scratch.path(), "bad.txt", b"bad");
        write(env.scratch.path(), "report.md", b"# R\n");
        let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
        blobs.fault_put("bad.txt", BlobFault::Fail);
        blobs.fault_put("/reports/", BlobFault::Fail);
        let outcome = run(&env, blobs.clone(), request(&env, 1)).await;
        assert_eq!(paths(&outcome), ["good.txt"]);
        let failed: Vec<&str> = outcome.failed.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(failed, ["bad.txt", "report.md"]);
        assert!(matches!(outcome.report, ReportFile::Failed { .. }));
        assert!(outcome.error_text().unwrap().contains("injected failure"));
        let rows = env
            .store
            .list_session_artifacts(env.session.id)
            .await
            .unwrap();
        let row_paths: Vec<&str> = rows.iter().map(|a| a.path.as_str()).collect();
        assert!(row_paths.contains(&"good.txt"));
        assert!(!row_paths.contains(&"bad.txt") && !row_paths.contains(&"report.md"));
    }

    #[tokio::test]
    async fn failed_row_batch_is_reported_and_bytes_remain() {
        let inner = env().await;
        let faults = Arc::new(FaultStore::new(Arc::clone(&inner.store)));
        faults.fault(StoreOp::CreateArtifacts, StoreFault::Fail);
        let env = Env {
            store: faults.clone(),
            ..inner
        };
        write(env.scratch.path(), "a.txt", b"a");
        write(env.scratch.path(), "report.md", b"# R\n");
        let blobs = Arc::new(MemoryBlobStore::new());
        let outcome = run(&env, blobs.clone(), request(&env, 1)).await;
        assert!(!outcome.rows_written);
        assert!(outcome.stored.is_empty());
        assert_eq!(outcome.failed.len(), 2);
        assert!(outcome
            .error_text()
            .unwrap()
            .contains("artifact rows not written"));
        // The report document is stored even though its artifact row is not:
        // the report row may still point at it.
        assert!(matches!(outcome.report, ReportFile::Stored { .. }));
        assert_eq!(
            blobs.list(None).await.unwrap().len(),
            3,
            "bytes remain, harmless"
        );
    }

    #[tokio::test]
    async fn hanging_blob_store_is_bounded_by_the_timeout() {
        let env = env().await;
        write(env.scratch.path(), "report.md", b"# R\n");
        write(env.scratch.path(), "x.txt", b"x");
        let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
        blobs.fault_put("", BlobFault::Hang);
        let config = PersistConfig {
            timeout: Duration::from_millis(300),
            ..PersistConfig::default()
        };
        let outcome = tokio::time::timeout(
            Duration::from_secs(30),
            persist(
                Arc::clone(&env.store),
                Some(blobs),
                &config,
                request(&env, 1),
            ),
        )
        .await
        .expect("the phase returns by itself");
        assert!(outcome.reason.as_deref().unwrap().contains("timed out"));
        assert!(matches!(outcome.report, ReportFile::Failed { .. }));
        assert!(env
            .store
            .list_session_artifacts(env.session.id)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn files_are_stored_even_when_the_caller_is_cancelled() {
        let env = env().await;
        write(env.scratch.path(), "report.md", b"# R\n");
        let blobs = Arc::new(MemoryBlobStore::new());
        let config = PersistConfig::default();
        let fut = persist(
            Arc::clone(&env.store),
            Some(blobs.clone() as Arc<dyn BlobStore>),
            &config,
            request(&env, 1),
        );
        // Poll once, then drop: the caller (a cancelled run) goes away.
        let _ = tokio::time::timeout(Duration::from_micros(1), fut).await;
        for _ in 0..200 {
            if !env
                .store
                .list_session_artifacts(env.session.id)
                .await
                .unwrap()
                .is_empty()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let rows = env
            .store
            .list_session_artifacts(env.session.id)
            .await
            .unwrap();
        assert!(rows.iter().any(|a| a.path == "report.md"), "{rows:?}");
    }

    #[tokio::test]
    async fn unchanged_restored_file_is_not_uploaded_again() {
        let env = env().await;
        write(env.scratch.path(), "report.md", b"# R1\n");
        write(env.scratch.path(), "same.txt", b"same");
        write(env.scratch.path(), "changed.txt", b"v1");
        let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
        let first = run(&env, blobs.clone(), request(&env, 1)).await;
        assert_eq!(first.stored.len(), 3);
        let rows = env
            .store
            .list_session_artifacts(env.session.id)
            .await
            .unwrap();
        let restored: BTreeMap<WorkspacePath, RestoredFile> = rows
            .iter()
            .filter(|a| a.path != MANIFEST_PATH)
            .map(|a| {
                (
                    WorkspacePath::new(a.path.clone()).unwrap(),
                    RestoredFile {
                        artifact: a.clone(),
                        sha256: a.sha256.parse().unwrap(),
                    },
                )
            })
            .collect();
        write(env.scratch.path(), "changed.txt", b"v2");
        let mut req = request(&env, 2);
        req.restored = restored;
        let puts_before = blobs.total_puts();
        let second = run(&env, blobs.clone(), req).await;
        assert_eq!(paths(&second), ["changed.txt"]);
        let unchanged: Vec<&str> = second.unchanged.iter().map(|u| u.path.as_str()).collect();
        assert_eq!(unchanged, ["report.md", "same.txt"]);
        // changed.txt + the manifest; nothing for the unchanged files.
        assert_eq!(blobs.total_puts() - puts_before, 2);
        let same_key = rows
            .iter()
            .find(|a| a.path == "same.txt")
            .unwrap()
            .blob_key
            .clone();
        assert_eq!(blobs.puts_of(&BlobKey::new(same_key).unwrap()), 1);
        // The report keeps pointing at revision 1's key.
        let r1_key = rows
            .iter()
            .find(|a| a.path == "report.md")
            .unwrap()
            .blob_key
            .clone();
        assert_eq!(
            second.report,
            ReportFile::Unchanged {
                key: r1_key,
                bytes: 5
            }
        );
        let changed = env
            .store
            .list_session_artifacts(env.session.id)
            .await
            .unwrap()
            .into_iter()
            .filter(|a| a.path == "changed.txt")
            .map(|a| a.revision)
            .collect::<Vec<_>>();
        assert_eq!(
            changed,
            [1, 2],
            "the changed file lands as a new artifact of revision 2"
        );
    }

    #[tokio::test]
    async fn persists_to_the_filesystem_backend() {
        let env = env().await;
        write(env.scratch.path(), "report.md", b"# R\n");
        write(
            env.scratch.path(),
            "img/chart.png",
            &[0x89, b'P', b'N', b'G'],
        );
        let root = tempfile::tempdir().unwrap();
        let blobs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(root.path()).unwrap());
        let outcome = run(&env, Arc::clone(&blobs), request(&env, 1)).await;
        assert_eq!(outcome.stored.len(), 2);
        let png = outcome
            .stored
            .iter()
            .find(|s| s.path == "img/chart.png")
            .unwrap();
        let blob = blobs
            .get(&BlobKey::new(png.blob_key.clone()).unwrap())
            .await
            .unwrap();
        assert_eq!(blob.meta.content_type.as_deref(), Some("image/png"));
        let got = env.store.get_artifact(png.artifact_id).await.unwrap();
        assert_eq!(got.sha256, png.sha256);
    }
}

mod postgres_s3 {
    use super::*;
    use korvus_blob_s3::testing as s3;
    use korvus_store_sql::testing::PgDb;
    use korvus_store_sql::PgStore;

    #[tokio::test]
    async fn persists_to_s3_with_rows_on_postgres() {
        let db = PgDb::create().await;
        let bucket = s3::fixture().await;
        let (Some(db), Some(bucket)) = (db, bucket) else {
            return;
        };
        let env = env_with(Arc::new(PgStore::new(db.pool().clone()))).await;
        for i in 0..20 {
            write(
                env.scratch.path(),
                &format!("out/f{i:02}.json"),
                b"{\"ok\":true}",
            );
        }
        write(env.scratch.path(), "report.md", b"# R\n");
        let blobs: Arc<dyn BlobStore> = Arc::new(bucket.store.clone());
        let outcome = persist(
            Arc::clone(&env.store),
            Some(Arc::clone(&blobs)),
            &PersistConfig::default(),
            request(&env, 1),
        )
        .await;
        assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
        assert_eq!(outcome.stored.len(), 21);
        assert!(outcome.rows_written);
        let rows = env
            .store
            .list_session_artifacts(env.session.id)
            .await
            .unwrap();
        assert_eq!(rows.len(), 22, "21 files and the manifest");
        for row in &rows {
            let blob = blobs
                .get(&BlobKey::new(row.blob_key.clone()).unwrap())
                .await
                .unwrap();
            assert_eq!(Sha256Digest::of(&blob.bytes).to_hex(), row.sha256);
            assert_eq!(
                blob.meta.content_type.as_deref(),
                Some(row.content_type.as_str())
            );
        }
        drop(env);
        s3::teardown(bucket).await;
        db.drop_db().await;
    }
}
