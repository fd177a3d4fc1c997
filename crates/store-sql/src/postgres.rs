//! [`PgStore`] and [`PgLog`]: the seams on PostgreSQL.
//!
//! Every [`Store`] write is one statement (an implicit transaction): seq
//! allocation, context-ref numbering and reopen take the row lock of the
//! incident or session they update inside that statement, so concurrent
//! callers on any number of connections serialise on the row, never on a
//! process-local lock.

use std::sync::Arc;

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
use sqlx::PgPool;
use uuid::Uuid;

use crate::error::{backend, is_unique_violation, log_backend, unexpected, Op};
use crate::log_rows::{self, LogRow};
use crate::rows::{
    self, artifact_columns, context_ref_columns, incident_columns, report_columns, session_columns,
    to_i32, to_i64, ArtifactRow, ContextRefRow, IncidentRow, ReportRow, SessionRow,
};

/// The `backend` name in this module's `Backend` errors.
pub(crate) const BACKEND: &str = "postgres";

fn op(entity: Entity, foreign_key: Option<&'static str>) -> Op {
    Op {
        backend: BACKEND,
        entity,
        foreign_key,
    }
}

fn terminal_statuses() -> Vec<&'static str> {
    SessionStatus::TERMINAL.iter().map(|s| s.as_str()).collect()
}

