//! [`SqliteStore`] and [`SqliteLog`]: the seams on SQLite, for one machine.
//!
//! SQLite has one writer at a time, and a write statement takes the write
//! lock before it reads anything. So a single `INSERT … SELECT` that computes
//! `MAX(seq) + 1` (or the next context-ref position) from the table it inserts
//! into is race-free without a counter row. Operations that need more than one
//! statement open their transaction with `BEGIN IMMEDIATE`, taking the write
//! lock up front: a deferred transaction that reads and then writes could fail
//! with `SQLITE_BUSY` under concurrency instead of waiting. Connections wait
//! for the lock up to the busy timeout set by [`open_sqlite`].

use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use korvus_log::{
    Access, Event, FlushError, LogError, LogHandle, LogHeader, LogId, LogIo, LogStat, TurnLog,
    Writers,
};
use korvus_store::{
    constraint, validate, Artifact, ArtifactId, ContextRef, Entity, Incident, IncidentId,
    IncidentStatus, NewArtifact, NewIncident, NewReport, NewSession, Report, Result, Session,
    SessionContextRef, SessionId, SessionStatus, Settlement, Store, StoreError,
};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;
use uuid::Uuid;

use crate::error::{backend, is_unique_violation, log_backend, unexpected, Op};
use crate::log_rows::{self, LogRow};
use crate::rows::{
    self, artifact_columns, context_ref_columns, incident_columns, report_columns, session_columns,
    to_i32, to_i64, ArtifactRow, ContextRefRow, IncidentRow, ReportRow, SessionRow,
};

/// The `backend` name in this module's `Backend` errors.
pub(crate) const BACKEND: &str = "sqlite";

/// How long a connection waits for another writer before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Rows per multi-row statement: SQLite allows at most 32766 bound values in
/// one statement, and an artifact row binds 11.
const MAX_ROWS: usize = 2000;

/// Opens (creating it if missing) the SQLite database at `path` with the
/// settings the store and log rely on: foreign keys enforced, write-ahead
/// logging, `synchronous = FULL` (a returned write is durable), and a 30 s
/// busy timeout. Run [`migrate`](crate::migrate) on the pool before use.
///
/// # Errors
/// `Backend` when the file cannot be opened or created.
///
/// # Cancel safety
/// Cancel-safe: a dropped call opens nothing.
pub async fn open_sqlite(path: &Path) -> Result<SqlitePool> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .foreign_keys(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT);
    SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .map_err(backend(BACKEND))
}

fn op(entity: Entity, foreign_key: Option<&'static str>) -> Op {
    Op {
        backend: BACKEND,
        entity,
        foreign_key,
    }
}

/// `$first, $first+1, …` for `n` values.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A [`Store`] on SQLite.
///
/// Cloning is cheap and shares the pool. Open the pool with [`open_sqlite`]
/// (or equivalent settings, foreign keys above all) and [`migrate`](crate::migrate) it.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// A store over `pool`.
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }

    /// The pool, e.g. to share it with a [`SqliteLog`].
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn session_row(&self, id: SessionId) -> Result<Session> {
        let row: Option<SessionRow> = sqlx::query_as(concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE id = $1"
        ))
        .bind(id.as_uuid())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        row.ok_or_else(|| StoreError::not_found(Entity::Session, id))?
            .into_model(BACKEND)
    }
}

static REOPEN: LazyLock<String> = LazyLock::new(|| {
    format!(
        concat!(
            "UPDATE sessions SET status = $2, ended_at = NULL, exit_reason = NULL, \
             revision = revision + 1 WHERE id = $1 AND status IN ({}) RETURNING ",
            session_columns!()
        ),
        placeholders(3, SessionStatus::TERMINAL.len())
    )
});

