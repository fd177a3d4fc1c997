//! [`PgStore`] and [`PgLog`]: the seams on PostgreSQL.
//!
//! Only what PostgreSQL does its own way is here; the statements both engines
//! share are in [`store`](crate::store) and [`log`](crate::log).
//!
//! Every [`Store`](korvus_store::Store) write is one statement (an implicit
//! transaction): seq allocation, context-ref numbering and reopen take the
//! row lock of the incident or session they update inside that statement, so
//! concurrent callers on any number of connections serialise on the row,
//! never on a process-local lock. Batches are bound as arrays and expanded
//! with `UNNEST`, so a batch of any size is one statement.

use chrono::{DateTime, Utc};
use korvus_store::{constraint, ArtifactId, ContextRef, Entity, NewArtifact, Result, SessionId};
use sqlx::PgPool;
use uuid::Uuid;

use crate::completed::Completed as _;
use crate::dialect::{LogDialect, StoreDialect};
use crate::error::{backend, log_backend};
use crate::log::sql_log;
use crate::rows::{
    active, artifact_columns, artifact_sessions, check_artifact_fences, context_ref_columns,
    session_fences, ArtifactRow, ContextRefRow, SessionFence,
};
use crate::sql::unnest_artifacts;
use crate::store::sql_store;

/// The `backend` name in this module's `Backend` errors.
pub(crate) const BACKEND: &str = "postgres";

/// How many picks a capped claim makes before it answers `None`.
const CAPPED_CLAIM_ATTEMPTS: usize = 8;

crate::sql::statements! {
    POSTGRES;

    /// The first statement of a capped claim's transaction: each of its
    /// statements sees what was committed before it began.
    READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED";

    /// A capped claim's lock on its key: the key's row in `queue_keys`,
    /// made on first use and row-locked until the claim commits, so the
    /// claims of one key run one at a time. Binds `$1` pool, `$2` key.
    LOCK_QUEUE_KEY = "INSERT INTO queue_keys (pool, queue_key) VALUES ($1, $2) \
         ON CONFLICT (pool, queue_key) DO UPDATE SET pool = EXCLUDED.pool";

    /// `insert_context_refs`, one statement: bump the session's ref
    /// counter (row lock: concurrent inserts for one session queue here)
    /// and number the new refs after the old ones, in request order.
    /// Binds `$1` session, `$2` artifact ids, `$3` roles, `$4` their
    /// number.
    INSERT_CONTEXT_REFS = concat!(
        "WITH s AS ( \
             UPDATE sessions SET context_ref_count = context_ref_count + $4 \
             WHERE id = $1 \
             RETURNING id, incident_id, context_ref_count - $4 AS start \
         ) \
         INSERT INTO session_context_refs \
             (session_id, incident_id, artifact_id, role, position) \
         SELECT s.id, s.incident_id, r.artifact_id, r.role, (s.start + r.ord - 1)::integer \
         FROM s, UNNEST($2::uuid[], $3::text[]) WITH ORDINALITY AS r(artifact_id, role, ord) \
         RETURNING ",
        context_ref_columns!()
    );

    /// `create_artifacts`, one statement, all rows or none: the sessions
    /// the batch names are share-locked and no row is inserted when any
    /// row's session is missing, of another incident, or at another
    /// fence. Binds `$1…$10` and `$12` the columns as arrays, `$11` the
    /// creation time.
    INSERT_ARTIFACTS = concat!(
        "WITH s AS (SELECT id, incident_id, fence FROM sessions WHERE id = ANY($3) AND ",
        active!(),
        " FOR SHARE), \
         stale AS (SELECT 1 FROM UNNEST($2::uuid[], $3::uuid[], $12::int8[]) \
             AS f(incident_id, session_id, fence) \
             WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = f.session_id \
                 AND s.incident_id = f.incident_id AND s.fence = f.fence)) \
         ",
        unnest_artifacts!(),
        " WHERE NOT EXISTS (SELECT 1 FROM stale)"
    );

    /// A salvage's artifact rows, unconditionally: `attach_kept_output`
    /// checked their settled session and moved it to their fence under the
    /// same transaction. Binds as `INSERT_ARTIFACTS`.
    INSERT_SETTLED_ARTIFACTS = unnest_artifacts!();

    /// Why an artifact batch was refused: the sessions it names as they
    /// are now. Binds `$1` the session ids.
    SESSION_FENCES_OF = concat!("SELECT ", session_fences!(), " FROM sessions WHERE id = ANY($1)");

    /// `get_artifacts`. Binds `$1` the ids.
    ARTIFACTS_BY_ID = concat!("SELECT ", artifact_columns!(), " FROM artifacts WHERE id = ANY($1)");

    /// `LogIo::append`, one statement: bump the count under the log row's
    /// lock — only when the log holds exactly `$5` events and no newer
    /// writer than `$6` claimed it — and insert the events numbered from
    /// there. Binds `$1` log, `$2` bodies, `$3` their number, `$4` bytes,
    /// `$5` the expected count, `$6` the writer's epoch.
    APPEND_EVENTS = "WITH l AS ( \
             UPDATE turn_logs SET event_count = event_count + $3, size_bytes = size_bytes + $4, \
                    epoch = $6 \
             WHERE id = $1 AND event_count = $5 AND epoch <= $6 \
             RETURNING event_count - $3 AS start \
         ) \
         INSERT INTO turn_events (log_id, seq, body) \
         SELECT $1, l.start + e.ord - 1, e.body \
         FROM l, UNNEST($2::text[]) WITH ORDINALITY AS e(body, ord)";
}

