//! [`SqliteStore`] and [`SqliteLog`]: the seams on SQLite, for one machine.
//!
//! Only what SQLite does its own way is here; the statements both engines
//! share are in [`store`](crate::store) and [`log`](crate::log).
//!
//! SQLite has one writer at a time, and a write statement takes the write
//! lock before it reads anything. So a single `INSERT … SELECT` that computes
//! `MAX(seq) + 1` (or the next context-ref position) from the table it inserts
//! into is race-free without a counter row. Operations that need more than one
//! statement open their transaction with `BEGIN IMMEDIATE`, taking the write
//! lock up front: a deferred transaction that reads and then writes could fail
//! with `SQLITE_BUSY` under concurrency instead of waiting. Connections wait
//! for the lock up to the busy timeout set by [`open_sqlite`]. SQLite has no
//! array binds, so batches are multi-row statements of at most [`MAX_ROWS`]
//! rows each.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use korvus_store::{constraint, ArtifactId, ContextRef, Entity, NewArtifact, Result, SessionId};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

use crate::completed::Completed as _;
use crate::dialect::{LogDialect, StoreDialect};
use crate::error::{backend, log_backend};
use crate::log::sql_log;
use crate::rows::{
    artifact_columns, artifact_sessions, check_artifact_fences, context_ref_columns, placeholders,
    session_fences, ArtifactRow, ContextRefRow, SessionFence,
};
use crate::store::sql_store;

/// The `backend` name in this module's `Backend` errors.
pub(crate) const BACKEND: &str = "sqlite";

crate::sql::statements! {
    SQLITE;

    /// A write transaction that takes the write lock at once, so a check
    /// and the write after it cannot be interleaved.
    BEGIN_IMMEDIATE = "BEGIN IMMEDIATE";

    /// Whether the connection enforces foreign keys (`migrate` refuses a
    /// pool that does not).
    FOREIGN_KEYS = "PRAGMA foreign_keys";

    /// One session's fence as a batch of artifact rows checks it. Binds
    /// `$1` the session.
    SESSION_FENCE = concat!("SELECT ", session_fences!(), " FROM sessions WHERE id = $1");

    /// `LogIo::append`'s bump of the log row, after its checks in the
    /// same transaction. Binds `$1` log, `$2` events, `$3` bytes, `$4`
    /// the writer's epoch.
    BUMP_LOG = "UPDATE turn_logs SET event_count = event_count + $2, size_bytes = size_bytes + $3, \
        epoch = $4 WHERE id = $1";
}

/// How long a connection waits for another writer before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Rows per multi-row statement: SQLite allows at most 32766 bound values in
/// one statement, and an artifact row binds 11.
pub(crate) const MAX_ROWS: usize = 2000;

/// A failed open of the database file at `path`: its message names the
/// file, the driver's error is its source.
#[derive(Debug)]
struct OpenFailed {
    path: std::path::PathBuf,
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl std::fmt::Display for OpenFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot open the SQLite database {}", self.path.display())
    }
}

impl std::error::Error for OpenFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// `e` with the database's path in its message (a fresh data dir whose
/// directory does not exist yet says where it looked).
fn naming(path: &Path, e: korvus_store::StoreError) -> korvus_store::StoreError {
    match e {
        korvus_store::StoreError::Backend {
            backend,
            transient,
            source,
        } => korvus_store::StoreError::Backend {
            backend,
            transient,
            source: Box::new(OpenFailed {
                path: path.to_path_buf(),
                source,
            }),
        },
        other => other,
    }
}

