//! Migrations from several processes at once: every one succeeds and the
//! schema is applied once.

use std::process::Command;

/// Set in a child process: the database it migrates.
const CHILD_DB: &str = "KORVUS_TEST_MIGRATE_CHILD_DB";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_migrating_a_fresh_sqlite_database_both_succeed() {
    if let Some(path) = std::env::var_os(CHILD_DB) {
        // The child: migrate and report through the exit status.
        let pool = korvus_store_sql::open_sqlite(std::path::Path::new(&path))
            .await
            .expect("open");
        korvus_store_sql::migrate(&pool).await.expect("migrate");
        pool.close().await;
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    for round in 0..20 {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("korvus.db");
        let children: Vec<_> = (0..2)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "--exact",
                        "migrations::two_processes_migrating_a_fresh_sqlite_database_both_succeed",
                        "--test-threads=1",
                    ])
                    .env(CHILD_DB, &db)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("child starts")
            })
            .collect::<Vec<_>>();
        for child in children {
            let child = child.wait_with_output().expect("child ends");
            assert!(
                child.status.success(),
                "round {round}: a concurrent migration failed:\n{}",
                String::from_utf8_lossy(&child.stdout)
            );
        }
    }
}

/// The `agent_state` migration rebuilds SQLite's artifacts table (its
/// CHECK of the kind lives in the table): artifacts and the context refs
/// that point at them survive it, and the new kind is accepted after it.
#[tokio::test]
async fn the_agent_state_migration_keeps_artifacts_and_their_context_refs_on_sqlite() {
    use korvus_store::{ArtifactKind, ContextRef, Store, StoreExt};
    use korvus_testkit::store::{incident, new_artifact, session};

    const AGENT_STATE: &str = "20270101000001";
    let dir = tempfile::tempdir().expect("temp dir");
    let older = dir.path().join("older");
    std::fs::create_dir(&older).expect("dir");
    let all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
    for entry in std::fs::read_dir(&all).expect("migrations") {
        let entry = entry.expect("entry");
        if entry.file_name().to_string_lossy().as_ref() < AGENT_STATE {
            std::fs::copy(entry.path(), older.join(entry.file_name())).expect("copy");
        }
    }
    let pool = korvus_store_sql::open_sqlite(&dir.path().join("korvus.db"))
        .await
        .expect("open");
    sqlx::migrate::Migrator::new(older.as_path())
        .await
        .expect("older migrations")
        .run(&pool)
        .await
        .expect("migrate to the version before");
    // Today's session insert numbers from `incidents.last_seq`, reads
    // the owner-level lease and writes `runner` (later migrations): the column and its
    // trigger, the `owners` table and `detached` stand in while the rows
    // of the old version are written, and go again before the migrations
    // run, which then fill the column from the sessions.
    for stand_in in [
        "CREATE TABLE owners (id BLOB PRIMARY KEY NOT NULL, expires_ms INTEGER NOT NULL) STRICT",
        "ALTER TABLE sessions ADD COLUMN detached INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN runner TEXT",
        "ALTER TABLE incidents ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0",
        "CREATE TRIGGER stand_in_last_seq AFTER INSERT ON sessions FOR EACH ROW BEGIN \
         UPDATE incidents SET last_seq = NEW.seq WHERE id = NEW.incident_id; END",
    ] {
        sqlx::query(stand_in)
            .execute(&pool)
            .await
            .expect("stand-in");
    }
    let store = korvus_store_sql::SqliteStore::new(pool.clone());
    let inc = incident(&store).await;
    let producer = session(&store, &inc).await;
    let arts = store
        .create_artifacts(vec![
            new_artifact(&producer, "a.md", 1),
            new_artifact(&producer, "b.md", 1),
        ])
        .await
        .expect("artifacts");
    let consumer = session(&store, &inc).await;
    let refs: Vec<ContextRef> = arts
        .iter()
        .map(|a| ContextRef {
            artifact_id: a.id,
            role: "input".into(),
        })
        .collect();
    store
        .insert_context_refs(consumer.id, &refs)
        .await
        .expect("refs");

    for stand_in in [
        "DROP TRIGGER stand_in_last_seq",
        "ALTER TABLE incidents DROP COLUMN last_seq",
        "DROP TABLE owners",
        "ALTER TABLE sessions DROP COLUMN detached",
        "ALTER TABLE sessions DROP COLUMN runner",
    ] {
        sqlx::query(stand_in)
            .execute(&pool)
            .await
            .expect("stand-in gone");
    }
    korvus_store_sql::migrate(&pool)
        .await
        .expect("the agent_state migration");
    let third = session(&store, &inc).await;
    assert_eq!(third.seq, 3, "last_seq is filled from the sessions");
    let listed = store
        .list_context_refs(consumer.id)
        .await
        .expect("refs after");
    assert_eq!(
        listed.iter().map(|r| r.artifact_id).collect::<Vec<_>>(),
        arts.iter().map(|a| a.id).collect::<Vec<_>>()
    );
    for a in &arts {
        assert_eq!(store.get_artifact(a.id).await.expect("artifact after"), *a);
    }
    let mut state = new_artifact(&producer, ".korvus/agent/state.json", 1);
    state.kind = ArtifactKind::AgentState;
    store
        .create_artifacts(vec![state])
        .await
        .expect("the new kind");
    pool.close().await;
}