sql_store! {
    /// A [`Store`](korvus_store::Store) on PostgreSQL.
    ///
    /// Cloning is cheap and shares the pool. The database must have been
    /// brought to the current schema with [`migrate`](fn@crate::migrate).
    pub struct PgStore(PgPool) beside PgLog;
}

crate::lease::sql_lease!(PgStore, sqlx::PgConnection);
crate::replace::sql_replace!(PgStore, sqlx::PgConnection);
crate::outbox::sql_outbox!(PgStore);
crate::budget::sql_budgets!(PgStore);

impl StoreDialect for PgStore {
    // In steps, in one transaction: pick a row whose key is below the cap
    // (row locked, others' picks skipped), take the key's lock row — the
    // claims of one key queue here — and count the key's runs again: the
    // count now sees every claim committed before the lock was granted.
    // A key found full was filled by a concurrent claim; the next pick
    // (a new snapshot) passes it over.
    async fn claim_capped(
        &self,
        pool: &str,
        cap: u32,
        lease: korvus_store::Lease,
    ) -> Result<Option<crate::rows::SessionRow>> {
        let statements = Self::statements();
        let err = backend(BACKEND);
        for _ in 0..CAPPED_CLAIM_ATTEMPTS {
            let mut tx = self.pool.begin().await.map_err(&err)?;
            // The recount must see what other claims committed: whatever
            // the database's default isolation is.
            sqlx::query(READ_COMMITTED)
                .execute(&mut *tx)
                .await
                .map_err(&err)?;
            let picked: Option<(Uuid, String)> = sqlx::query_as(&statements.pick_capped)
                .bind(pool)
                .bind(i64::from(cap))
                .fetch_optional_completed(&mut *tx)
                .await
                .map_err(&err)?;
            let Some((id, key)) = picked else {
                return Ok(None);
            };
            sqlx::query(LOCK_QUEUE_KEY)
                .bind(pool)
                .bind(&key)
                .execute(&mut *tx)
                .await
                .map_err(&err)?;
            let busy: i64 = sqlx::query_scalar(&statements.key_busy)
                .bind(pool)
                .bind(&key)
                .fetch_one_completed(&mut *tx)
                .await
                .map_err(&err)?;
            if busy >= i64::from(cap) {
                // Rolled back now, not when the connection is next used: its
                // locks must be gone before the next step looks again.
                let _ = tx.rollback().await;
                continue;
            }
            let row = sqlx::query_as(&statements.claim_row)
                .bind(id)
                .bind(lease.owner.as_uuid())
                .bind(lease.ttl_millis())
                .fetch_optional_completed(&mut *tx)
                .await
                .map_err(&err)?;
            tx.commit().await.map_err(&err)?;
            return Ok(row);
        }
        // Every attempt met a key a concurrent claim had just filled: the
        // caller asks again at its next wake-up.
        Ok(None)
    }

    fn cancel_listener(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.listener(CANCEL_CHANNEL)
    }

    fn queue_listener(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.listener(QUEUE_CHANNEL)
    }

    const BACKEND: &'static str = BACKEND;

