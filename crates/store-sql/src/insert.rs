//! The batch artifact insert of each engine on a connection it is given
//! (`insert_artifacts_on`): the one `create_artifacts` runs, the one
//! [`sql_replace!`](crate::replace::sql_replace) runs inside its
//! transaction, and (`insert_settled_artifacts_on`) the one a salvage
//! runs for a settled session — its binds written once per engine beside
//! nothing else, so the engine modules, `replace.rs` and `salvage.rs` do
//! not depend on each other.

#[cfg(feature = "postgres")]
impl crate::PgStore {
    /// Inserts `new` (at least one) on `conn`: the batch insert of
    /// `create_artifacts`, one statement that inserts nothing unless every
    /// row's session is active at the row's fence. Returns the rows
    /// inserted.
    pub(crate) async fn insert_artifacts_on(
        conn: &mut sqlx::PgConnection,
        new: &[korvus_store::NewArtifact],
        created_at: chrono::DateTime<chrono::Utc>,
    ) -> korvus_store::Result<u64> {
        Self::insert_unnest(conn, crate::postgres::INSERT_ARTIFACTS, new, created_at).await
    }

    /// Inserts `new` on `conn` unconditionally, one statement: the rows of
    /// a salvage (`attach_kept_output`), whose settled session the same
    /// transaction checked and moved to their fence. Returns the rows
    /// inserted.
    pub(crate) async fn insert_settled_artifacts_on(
        conn: &mut sqlx::PgConnection,
        new: &[korvus_store::NewArtifact],
        created_at: chrono::DateTime<chrono::Utc>,
    ) -> korvus_store::Result<u64> {
        Self::insert_unnest(
            conn,
            crate::postgres::INSERT_SETTLED_ARTIFACTS,
            new,
            created_at,
        )
        .await
    }

    /// Runs `sql`, an artifact insert from arrays (`$1…$12` in
    /// `artifact_columns` order, `$11` the one creation time), with `new`.
    async fn insert_unnest(
        conn: &mut sqlx::PgConnection,
        sql: &'static str,
        new: &[korvus_store::NewArtifact],
        created_at: chrono::DateTime<chrono::Utc>,
    ) -> korvus_store::Result<u64> {
        use crate::dialect::StoreDialect as _;
        use crate::rows::{to_i32, to_i64};
        let ids: Vec<uuid::Uuid> = new.iter().map(|n| n.id.as_uuid()).collect();
        let incidents: Vec<uuid::Uuid> = new.iter().map(|n| n.incident_id.as_uuid()).collect();
        let sessions: Vec<uuid::Uuid> = new.iter().map(|n| n.session_id.as_uuid()).collect();
        let kinds: Vec<&str> = new.iter().map(|n| n.kind.as_str()).collect();
        let paths: Vec<&str> = new.iter().map(|n| n.path.as_str()).collect();
        let keys: Vec<&str> = new.iter().map(|n| n.blob_key.as_str()).collect();
        let types: Vec<&str> = new.iter().map(|n| n.content_type.as_str()).collect();
        let sizes: Vec<i64> = new.iter().map(|n| to_i64(n.size_bytes)).collect();
        let digests: Vec<&str> = new.iter().map(|n| n.sha256.as_str()).collect();
        let revisions: Vec<i32> = new.iter().map(|n| to_i32(n.revision)).collect();
        let fences: Vec<i64> = new.iter().map(|n| to_i64(n.fence)).collect();
        let done = sqlx::query(sql)
            .bind(&ids)
            .bind(&incidents)
            .bind(&sessions)
            .bind(&kinds)
            .bind(&paths)
            .bind(&keys)
            .bind(&types)
            .bind(&sizes)
            .bind(&digests)
            .bind(&revisions)
            .bind(created_at)
            .bind(&fences)
            .execute(conn)
            .await
            .map_err(|e| {
                Self::op(
                    korvus_store::Entity::Artifact,
                    Some(korvus_store::constraint::ARTIFACTS_SESSION_FK),
                )
                .err(e)
            })?;
        Ok(done.rows_affected())
    }
}

#[cfg(feature = "sqlite")]
impl crate::SqliteStore {
    /// Inserts `new` on `conn`: the rows of a salvage. SQLite's batch
    /// insert checks no session (`create_artifacts` checks the fences in
    /// its transaction first), so it is the same insert.
    pub(crate) async fn insert_settled_artifacts_on(
        conn: &mut sqlx::SqliteConnection,
        new: &[korvus_store::NewArtifact],
        created_at: chrono::DateTime<chrono::Utc>,
    ) -> korvus_store::Result<u64> {
        Self::insert_artifacts_on(conn, new, created_at).await
    }

    /// Inserts `new` (at least one) on `conn`: the multi-row inserts of
    /// `create_artifacts`, [`MAX_ROWS`](crate::sqlite::MAX_ROWS) rows a
    /// statement. Returns the rows inserted.
    pub(crate) async fn insert_artifacts_on(
        conn: &mut sqlx::SqliteConnection,
        new: &[korvus_store::NewArtifact],
        created_at: chrono::DateTime<chrono::Utc>,
    ) -> korvus_store::Result<u64> {
        use crate::dialect::StoreDialect as _;
        use crate::rows::{to_i32, to_i64};
        let mut inserted = 0;
        for chunk in new.chunks(crate::sqlite::MAX_ROWS) {
            let sql = crate::sqlite::insert_artifacts_sql(chunk.len());
            let mut q = sqlx::query(&sql);
            for n in chunk {
                q = q
                    .bind(n.id.as_uuid())
                    .bind(n.incident_id.as_uuid())
                    .bind(n.session_id.as_uuid())
                    .bind(n.kind.as_str())
                    .bind(n.path.as_str())
                    .bind(n.blob_key.as_str())
                    .bind(n.content_type.as_str())
                    .bind(to_i64(n.size_bytes))
                    .bind(n.sha256.as_str())
                    .bind(to_i32(n.revision))
                    .bind(created_at)
                    .bind(to_i64(n.fence));
            }
            let done = q.execute(&mut *conn).await.map_err(|e| {
                Self::op(
                    korvus_store::Entity::Artifact,
                    Some(korvus_store::constraint::ARTIFACTS_SESSION_FK),
                )
                .err(e)
            })?;
            inserted += done.rows_affected();
        }
        Ok(inserted)
    }
}