/// Creates the database file `path`, when it is missing, readable and
/// writable by its owner alone (0600, whatever the umask): SQLite gives
/// its `-wal` and `-shm` files the same mode, so no other local user reads
/// a row. An existing file keeps its mode.
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens (creating it if missing, 0600) the SQLite database at `path` with
/// the settings the store and log rely on: foreign keys enforced, write-ahead
/// logging, `synchronous = FULL` (a returned write is durable), and a 30 s
/// busy timeout; a connection whose commit failed (a full disk) is closed
/// rather than reused, since sqlx would go on counting the transaction
/// SQLite rolled back. Run [`migrate`](fn@crate::migrate) on the pool before use.
/// An open that finds the file locked by another process setting it up is
/// retried a few times.
///
/// # Errors
/// `Backend` when the file cannot be opened or created; its source says
/// `cannot open the SQLite database <path>` (e.g. when the directory does
/// not exist: create it first).
///
/// # Cancel safety
/// Cancel-safe: a dropped call leaves no pool open; the database file may have
/// been created (empty, 0600).
pub async fn open_sqlite(path: &Path) -> Result<SqlitePool> {
    // A file that cannot be made here is reported by the open below.
    let _ = create_private(path);
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .foreign_keys(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT);
    // Another process opening or migrating the same fresh file can hold the
    // lock the switch to write-ahead logging needs, which SQLite reports at
    // once (the busy timeout does not cover it): such an open is retried.
    let mut delay = Duration::from_millis(20);
    let mut attempt = 1;
    loop {
        let opened = SqlitePoolOptions::new()
            .max_connections(4)
            .after_release(|conn, _| Box::pin(crate::completed::still_usable(conn)))
            .connect_with(options.clone())
            .await
            .map_err(backend(BACKEND));
        match opened {
            Err(e) if e.is_transient() && attempt < OPEN_ATTEMPTS => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
                attempt += 1;
            }
            other => return other.map_err(|e| naming(path, e)),
        }
    }
}

/// How often an open that finds the database locked is tried.
const OPEN_ATTEMPTS: u32 = 8;

sql_store! {
    /// A [`Store`](korvus_store::Store) on SQLite.
    ///
    /// Cloning is cheap and shares the pool. Open the pool with
    /// [`open_sqlite`] (or equivalent settings, foreign keys above all) and
    /// [`migrate`](fn@crate::migrate) it.
    pub struct SqliteStore(SqlitePool) beside SqliteLog;
}

crate::lease::sql_lease!(SqliteStore, sqlx::SqliteConnection);
crate::replace::sql_replace!(SqliteStore, sqlx::SqliteConnection);
crate::outbox::sql_outbox!(SqliteStore);
crate::budget::sql_budgets!(SqliteStore);

impl StoreDialect for SqliteStore {
    // One statement: writes run one at a time, so the busy count the pick
    // reads cannot change before the claim is written.
    async fn claim_capped(
        &self,
        pool: &str,
        cap: u32,
        lease: korvus_store::Lease,
    ) -> Result<Option<crate::rows::SessionRow>> {
        sqlx::query_as(&Self::statements().claim_capped)
            .bind(pool)
            .bind(lease.owner.as_uuid())
            .bind(lease.ttl_millis())
            .bind(i64::from(cap))
            .fetch_optional_completed(&self.pool)
            .await
            .map_err(backend(BACKEND))
    }

    fn cancel_listener(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        // SQLite cannot notify other connections: managers poll.
        None
    }

    fn queue_listener(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }

    const BACKEND: &'static str = BACKEND;

    // One statement, holding the write lock from its first read: the next
    // seq is computed and used atomically. No incident, no row.
    const RUN_KEY: &'static str = "lower(hex(id)) || ':' || fence";

    const JSON_TEXTS_4: &'static str = "SELECT value FROM json_each($4)";

    const SHARE_LOCK: &'static str = "";

    const NOW_MS: &'static str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

    const INCIDENT_TEXT: &'static str = "hex({t}.incident_id)";

    fn incident_key(id: korvus_store::IncidentId) -> String {
        id.as_uuid().simple().to_string().to_ascii_uppercase()
    }

    // One writer at a time: the claim's read and write cannot interleave.
    const WRITES_IN_WITH: bool = false;

    const SKIP_LOCKED: &'static str = "";