    // One statement: bump the incident's counter (taking its row lock, so
    // concurrent creates queue here) and insert with the new value. No
    // incident, no row; a duplicate id rolls the bump back.
    const RUN_KEY: &'static str =
        "replace(CAST(id AS text), '-', '') || ':' || CAST(fence AS text)";

    const JSON_TEXTS_4: &'static str = "SELECT json_array_elements_text(CAST($4 AS json))";

    const SHARE_LOCK: &'static str = " FOR SHARE";

    const NOW_MS: &'static str = "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)";

    const INCIDENT_TEXT: &'static str = "CAST({t}.incident_id AS text)";

    fn incident_key(id: korvus_store::IncidentId) -> String {
        id.as_uuid().hyphenated().to_string()
    }

    const WRITES_IN_WITH: bool = true;

    const SKIP_LOCKED: &'static str = " FOR UPDATE OF s SKIP LOCKED";

    const INSERT_SESSION: &'static str = concat!(
        "\
        WITH next AS ( \
            UPDATE incidents SET last_seq = last_seq + 1 WHERE id = $2 RETURNING last_seq \
        ) \
        INSERT INTO sessions \
            (id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, \
             revision, created_at, owner, lease_expires_ms, pool, priority, queue_key, \
             idempotency_key, runner, queued_ms) \
        SELECT $1, $2, next.last_seq, \
               CASE WHEN next.last_seq = 1 THEN 'initial' ELSE 'follow_up' END, \
               $3, $4, $5, $6, 1, $7, $8, \
               CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) + $9, $10, $11, $12, $13, $14, \
               CASE WHEN $8 IS NULL THEN CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT) END \
        FROM next \
        RETURNING seq, ",
        crate::rows::lease_column!()
    );

    async fn insert_context_ref_rows(
        &self,
        session: SessionId,
        refs: &[ContextRef],
    ) -> Result<Vec<ContextRefRow>> {
        let artifact_ids: Vec<Uuid> = refs.iter().map(|r| r.artifact_id.as_uuid()).collect();
        let roles: Vec<&str> = refs.iter().map(|r| r.role.as_str()).collect();
        // One statement: bump the session's ref counter (row lock: concurrent
        // inserts for one session queue here) and number the new refs after
        // the old ones, in request order. There is deliberately no pre-check
        // of the artifacts: the composite foreign key
        // session_context_refs_artifact_fk refuses another incident's (or an
        // unknown) artifact, and the whole statement rolls back.
        sqlx::query_as(INSERT_CONTEXT_REFS)
            .bind(session.as_uuid())
            .bind(&artifact_ids)
            .bind(&roles)
            .bind(i32::try_from(refs.len()).unwrap_or(i32::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| {
                Self::op(
                    Entity::ContextRef,
                    Some(constraint::CONTEXT_REFS_ARTIFACT_FK),
                )
                .err(e)
            })
    }

    async fn insert_artifact_rows(
        &self,
        new: &[NewArtifact],
        created_at: DateTime<Utc>,
    ) -> Result<()> {
        // One statement, all rows or none: the sessions the batch names are
        // share-locked (a reopen, fence + 1, waits for it, and a row a
        // reopen changed meanwhile is read again as it is now), and no row
        // is inserted when any row's session is missing, of another
        // incident, or at another fence.
        let mut conn = self.pool.acquire().await.map_err(backend(BACKEND))?;
        let inserted = Self::insert_artifacts_on(&mut conn, new, created_at).await?;
        drop(conn);
        if inserted == new.len() as u64 {
            return Ok(());
        }
        // Refused: say why, from the sessions as they are now (a second
        // statement on this path only).
        let found: Vec<SessionFence> = sqlx::query_as(SESSION_FENCES_OF)
            .bind(artifact_sessions(new))
            .fetch_all(&self.pool)
            .await
            .map_err(backend(BACKEND))?;
        check_artifact_fences(new, &found)?;
        Err(korvus_store::StoreError::Conflict {
            entity: Entity::Artifact,
            detail: "the batch was refused: a session's fence moved while it was written".into(),
        })
    }

    async fn artifact_rows(&self, ids: &[ArtifactId]) -> Result<Vec<ArtifactRow>> {
        let uuids: Vec<Uuid> = ids.iter().map(ArtifactId::as_uuid).collect();
        sqlx::query_as(ARTIFACTS_BY_ID)
            .bind(&uuids)
            .fetch_all(&self.pool)
            .await
            .map_err(backend(BACKEND))
    }
}

