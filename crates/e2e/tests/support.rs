//! Shared scaffolding: PostgreSQL + S3 for one test, a scriptable runner,
//! and small file helpers.

use std::path::Path;
use std::sync::Arc;

use korvus_blob::BlobStore;
use korvus_blob_s3::testing as s3;
use korvus_store::CoordinatedStore;
use korvus_store_sql::testing::PgDb;
use korvus_store_sql::{PgLog, PgStore};

/// PostgreSQL + S3 for one test: a fresh database and a fresh bucket.
pub(crate) struct Backends {
    db: PgDb,
    bucket: s3::Fixture,
    pub(crate) store: Arc<dyn CoordinatedStore>,
    pub(crate) blobs: Arc<dyn BlobStore>,
    pub(crate) logs: Arc<PgLog>,
}

impl Backends {
    /// Both services, or `None` when they are not configured and the test
    /// may be skipped (each fixture prints why, or panics when
    /// `KORVUS_REQUIRE_SERVICES=1`).
    pub(crate) async fn new() -> Option<Self> {
        // Ask both, so a missing service fails under `cargo xtask test`
        // whichever it is.
        let db = PgDb::create().await;
        let bucket = s3::fixture().await;
        let (db, bucket) = (db?, bucket?);
        let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(db.pool().clone()));
        let blobs: Arc<dyn BlobStore> = Arc::new(bucket.store.clone());
        let logs = Arc::new(PgLog::new(db.pool().clone()));
        Some(Self {
            db,
            bucket,
            store,
            blobs,
            logs,
        })
    }

    /// Empties and removes the bucket and drops the database.
    pub(crate) async fn teardown(self) {
        drop((self.store, self.blobs, self.logs));
        s3::teardown(self.bucket).await;
        self.db.drop_db().await;
    }
}

pub(crate) use korvus_runner::testing::{log_turn, ScriptRunner};
pub(crate) use korvus_session::testing::settled;

/// Writes `body` to `dir/path`, creating the parent directories.
pub(crate) fn write(dir: &Path, path: &str, body: impl AsRef<[u8]>) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}
