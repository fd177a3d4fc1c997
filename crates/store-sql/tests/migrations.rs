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