sql_log! {
    /// A [`TurnLog`](korvus_log::TurnLog) on PostgreSQL: one `turn_logs` row
    /// per log, one `turn_events` row per event, both holding the exact JSON
    /// text.
    ///
    /// `append` is one statement (so one transaction) that numbers the events
    /// contiguously after the stored ones; once it returns, the events are
    /// committed, so `flush` and `close` have nothing left to do. The single
    /// writer per log is enforced per `PgLog` value (clones share it) with
    /// [`Writers`](korvus_log::Writers). `stat` reads only the log's row: the
    /// revision is the event count, and `size_bytes` is the length of the
    /// exported JSONL.
    pub struct PgLog(PgPool) beside PgStore, io PgLogIo;
}

impl LogDialect for PgLogIo {
    const BACKEND: &'static str = BACKEND;

    async fn append_bodies(
        &self,
        at: u64,
        bodies: &[String],
        bytes: i64,
        epoch: u64,
    ) -> korvus_log::Result<Option<i64>> {
        let start = i64::try_from(at).map_err(|_| korvus_log::LogError::Conflict {
            id: self.id,
            expected: at,
            found: 0,
        })?;
        let mine = crate::log_rows::to_epoch(self.id, epoch)?;
        // One statement: bump the count under the log row's lock — only
        // when the log holds exactly `at` events and no newer writer claimed
        // it, so even writers in other processes cannot interleave — and
        // insert the events numbered from there.
        let appended = sqlx::query(APPEND_EVENTS)
            .bind(self.id.as_uuid())
            .bind(bodies)
            .bind(i64::try_from(bodies.len()).unwrap_or(i64::MAX))
            .bind(bytes)
            .bind(start)
            .bind(mine)
            .execute(&self.pool)
            .await
            .map_err(log_backend(BACKEND))?;
        if appended.rows_affected() > 0 {
            return Ok(None);
        }
        // Nothing stored: the log is missing, holds another count, or a
        // newer writer claimed it.
        let found: Option<(i64, i64)> = sqlx::query_as(crate::sql::COUNT_AND_EPOCH)
            .bind(self.id.as_uuid())
            .fetch_optional_completed(&self.pool)
            .await
            .map_err(log_backend(BACKEND))?;
        match found {
            None => Err(korvus_log::LogError::NotFound { id: self.id }),
            Some((found, newest)) => crate::log_rows::refused(self.id, epoch, found, newest),
        }
    }
}

/// The channel the `sessions_cancel_notify` trigger notifies.
const CANCEL_CHANNEL: &str = "korvus_cancel";

/// The channel the queue triggers notify (rows queued, runs ended).
const QUEUE_CHANNEL: &str = "korvus_queue";

impl PgStore {
    /// A `Notify` fed by the notifications of `channel`, if a tokio
    /// runtime runs: a connection of its own, outside the store's pool (a
    /// listener holds its connection for as long as it listens), closed
    /// once nobody holds the `Notify`.
    fn listener(&self, channel: &'static str) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let notify = std::sync::Arc::new(tokio::sync::Notify::new());
        let weak = std::sync::Arc::downgrade(&notify);
        let options = self.pool().connect_options().as_ref().clone();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options);
        runtime.spawn(listen(pool, channel, weak));
        Some(notify)
    }
}

/// Feeds `notify` with the notifications of `channel` until nobody holds
/// it any more. A lost connection is re-established (sqlx's
/// listener reconnects; what was sent meanwhile is lost, and the caller's
/// polling covers it); a listener that cannot start retries after a pause.
async fn listen(pool: PgPool, channel: &'static str, notify: std::sync::Weak<tokio::sync::Notify>) {
    use std::time::Duration;
    loop {
        if notify.strong_count() == 0 {
            pool.close().await;
            return;
        }
        let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(channel, error = %e, "listener not connected; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(channel).await {
            tracing::debug!(error = %e, "LISTEN failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        loop {
            // Wake up now and then to notice that nobody listens any more.
            match tokio::time::timeout(Duration::from_secs(1), listener.recv()).await {
                Ok(Ok(_)) => match notify.upgrade() {
                    Some(n) => n.notify_one(),
                    None => break,
                },
                Ok(Err(e)) => {
                    tracing::debug!(channel, error = %e, "listener failed; reconnecting");
                    break;
                }
                Err(_) if notify.strong_count() == 0 => break,
                Err(_) => {}
            }
        }
    }
}