#[async_trait]
impl Store for SqliteStore {
    async fn create_incident(&self, new: NewIncident) -> Result<Incident> {
        validate::new_incident(&new)?;
        let incident = Incident {
            id: IncidentId::new(),
            title: new.title,
            status: IncidentStatus::Open,
            workspace: new.workspace,
            created_at: rows::now(),
        };
        sqlx::query(
            "INSERT INTO incidents (id, title, status, workspace_repo, workspace_commit, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(incident.id.as_uuid())
        .bind(&incident.title)
        .bind(incident.status.as_str())
        .bind(incident.workspace.as_ref().map(|w| &w.repo))
        .bind(incident.workspace.as_ref().map(|w| &w.commit))
        .bind(incident.created_at)
        .execute(&self.pool)
        .await
        .map_err(|e| op(Entity::Incident, None).err(e))?;
        Ok(incident)
    }

    async fn get_incident(&self, id: IncidentId) -> Result<Incident> {
        let row: Option<IncidentRow> = sqlx::query_as(concat!(
            "SELECT ",
            incident_columns!(),
            " FROM incidents WHERE id = $1"
        ))
        .bind(id.as_uuid())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        row.ok_or_else(|| StoreError::not_found(Entity::Incident, id))?
            .into_model(BACKEND)
    }

    async fn list_incidents(&self) -> Result<Vec<Incident>> {
        // Ids are UUID v7 stored as BLOBs, which sort bytewise: id order is
        // creation order.
        let rows: Vec<IncidentRow> = sqlx::query_as(concat!(
            "SELECT ",
            incident_columns!(),
            " FROM incidents ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        rows::all(BACKEND, rows, IncidentRow::into_model)
    }

    async fn close_incident(&self, id: IncidentId) -> Result<Incident> {
        let row: Option<IncidentRow> = sqlx::query_as(concat!(
            "UPDATE incidents SET status = $2 WHERE id = $1 RETURNING ",
            incident_columns!()
        ))
        .bind(id.as_uuid())
        .bind(IncidentStatus::Closed.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        row.ok_or_else(|| StoreError::not_found(Entity::Incident, id))?
            .into_model(BACKEND)
    }

    async fn create_session(&self, new: NewSession) -> Result<Session> {
        validate::new_session(&new)?;
        let created_at = rows::now();
        // One statement, holding the write lock from its first read: the
        // next seq is computed and used atomically. No incident, no row.
        let seq: Option<i64> = sqlx::query_scalar(
            "INSERT INTO sessions \
                 (id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, \
                  revision, created_at) \
             SELECT $1, i.id, \
                    (SELECT COALESCE(MAX(seq), 0) + 1 FROM sessions WHERE incident_id = i.id), \
                    $3, $4, $5, $6, $7, 1, $8 \
             FROM incidents AS i WHERE i.id = $2 \
             RETURNING seq",
        )
        .bind(new.id.as_uuid())
        .bind(new.incident_id.as_uuid())
        .bind(new.kind.as_str())
        .bind(SessionStatus::Running.as_str())
        .bind(&new.prompt)
        .bind(new.workspace_ref.as_ref().map(|w| &w.repo))
        .bind(new.workspace_ref.as_ref().map(|w| &w.commit))
        .bind(created_at)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| op(Entity::Session, Some(constraint::SESSIONS_INCIDENT_FK)).err(e))?;
        let seq = seq.ok_or_else(|| StoreError::not_found(Entity::Incident, new.incident_id))?;
        Ok(Session {
            id: new.id,
            incident_id: new.incident_id,
            seq: u32::try_from(seq).map_err(|_| unexpected(BACKEND, format!("seq {seq}")))?,
            kind: new.kind,
            status: SessionStatus::Running,
            prompt: new.prompt,
            workspace_ref: new.workspace_ref,
            exit_reason: None,
            counters: Default::default(),
            revision: 1,
            created_at,
            ended_at: None,
        })
    }

    async fn get_session(&self, id: SessionId) -> Result<Session> {
        self.session_row(id).await
    }

    async fn list_sessions(&self, incident: IncidentId) -> Result<Vec<Session>> {
        let rows: Vec<SessionRow> = sqlx::query_as(concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE incident_id = $1 ORDER BY seq"
        ))
        .bind(incident.as_uuid())
        .fetch_all(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        rows::all(BACKEND, rows, SessionRow::into_model)
    }

    async fn insert_context_refs(
        &self,
        session: SessionId,
        refs: &[ContextRef],
    ) -> Result<Vec<SessionContextRef>> {
        for r in refs {
            validate::context_ref(r)?;
        }
        if refs.is_empty() {
            self.session_row(session).await?;
            return Ok(Vec::new());
        }
        // Per chunk, one statement numbering the refs after the stored ones.
        // There is deliberately no pre-check of the artifacts: the composite
        // foreign key session_context_refs_artifact_fk refuses another
        // incident's (or an unknown) artifact. The session key cannot fail:
        // session and incident come from the sessions row the statement reads.
        let insert = |chunk: &[ContextRef]| {
            let values: Vec<String> = (0..chunk.len())
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
        };
        let chunks: Vec<&[ContextRef]> = refs.chunks(MAX_ROWS).collect();
        let sqls: Vec<String> = chunks.iter().map(|c| insert(c)).collect();
        let query = |i: usize| {
            let mut q = sqlx::query_as::<_, ContextRefRow>(&sqls[i]).bind(session.as_uuid());
            for r in chunks[i] {
                q = q.bind(r.artifact_id.as_uuid()).bind(r.role.as_str());
            }
            q
        };
        let map = |e| {
            op(
                Entity::ContextRef,
                Some(constraint::CONTEXT_REFS_ARTIFACT_FK),
            )
            .err(e)
        };
        let rows: Vec<ContextRefRow> = if chunks.len() == 1 {
            query(0).fetch_all(&self.pool).await.map_err(map)?
        } else {
            let mut tx = self
                .pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(backend(BACKEND))?;
            let mut all = Vec::with_capacity(refs.len());
            for i in 0..chunks.len() {
                all.extend(query(i).fetch_all(&mut *tx).await.map_err(map)?);
            }
            tx.commit().await.map_err(backend(BACKEND))?;
            all
        };
        if rows.is_empty() {
            return Err(StoreError::not_found(Entity::Session, session));
        }
        let mut stored = rows::all(BACKEND, rows, ContextRefRow::into_model)?;
        stored.sort_by_key(|r| r.position);
        Ok(stored)
    }

    async fn list_context_refs(&self, session: SessionId) -> Result<Vec<SessionContextRef>> {
        let rows: Vec<ContextRefRow> = sqlx::query_as(concat!(
            "SELECT ",
            context_ref_columns!(),
            " FROM session_context_refs WHERE session_id = $1 ORDER BY position"
        ))
        .bind(session.as_uuid())
        .fetch_all(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        rows::all(BACKEND, rows, ContextRefRow::into_model)
    }

    async fn settle_session(&self, id: SessionId, settlement: Settlement) -> Result<Session> {
        validate::settlement(&settlement)?;
        let ended_at = settlement.status.is_terminal().then(rows::now);
        let c = settlement.counters;
        let row: Option<SessionRow> = sqlx::query_as(concat!(
            "UPDATE sessions SET status = $2, exit_reason = $3, turns = $4, tool_calls = $5, \
             input_tokens = $6, output_tokens = $7, ended_at = $8 WHERE id = $1 RETURNING ",
            session_columns!()
        ))
        .bind(id.as_uuid())
        .bind(settlement.status.as_str())
        .bind(settlement.exit_reason.as_deref())
        .bind(to_i64(c.turns))
        .bind(to_i64(c.tool_calls))
        .bind(to_i64(c.input_tokens))
        .bind(to_i64(c.output_tokens))
        .bind(ended_at)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        row.ok_or_else(|| StoreError::not_found(Entity::Session, id))?
            .into_model(BACKEND)
    }

    async fn reopen_session(&self, id: SessionId) -> Result<Session> {
        // The one conditional statement; SQLite runs writes one at a time, so
        // the first reopen matches and the others find the session running.
        let mut q = sqlx::query_as::<_, SessionRow>(&REOPEN)
            .bind(id.as_uuid())
            .bind(SessionStatus::Running.as_str());
        for s in SessionStatus::TERMINAL {
            q = q.bind(s.as_str());
        }
        let row = q
            .fetch_optional(&self.pool)
            .await
            .map_err(backend(BACKEND))?;
        match row {
            Some(row) => row.into_model(BACKEND),
            // Failure path only: tell an unknown session from a running one.
            None => {
                let exists: Option<i64> =
                    sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = $1")
                        .bind(id.as_uuid())
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend(BACKEND))?;
                Err(match exists {
                    Some(_) => StoreError::NotFinished { session: id },
                    None => StoreError::not_found(Entity::Session, id),
                })
            }
        }
    }

    async fn create_report(&self, new: NewReport) -> Result<Report> {
        validate::new_report(&new)?;
        let report = Report {
            session_id: new.session_id,
            incident_id: new.incident_id,
            revision: new.revision,
            markdown_key: new.markdown_key,
            markdown_bytes: new.markdown_bytes,
            exit_reason: new.exit_reason,
            counters: new.counters,
            created_at: rows::now(),
        };
        let c = report.counters;
        sqlx::query(concat!(
            "INSERT INTO reports (",
            report_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(report.session_id.as_uuid())
        .bind(report.incident_id.as_uuid())
        .bind(to_i32(report.revision))
        .bind(report.markdown_key.as_deref())
        .bind(to_i64(report.markdown_bytes))
        .bind(&report.exit_reason)
        .bind(to_i64(c.turns))
        .bind(to_i64(c.tool_calls))
        .bind(to_i64(c.input_tokens))
        .bind(to_i64(c.output_tokens))
        .bind(report.created_at)
        .execute(&self.pool)
        .await
        .map_err(|e| op(Entity::Report, Some(constraint::REPORTS_SESSION_FK)).err(e))?;
        Ok(report)
    }

    async fn get_report(&self, session: SessionId, revision: u32) -> Result<Report> {
        let row: Option<ReportRow> = sqlx::query_as(concat!(
            "SELECT ",
            report_columns!(),
            " FROM reports WHERE session_id = $1 AND revision = $2"
        ))
        .bind(session.as_uuid())
        .bind(i64::from(revision))
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        row.ok_or_else(|| StoreError::not_found(Entity::Report, format!("{session}/{revision}")))?
            .into_model(BACKEND)
    }

    async fn list_reports(&self, session: SessionId) -> Result<Vec<Report>> {
        let rows: Vec<ReportRow> = sqlx::query_as(concat!(
            "SELECT ",
            report_columns!(),
            " FROM reports WHERE session_id = $1 ORDER BY revision"
        ))
        .bind(session.as_uuid())
        .fetch_all(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        rows::all(BACKEND, rows, ReportRow::into_model)
    }

    async fn next_report_revision(&self, session: SessionId) -> Result<u32> {
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT (SELECT COALESCE(MAX(revision), 0) FROM reports WHERE session_id = $1) + 1 \
             FROM sessions WHERE id = $1",
        )
        .bind(session.as_uuid())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        let next = next.ok_or_else(|| StoreError::not_found(Entity::Session, session))?;
        u32::try_from(next).map_err(|_| unexpected(BACKEND, format!("report revision {next}")))
    }

    async fn create_artifacts(&self, new: Vec<NewArtifact>) -> Result<Vec<Artifact>> {
        for n in &new {
            validate::new_artifact(n)?;
        }
        if new.is_empty() {
            return Ok(Vec::new());
        }
        let created_at = rows::now();
        let chunks: Vec<&[NewArtifact]> = new.chunks(MAX_ROWS).collect();
        let sqls: Vec<String> = chunks
            .iter()
            .map(|c| {
                let rows: Vec<String> = (0..c.len())
                    .map(|i| format!("({})", placeholders(1 + 11 * i, 11)))
                    .collect();
                format!(
                    concat!(
                        "INSERT INTO artifacts (",
                        artifact_columns!(),
                        ") VALUES {}"
                    ),
                    rows.join(", ")
                )
            })
            .collect();
        let query = |i: usize| {
            let mut q = sqlx::query(&sqls[i]);
            for n in chunks[i] {
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
                    .bind(created_at);
            }
            q
        };
        let map = |e| op(Entity::Artifact, Some(constraint::ARTIFACTS_SESSION_FK)).err(e);
        if chunks.len() == 1 {
            // One multi-row statement: all rows or none.
            query(0).execute(&self.pool).await.map_err(map)?;
        } else {
            let mut tx = self
                .pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(backend(BACKEND))?;
            for i in 0..chunks.len() {
                query(i).execute(&mut *tx).await.map_err(map)?;
            }
            tx.commit().await.map_err(backend(BACKEND))?;
        }
        drop(sqls);
        Ok(new.into_iter().map(|n| n.stored_at(created_at)).collect())
    }

    async fn get_artifacts(&self, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        let mut found = Vec::new();
        for chunk in ids.chunks(MAX_ROWS) {
            let sql = format!(
                concat!(
                    "SELECT ",
                    artifact_columns!(),
                    " FROM artifacts WHERE id IN ({})"
                ),
                placeholders(1, chunk.len())
            );
            let mut q = sqlx::query_as::<_, ArtifactRow>(&sql);
            for id in chunk {
                q = q.bind(id.as_uuid());
            }
            let rows = q.fetch_all(&self.pool).await.map_err(backend(BACKEND))?;
            found.extend(rows::all(BACKEND, rows, ArtifactRow::into_model)?);
        }
        rows::in_request_order(ids, found)
    }

    async fn list_session_artifacts(&self, session: SessionId) -> Result<Vec<Artifact>> {
        let rows: Vec<ArtifactRow> = sqlx::query_as(concat!(
            "SELECT ",
            artifact_columns!(),
            " FROM artifacts WHERE session_id = $1 ORDER BY id"
        ))
        .bind(session.as_uuid())
        .fetch_all(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        rows::all(BACKEND, rows, ArtifactRow::into_model)
    }

    async fn list_incident_artifacts(&self, incident: IncidentId) -> Result<Vec<Artifact>> {
        let rows: Vec<ArtifactRow> = sqlx::query_as(concat!(
            "SELECT ",
            artifact_columns!(),
            " FROM artifacts WHERE incident_id = $1 ORDER BY id"
        ))
        .bind(incident.as_uuid())
        .fetch_all(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        rows::all(BACKEND, rows, ArtifactRow::into_model)
    }
}

/// A [`TurnLog`] on SQLite: one `turn_logs` row per log, one `turn_events`
/// row per event, both holding the exact JSON text.
///
/// `append` is one `BEGIN IMMEDIATE` transaction that bumps the log's count
/// and inserts the events numbered after the stored ones; once it returns
/// they are committed (and, with [`open_sqlite`]'s settings, durable), so
/// `flush` and `close` have nothing left to do. The single writer per log is
/// enforced per `SqliteLog` value (clones share it) with [`Writers`].
#[derive(Debug, Clone)]
pub struct SqliteLog {
    pool: SqlitePool,
    writers: Writers,
}

impl SqliteLog {
    /// A turn-log service over `pool` (opened with [`open_sqlite`] and
    /// migrated with [`migrate`](crate::migrate)).
    pub fn new(pool: SqlitePool) -> Self {
        Self {
            pool,
            writers: Writers::new(),
        }
    }

    /// The pool, e.g. to share it with a [`SqliteStore`].
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn row(&self, id: LogId) -> korvus_log::Result<LogRow> {
        let row: Option<LogRow> =
            sqlx::query_as("SELECT header, event_count, size_bytes FROM turn_logs WHERE id = $1")
                .bind(id.as_uuid())
                .fetch_optional(&self.pool)
                .await
                .map_err(log_backend(BACKEND))?;
        row.ok_or(LogError::NotFound { id })
    }

    fn handle(&self, header: LogHeader, access: Access) -> korvus_log::Result<LogHandle> {
        let io = Arc::new(SqliteLogIo {
            pool: self.pool.clone(),
            id: header.id,
        });
        Ok(match access {
            Access::Read => LogHandle::reader(header, io),
            Access::Write => {
                let claim = self.writers.claim(header.id)?;
                LogHandle::writer(header, io, claim)
            }
        })
    }
}

#[async_trait]
impl TurnLog for SqliteLog {
    async fn create(&self, header: LogHeader) -> korvus_log::Result<LogHandle> {
        let id = header.id;
        let text = log_rows::header_json(BACKEND, &header)?;
        sqlx::query("INSERT INTO turn_logs (id, header, size_bytes) VALUES ($1, $2, $3)")
            .bind(id.as_uuid())
            .bind(&text)
            .bind(log_rows::line_bytes(&text))
            .execute(&self.pool)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    LogError::AlreadyExists { id }
                } else {
                    LogError::backend(BACKEND, e)
                }
            })?;
        self.handle(header, Access::Write)
    }

    async fn open(&self, id: LogId, access: Access) -> korvus_log::Result<LogHandle> {
        let header = self.row(id).await?.header(id)?;
        self.handle(header, access)
    }

    async fn stat(&self, id: LogId) -> korvus_log::Result<LogStat> {
        self.row(id).await?.stat(id)
    }

    async fn list(&self) -> korvus_log::Result<Vec<LogId>> {
        let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM turn_logs ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .map_err(log_backend(BACKEND))?;
        Ok(ids.into_iter().map(LogId::from_uuid).collect())
    }

    async fn flush(&self) -> std::result::Result<(), FlushError> {
        self.writers.flush_all().await
    }
}

#[derive(Debug)]
struct SqliteLogIo {
    pool: SqlitePool,
    id: LogId,
}

#[async_trait]
impl LogIo for SqliteLogIo {
    async fn read(&self, offset: u64, len: Option<u64>) -> korvus_log::Result<Vec<Event>> {
        let Some((start, limit)) = log_rows::window(offset, len) else {
            return Ok(Vec::new());
        };
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT seq, body FROM turn_events WHERE log_id = $1 AND seq >= $2 \
             ORDER BY seq LIMIT $3",
        )
        .bind(self.id.as_uuid())
        .bind(start)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(log_backend(BACKEND))?;
        log_rows::events(self.id, start, rows)
    }

    async fn append(&self, events: &[Event]) -> korvus_log::Result<()> {
        let (bodies, bytes) = log_rows::event_lines(BACKEND, events)?;
        if bodies.is_empty() {
            return Ok(());
        }
        let count = i64::try_from(bodies.len()).unwrap_or(i64::MAX);
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(log_backend(BACKEND))?;
        let start: Option<i64> = sqlx::query_scalar(
            "UPDATE turn_logs SET event_count = event_count + $2, size_bytes = size_bytes + $3 \
             WHERE id = $1 RETURNING event_count - $2",
        )
        .bind(self.id.as_uuid())
        .bind(count)
        .bind(bytes)
        .fetch_optional(&mut *tx)
        .await
        .map_err(log_backend(BACKEND))?;
        let Some(start) = start else {
            return Err(LogError::NotFound { id: self.id });
        };
        let mut seq = start;
        for chunk in bodies.chunks(MAX_ROWS) {
            // Sequence numbers are our own integers, written into the SQL;
            // the bodies are bound.
            let values: Vec<String> = (0..chunk.len())
                .map(|i| format!("($1, {}, ${})", seq + i as i64, i + 2))
                .collect();
            let sql = format!(
                "INSERT INTO turn_events (log_id, seq, body) VALUES {}",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(self.id.as_uuid());
            for body in chunk {
                q = q.bind(body.as_str());
            }
            q.execute(&mut *tx).await.map_err(log_backend(BACKEND))?;
            seq += chunk.len() as i64;
        }
        tx.commit().await.map_err(log_backend(BACKEND))
    }

    async fn flush(&self) -> korvus_log::Result<()> {
        // Every append is committed before it returns.
        Ok(())
    }

    async fn close(&self) -> korvus_log::Result<()> {
        Ok(())
    }
}
