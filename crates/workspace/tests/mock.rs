//! The `mock` features (`MockSeeder` here, `MockStore` and `MockBlobStore`
//! of the seams) under this crate's functions: what they do with answers a
//! real backend gives rarely or never on demand.

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use korvus_blob::{BlobError, MockBlobStore};
use korvus_store::{
    ArtifactKind, Entity, IncidentId, MockStore, SessionId, StoreError, WorkspaceRef,
};
use korvus_workspace::{
    archive, store_archive, tree_prefix, LoadSkills, MockSeeder, SeedOutcome, SeedReport, Seeder,
    SkillCatalog, WorkspaceError, ARCHIVE_CONTENT_TYPE, ARCHIVE_PATH,
};

use crate::support::{scratch, SKILL_V1};

/// A seeder of the embedder's own (not git) that writes `skills/disk` and
/// reports the given trees as seeded.
fn seeder_writing_skills(reported: &'static [&'static str]) -> MockSeeder {
    let mut seeder = MockSeeder::new();
    seeder
        .expect_seed()
        .withf(|_, pin| pin.is_some_and(|p| p.commit == "c0ffee"))
        .times(1)
        .returning(move |dir, _| {
            let skill = dir.path().join("skills/disk");
            fs::create_dir_all(&skill).unwrap();
            fs::write(skill.join("SKILL.md"), SKILL_V1).unwrap();
            Ok(SeedOutcome::Seeded(SeedReport {
                commit: "c0ffee".into(),
                trees: reported.iter().map(|t| tree_prefix(t).unwrap()).collect(),
                absent_trees: Vec::new(),
                files: Vec::new(),
                bytes: 0,
                left_out: Vec::new(),
            }))
        });
    seeder
}

#[tokio::test]
async fn the_skill_catalog_follows_what_any_seeder_reports_not_what_is_on_disk() {
    let pin = WorkspaceRef {
        repo: "/srv/elsewhere".into(),
        commit: "c0ffee".into(),
    };
    for (reported, expected) in [(&["skills", "docs"][..], 1), (&["docs"][..], 0)] {
        let s = scratch().await;
        let seeder: Arc<dyn Seeder> = Arc::new(seeder_writing_skills(reported));
        let outcome = seeder.seed(&s.dir, Some(&pin)).await;
        let catalog = SkillCatalog::after_seeding(s.dir.path(), outcome.as_ref())
            .await
            .unwrap();
        // The skill is on disk either way; only a reported skills tree
        // makes it part of the session.
        assert!(s.dir.path().join("skills/disk/SKILL.md").is_file());
        assert_eq!(catalog.skills().len(), expected, "trees {reported:?}");
        if expected == 1 {
            assert_eq!(catalog.skills()[0].name, "disk-full");
        }
    }
}

#[tokio::test]
async fn store_archive_puts_the_bytes_before_the_row_and_refuses_a_missing_row() {
    let s = scratch().await;
    fs::write(s.dir.path().join("report.md"), "# Findings\n").unwrap();
    let packed = archive(s.dir.path()).await.unwrap();
    let (incident, session) = (IncidentId::new(), SessionId::new());
    let uploaded = Arc::new(AtomicBool::new(false));

    let mut blobs = MockBlobStore::new();
    let digest = packed.sha256;
    let flag = Arc::clone(&uploaded);
    blobs
        .expect_put()
        .withf(move |key, _, options| {
            key.as_str().ends_with(&format!("/{ARCHIVE_PATH}"))
                && options.content_type == ARCHIVE_CONTENT_TYPE
                && options.sha256 == digest
        })
        .times(1)
        .returning(move |_, _, _| {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
    let mut store = MockStore::new();
    let flag = Arc::clone(&uploaded);
    store
        .expect_create_artifacts()
        .withf(|rows| {
            rows.len() == 1
                && rows[0].kind == ArtifactKind::WorkspaceArchive
                && rows[0].path == ARCHIVE_PATH
        })
        .times(1)
        .returning(move |_| {
            assert!(flag.load(Ordering::SeqCst), "the row before the bytes");
            // A backend that answers with no row at all.
            Ok(Vec::new())
        });

    let err = store_archive(&store, &blobs, incident, session, 2, 1, &packed)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            WorkspaceError::Store {
                op: "create_artifacts",
                source: StoreError::NotFound {
                    entity: Entity::Artifact,
                    ..
                },
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn store_archive_writes_no_row_when_the_backend_refuses_the_bytes() {
    let s = scratch().await;
    let packed = archive(s.dir.path()).await.unwrap();
    let mut blobs = MockBlobStore::new();
    blobs.expect_put().times(1).returning(|key, _, _| {
        Err(BlobError::ChecksumMismatch {
            key: key.to_string(),
        })
    });
    // No expectation: any row write would panic the test.
    let store = MockStore::new();
    let err = store_archive(
        &store,
        &blobs,
        IncidentId::new(),
        SessionId::new(),
        1,
        1,
        &packed,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            WorkspaceError::Blob {
                op: "stored",
                source: BlobError::ChecksumMismatch { .. },
                ..
            }
        ),
        "{err:?}"
    );
}