    const INSERT_SESSION: &'static str = concat!(
        "\
        INSERT INTO sessions \
            (id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, \
             revision, created_at, owner, lease_expires_ms, pool, priority, queue_key, \
             idempotency_key, runner, queued_ms) \
        SELECT $1, i.id, \
               i.last_seq + 1, \
               CASE WHEN i.last_seq = 0 THEN 'initial' ELSE 'follow_up' END, \
               $3, $4, $5, $6, 1, $7, $8, CAST(unixepoch('subsec') * 1000 AS INTEGER) + $9, \
               $10, $11, $12, $13, $14, \
               CASE WHEN $8 IS NULL THEN CAST(unixepoch('subsec') * 1000 AS INTEGER) END \
        FROM incidents AS i WHERE i.id = $2 \
        RETURNING seq, ",
        crate::rows::lease_column!()
    );

    async fn insert_context_ref_rows(
        &self,
        session: SessionId,
        refs: &[ContextRef],
    ) -> Result<Vec<ContextRefRow>> {
        // Per chunk, one statement numbering the refs after the stored ones.
        // There is deliberately no pre-check of the artifacts: the composite
        // foreign key session_context_refs_artifact_fk refuses another
        // incident's (or an unknown) artifact. The session key cannot fail:
        // session and incident come from the sessions row the statement reads.
        let chunks: Vec<&[ContextRef]> = refs.chunks(MAX_ROWS).collect();
        let sqls: Vec<String> = chunks
            .iter()
            .map(|c| insert_context_refs_sql(c.len()))
            .collect();
        let query = |i: usize| {
            let mut q = sqlx::query_as::<_, ContextRefRow>(&sqls[i]).bind(session.as_uuid());
            for r in chunks[i] {
                q = q.bind(r.artifact_id.as_uuid()).bind(r.role.as_str());
            }
            q
        };
        let map = |e| {
            Self::op(
                Entity::ContextRef,
                Some(constraint::CONTEXT_REFS_ARTIFACT_FK),
            )
            .err(e)
        };
        if chunks.len() == 1 {
            return query(0).fetch_all(&self.pool).await.map_err(map);
        }
        let mut tx = self
            .pool
            .begin_with(BEGIN_IMMEDIATE)
            .await
            .map_err(backend(BACKEND))?;
        let mut all = Vec::with_capacity(refs.len());
        for i in 0..chunks.len() {
            all.extend(query(i).fetch_all(&mut *tx).await.map_err(map)?);
        }
        tx.commit().await.map_err(backend(BACKEND))?;
        Ok(all)
    }

    async fn insert_artifact_rows(
        &self,
        new: &[NewArtifact],
        created_at: DateTime<Utc>,
    ) -> Result<()> {
        // IMMEDIATE: the write lock is held from the fence check to the
        // commit, so no reopen moves a fence in between.
        let mut tx = self
            .pool
            .begin_with(BEGIN_IMMEDIATE)
            .await
            .map_err(backend(BACKEND))?;
        let mut found: Vec<SessionFence> = Vec::new();
        for id in artifact_sessions(new) {
            let row: Option<SessionFence> = sqlx::query_as(SESSION_FENCE)
                .bind(id)
                .fetch_optional_completed(&mut *tx)
                .await
                .map_err(backend(BACKEND))?;
            found.extend(row);
        }
        check_artifact_fences(new, &found)?;
        Self::insert_artifacts_on(&mut tx, new, created_at).await?;
        tx.commit().await.map_err(backend(BACKEND))
    }

    async fn artifact_rows(&self, ids: &[ArtifactId]) -> Result<Vec<ArtifactRow>> {
        let mut found = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_ROWS) {
            let sql = artifacts_by_id_sql(chunk.len());
            let mut q = sqlx::query_as::<_, ArtifactRow>(&sql);
            for id in chunk {
                q = q.bind(id.as_uuid());
            }
            found.extend(q.fetch_all(&self.pool).await.map_err(backend(BACKEND))?);
        }
        Ok(found)
    }
}

/// The insert of `n` context refs: `$1` is the session, then artifact id and
/// role per ref; positions follow the session's stored refs in bind order.
pub(crate) fn insert_context_refs_sql(n: usize) -> String {
    let values: Vec<String> = (0..n)
        .map(|i| format!("(${}, ${}, {i})", 2 + 2 * i, 3 + 2 * i))
        .collect();
    format!(
        concat!(
            "WITH r(artifact_id, role, ord) AS (VALUES {}) \
             INSERT INTO session_context_refs \
                 (session_id, incident_id, artifact_id, role, position) \
             SELECT s.id, s.incident_id, r.artifact_id, r.role, \
                    (SELECT COALESCE(MAX(position) + 1, 0) FROM session_context_refs \
                     WHERE session_id = s.id) + r.ord \
             FROM sessions AS s, r WHERE s.id = $1 ORDER BY r.ord \
             RETURNING ",
            context_ref_columns!()
        ),
        values.join(", ")
    )
}