/// A [`Store`] on PostgreSQL.
///
/// Cloning is cheap and shares the pool. The database must have been brought
/// to the current schema with [`migrate`](crate::migrate).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// A store over `pool`.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The pool, e.g. to share it with a [`PgLog`].
    pub fn pool(&self) -> &PgPool {
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

#[async_trait]
impl Store for PgStore {
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
        // Ids are UUID v7 and PostgreSQL orders uuids bytewise: id order is
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
        // One statement: bump the incident's counter (taking its row lock, so
        // concurrent creates queue here) and insert with the new value. No
        // incident, no row; a duplicate id rolls the bump back.
        let seq: Option<i64> = sqlx::query_scalar(
            "WITH next AS ( \
                 UPDATE incidents SET last_seq = last_seq + 1 WHERE id = $2 RETURNING last_seq \
             ) \
             INSERT INTO sessions \
                 (id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, \
                  revision, created_at) \
             SELECT $1, $2, next.last_seq, $3, $4, $5, $6, $7, 1, $8 FROM next \
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
            // Nothing to insert; the contract still wants NotFound for an
            // unknown session.
            self.session_row(session).await?;
            return Ok(Vec::new());
        }
        let artifact_ids: Vec<Uuid> = refs.iter().map(|r| r.artifact_id.as_uuid()).collect();
        let roles: Vec<&str> = refs.iter().map(|r| r.role.as_str()).collect();
        // One statement: bump the session's ref counter (row lock: concurrent
        // inserts for one session queue here) and number the new refs after
        // the old ones, in request order. There is deliberately no pre-check
        // of the artifacts: the composite foreign key
        // session_context_refs_artifact_fk refuses another incident's (or an
        // unknown) artifact, and the whole statement rolls back.
        let rows: Vec<ContextRefRow> = sqlx::query_as(concat!(
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
        ))
        .bind(session.as_uuid())
        .bind(&artifact_ids)
        .bind(&roles)
        .bind(i32::try_from(refs.len()).unwrap_or(i32::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| {
            op(
                Entity::ContextRef,
                Some(constraint::CONTEXT_REFS_ARTIFACT_FK),
            )
            .err(e)
        })?;
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
        // The one conditional statement: of concurrent reopens, the first to
        // take the row lock moves it to running; the others re-check the
        // condition on the updated row, match nothing and write nothing.
        let row: Option<SessionRow> = sqlx::query_as(concat!(
            "UPDATE sessions SET status = $2, ended_at = NULL, exit_reason = NULL, \
             revision = revision + 1 \
             WHERE id = $1 AND status = ANY($3) RETURNING ",
            session_columns!()
        ))
        .bind(id.as_uuid())
        .bind(SessionStatus::Running.as_str())
        .bind(terminal_statuses())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        match row {
            Some(row) => row.into_model(BACKEND),
            // Failure path only: tell an unknown session from a running one.
            None => {
                let exists: Option<i32> =
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
        let not_found = || StoreError::not_found(Entity::Report, format!("{session}/{revision}"));
        let Ok(rev) = i32::try_from(revision) else {
            return Err(not_found());
        };
        let row: Option<ReportRow> = sqlx::query_as(concat!(
            "SELECT ",
            report_columns!(),
            " FROM reports WHERE session_id = $1 AND revision = $2"
        ))
        .bind(session.as_uuid())
        .bind(rev)
        .fetch_optional(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        row.ok_or_else(not_found)?.into_model(BACKEND)
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
            "SELECT (SELECT COALESCE(MAX(revision), 0) FROM reports WHERE session_id = $1)::bigint + 1 \
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
        let ids: Vec<Uuid> = new.iter().map(|n| n.id.as_uuid()).collect();
        let incidents: Vec<Uuid> = new.iter().map(|n| n.incident_id.as_uuid()).collect();
        let sessions: Vec<Uuid> = new.iter().map(|n| n.session_id.as_uuid()).collect();
        let kinds: Vec<&str> = new.iter().map(|n| n.kind.as_str()).collect();
        let paths: Vec<&str> = new.iter().map(|n| n.path.as_str()).collect();
        let keys: Vec<&str> = new.iter().map(|n| n.blob_key.as_str()).collect();
        let types: Vec<&str> = new.iter().map(|n| n.content_type.as_str()).collect();
        let sizes: Vec<i64> = new.iter().map(|n| to_i64(n.size_bytes)).collect();
        let digests: Vec<&str> = new.iter().map(|n| n.sha256.as_str()).collect();
        let revisions: Vec<i32> = new.iter().map(|n| to_i32(n.revision)).collect();
        // The whole batch is one statement: all rows or none.
        sqlx::query(concat!(
            "INSERT INTO artifacts (",
            artifact_columns!(),
            ") SELECT u.*, $11 FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], \
             $5::text[], $6::text[], $7::text[], $8::int8[], $9::text[], $10::int4[]) AS u"
        ))
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
        .execute(&self.pool)
        .await
        .map_err(|e| op(Entity::Artifact, Some(constraint::ARTIFACTS_SESSION_FK)).err(e))?;
        Ok(new.into_iter().map(|n| n.stored_at(created_at)).collect())
    }

    async fn get_artifacts(&self, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let uuids: Vec<Uuid> = ids.iter().map(ArtifactId::as_uuid).collect();
        let rows: Vec<ArtifactRow> = sqlx::query_as(concat!(
            "SELECT ",
            artifact_columns!(),
            " FROM artifacts WHERE id = ANY($1)"
        ))
        .bind(&uuids)
        .fetch_all(&self.pool)
        .await
        .map_err(backend(BACKEND))?;
        rows::in_request_order(ids, rows::all(BACKEND, rows, ArtifactRow::into_model)?)
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

/// A [`TurnLog`] on PostgreSQL: one `turn_logs` row per log, one
/// `turn_events` row per event, both holding the exact JSON text.
///
/// `append` is one statement (so one transaction) that numbers the events
/// contiguously after the stored ones; once it returns, the events are
/// committed, so `flush` and `close` have nothing left to do. The single
/// writer per log is enforced per `PgLog` value (clones share it) with
/// [`Writers`]. `stat` reads only the log's row: the revision is the event
/// count, and `size_bytes` is the length of the exported JSONL.
#[derive(Debug, Clone)]
pub struct PgLog {
    pool: PgPool,
    writers: Writers,
}

impl PgLog {
    /// A turn-log service over `pool` (migrated with [`migrate`](crate::migrate)).
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            writers: Writers::new(),
        }
    }

    /// The pool, e.g. to share it with a [`PgStore`].
    pub fn pool(&self) -> &PgPool {
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
        let io = Arc::new(PgLogIo {
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
impl TurnLog for PgLog {
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
struct PgLogIo {
    pool: PgPool,
    id: LogId,
}

#[async_trait]
impl LogIo for PgLogIo {
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
        // One statement: bump the count under the log row's lock (so even
        // writers in other processes cannot interleave) and insert the events
        // numbered after the stored ones.
        let appended = sqlx::query(
            "WITH l AS ( \
                 UPDATE turn_logs SET event_count = event_count + $3, size_bytes = size_bytes + $4 \
                 WHERE id = $1 RETURNING event_count - $3 AS start \
             ) \
             INSERT INTO turn_events (log_id, seq, body) \
             SELECT $1, l.start + e.ord - 1, e.body \
             FROM l, UNNEST($2::text[]) WITH ORDINALITY AS e(body, ord)",
        )
        .bind(self.id.as_uuid())
        .bind(&bodies)
        .bind(i64::try_from(bodies.len()).unwrap_or(i64::MAX))
        .bind(bytes)
        .execute(&self.pool)
        .await
        .map_err(log_backend(BACKEND))?;
        if appended.rows_affected() == 0 {
            return Err(LogError::NotFound { id: self.id });
        }
        Ok(())
    }

    async fn flush(&self) -> korvus_log::Result<()> {
        // Every append is committed before it returns.
        Ok(())
    }

    async fn close(&self) -> korvus_log::Result<()> {
        Ok(())
    }
}