/// `get_artifacts` of `n` ids, bound as `$1…$n`.
pub(crate) fn artifacts_by_id_sql(n: usize) -> String {
    format!(
        concat!(
            "SELECT ",
            artifact_columns!(),
            " FROM artifacts WHERE id IN ({})"
        ),
        placeholders(1, n)
    )
}

/// `LogIo::append`'s insert of `n` events numbered from `start`:
/// sequence numbers are our own integers, written into the SQL; `$1` is
/// the log and the bodies are bound as `$2…`.
pub(crate) fn append_events_sql(start: i64, n: usize) -> String {
    let values: Vec<String> = (0..n)
        .map(|i| format!("($1, {}, ${})", start + i as i64, i + 2))
        .collect();
    format!(
        "INSERT INTO turn_events (log_id, seq, body) VALUES {}",
        values.join(", ")
    )
}

/// The insert of `n` artifacts, twelve binds per row in column order.
pub(crate) fn insert_artifacts_sql(n: usize) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| format!("({})", placeholders(1 + 12 * i, 12)))
        .collect();
    format!(
        concat!(
            "INSERT INTO artifacts (",
            artifact_columns!(),
            ") VALUES {}"
        ),
        rows.join(", ")
    )
}

sql_log! {
    /// A [`TurnLog`](korvus_log::TurnLog) on SQLite: one `turn_logs` row per
    /// log, one `turn_events` row per event, both holding the exact JSON text.
    ///
    /// `append` is one `BEGIN IMMEDIATE` transaction that bumps the log's
    /// count and inserts the events numbered after the stored ones; once it
    /// returns they are committed (and, with [`open_sqlite`]'s settings,
    /// durable), so `flush` and `close` have nothing left to do. The single
    /// writer per log is enforced per `SqliteLog` value (clones share it) with
    /// [`Writers`](korvus_log::Writers). Open the pool with [`open_sqlite`]
    /// (or equivalent settings) and [`migrate`](fn@crate::migrate) it.
    pub struct SqliteLog(SqlitePool) beside SqliteStore, io SqliteLogIo;
}

impl LogDialect for SqliteLogIo {
    const BACKEND: &'static str = BACKEND;

    async fn append_bodies(
        &self,
        at: u64,
        bodies: &[String],
        bytes: i64,
        epoch: u64,
    ) -> korvus_log::Result<Option<i64>> {
        let count = i64::try_from(bodies.len()).unwrap_or(i64::MAX);
        let start = i64::try_from(at).map_err(|_| korvus_log::LogError::Conflict {
            id: self.id,
            expected: at,
            found: 0,
        })?;
        // IMMEDIATE: the write lock is taken before the count is read, so
        // no other connection appends in between.
        let mut tx = self
            .pool
            .begin_with(BEGIN_IMMEDIATE)
            .await
            .map_err(log_backend(BACKEND))?;
        let found: Option<(i64, i64)> = sqlx::query_as(crate::sql::COUNT_AND_EPOCH)
            .bind(self.id.as_uuid())
            .fetch_optional_completed(&mut *tx)
            .await
            .map_err(log_backend(BACKEND))?;
        let Some((found, newest)) = found else {
            return Err(korvus_log::LogError::NotFound { id: self.id });
        };
        // A newer writer claimed the log, or another count: nothing stored.
        if found != start || u64::try_from(newest).unwrap_or_default() > epoch {
            return crate::log_rows::refused(self.id, epoch, found, newest);
        }
        sqlx::query(BUMP_LOG)
            .bind(self.id.as_uuid())
            .bind(count)
            .bind(bytes)
            .bind(crate::log_rows::to_epoch(self.id, epoch)?)
            .execute(&mut *tx)
            .await
            .map_err(log_backend(BACKEND))?;
        let mut seq = start;
        for chunk in bodies.chunks(MAX_ROWS) {
            let sql = append_events_sql(seq, chunk.len());
            let mut q = sqlx::query(&sql).bind(self.id.as_uuid());
            for body in chunk {
                q = q.bind(body.as_str());
            }
            q.execute(&mut *tx).await.map_err(log_backend(BACKEND))?;
            seq += chunk.len() as i64;
        }
        tx.commit().await.map_err(log_backend(BACKEND))?;
        Ok(None)
    }
}
