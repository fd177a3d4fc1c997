//! The [`Store`](korvus_store::Store) both engines share: [`sql_store!`]
//! writes the store type and its `Store` impl once, calling the
//! [`StoreDialect`] each engine supplies itself.
//!
//! PostgreSQL and SQLite agree on most statements: the same tables and
//! columns, `$n` placeholders, `RETURNING`, and one set of row structs
//! ([`rows`](crate::rows)). What they do differently — allocating a
//! session's `seq`, numbering context refs, inserting a batch of artifacts,
//! fetching many artifacts by id — is a [`StoreDialect`] method or constant,
//! implemented in `postgres.rs` and `sqlite.rs`. Validation, binds, error
//! mapping and row conversion are written here once; the statements
//! themselves are named constants in [`sql`](crate::sql), rendered for
//! reading to `sql/postgres.sql` and `sql/sqlite.sql`.
//!
//! [`sql_store!`] is a macro, not code generic over `sqlx::Database`,
//! whose `Encode`/`Type`/`FromRow` bounds would be repeated on every impl:
//! expanded once per engine, the shared code is plain sqlx calls.

#[cfg(doc)]
use crate::dialect::StoreDialect;

/// Defines a SQL store type over one engine's pool and implements
/// [`Store`](korvus_store::Store) for it with the statements both engines
/// share; the type must also implement [`StoreDialect`] (in the engine's
/// module).
///
/// `sql_store! { /// docs… pub struct PgStore(PgPool) beside PgLog; }`
/// defines `PgStore` with `new` and `pool`; `PgLog` is only named in the
/// docs of `pool`, as the turn log that shares the pool.
macro_rules! sql_store {
    (
        $(#[$attr:meta])*
        pub struct $store:ident($pool:ty) beside $log:ident;
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone)]
        pub struct $store {
            pool: $pool,
        }

        impl $store {
            /// A store over `pool`.
            pub fn new(pool: $pool) -> Self {
                Self { pool }
            }

            #[doc = concat!("The pool, e.g. to share it with a [`", stringify!($log), "`].")]
            pub fn pool(&self) -> &$pool {
                &self.pool
            }
        }

        // A scope of its own, so the shared code names what it uses here and
        // not in each engine module.
        const _: () = {
            use korvus_store::{
                constraint, validate, Artifact, ArtifactId, ContextRef, ContinueFrom, Entity, Incident,
                IncidentId, IncidentStatus, Lease, NewArtifact, NewIncident, NewReport, NewSession,
                Page, Paged, Report, Result, Session, SessionContextRef, SessionId, SessionStatus, Settlement,
                Store, StoreError,
            };

            use $crate::completed::Completed as _;
            use $crate::dialect::StoreDialect;
            use $crate::error::{backend, unexpected};
            use $crate::rows::{self, ArtifactRow, ContextRefRow, IncidentRow, ReportRow, SessionRow};
            use $crate::sql;
            use $crate::transition::Transition;

            impl $store {
                async fn session_row(&self, id: SessionId) -> Result<Session> {
                    let row: Option<SessionRow> = sqlx::query_as(sql::SELECT_SESSION)
                    .bind(id.as_uuid())
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    row.ok_or_else(|| StoreError::not_found(Entity::Session, id))?
                        .into_model(Self::BACKEND)
                }

                /// `delete_session` in one transaction: the guard, the
                /// inheritance check, then the rows children first.
                async fn delete_session_rows(&self, id: SessionId, fence: u64) -> Result<()> {
                    let mut tx = self.pool.begin().await.map_err(backend(Self::BACKEND))?;
                    let guarded = sqlx::query(sql::GUARD_DELETION)
                        .bind(id.as_uuid())
                        .bind(rows::to_i64(fence))
                        .execute(&mut *tx)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if guarded.rows_affected() == 0 {
                        // Rolled back now, not when the connection is next used: its
                        // locks must be gone before the next step looks again.
                        let _ = tx.rollback().await;
                        let row = self.session_row(id).await?;
                        return Err(row
                            .deletion_refusal(fence)
                            .unwrap_or(StoreError::NotFinished { session: id }));
                    }
                    let inherited: Option<i32> = sqlx::query_scalar(sql::INHERITED_ARTIFACT)
                        .bind(id.as_uuid())
                        .fetch_optional_completed(&mut *tx)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if inherited.is_some() {
                        return Err(StoreError::Constraint {
                            name: constraint::CONTEXT_REFS_ARTIFACT_FK.to_owned(),
                        });
                    }
                    for statement in [
                        sql::DELETE_SESSION_REFS,
                        sql::DELETE_SESSION_REPORTS,
                        sql::DELETE_SESSION_ARTIFACTS,
                        sql::DELETE_SESSION_EVENTS,
                        sql::DELETE_SESSION_BUDGET,
                        sql::DELETE_SESSION,
                    ] {
                        sqlx::query(statement)
                            .bind(id.as_uuid())
                            .execute(&mut *tx)
                            .await
                            .map_err(|e| {
                                Self::op(Entity::Session, Some(constraint::CONTEXT_REFS_ARTIFACT_FK)).err(e)
                            })?;
                    }
                    tx.commit().await.map_err(backend(Self::BACKEND))
                }

            }

            #[async_trait::async_trait]
            impl Store for $store {
                async fn create_incident(&self, new: NewIncident) -> Result<Incident> {
                    validate::new_incident(&new)?;
                    let incident = Incident {
                        id: IncidentId::new(),
                        title: new.title,
                        status: IncidentStatus::Open,
                        workspace: new.workspace,
                        created_at: rows::now(),
                    };
                    sqlx::query(sql::INSERT_INCIDENT)
                    .bind(incident.id.as_uuid())
                    .bind(&incident.title)
                    .bind(incident.status.as_str())
                    .bind(incident.workspace.as_ref().map(|w| &w.repo))
                    .bind(incident.workspace.as_ref().map(|w| &w.commit))
                    .bind(incident.created_at)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| Self::op(Entity::Incident, None).err(e))?;
                    Ok(incident)
                }

                async fn get_incident(&self, id: IncidentId) -> Result<Incident> {
                    let row: Option<IncidentRow> = sqlx::query_as(sql::SELECT_INCIDENT)
                    .bind(id.as_uuid())
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    row.ok_or_else(|| StoreError::not_found(Entity::Incident, id))?
                        .into_model(Self::BACKEND)
                }

                async fn list_incidents(&self, page: Page) -> Result<Paged<Incident>> {
                    let rows: Vec<IncidentRow> = sqlx::query_as(sql::LIST_INCIDENTS)
                    .bind(page.after_id()?)
                    .bind(page.fetch())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    let rows = rows::all(Self::BACKEND, rows, IncidentRow::into_model)?;
                    Ok(page.finish(rows, |i| i.id.to_string()))
                }

                async fn close_incident(&self, id: IncidentId) -> Result<Incident> {
                    let row: Option<IncidentRow> = sqlx::query_as(sql::CLOSE_INCIDENT)
                    .bind(id.as_uuid())
                    .bind(IncidentStatus::Closed.as_str())
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    row.ok_or_else(|| StoreError::not_found(Entity::Incident, id))?
                        .into_model(Self::BACKEND)
                }

                async fn create_session(&self, new: NewSession) -> Result<Session> {
                    validate::new_session(&new)?;
                    let created_at = rows::now();
                    let inserted: Option<(i64, Option<i64>)> = sqlx::query_as(Self::INSERT_SESSION)
                        .bind(new.id.as_uuid())
                        .bind(new.incident_id.as_uuid())
                        .bind(SessionStatus::Running.as_str())
                        .bind(&new.prompt)
                        .bind(new.workspace_ref.as_ref().map(|w| &w.repo))
                        .bind(new.workspace_ref.as_ref().map(|w| &w.commit))
                        .bind(created_at)
                        .bind(new.lease.map(|l| l.owner.as_uuid()))
                        .bind(new.lease.map(|l| l.ttl_millis()))
                        .bind(&new.admission.pool)
                        .bind(i16::from(new.admission.priority.get()))
                        .bind(new.admission.queue_key.as_deref())
                        .bind(new.admission.idempotency_key.as_deref())
                        .bind(new.runner.as_deref())
                        .fetch_optional_completed(&self.pool)
                        .await
                        .map_err(|e| {
                            Self::op(Entity::Session, Some(constraint::SESSIONS_INCIDENT_FK)).err(e)
                        })?;
                    let (seq, expires) = inserted.ok_or_else(|| {
                        StoreError::not_found(Entity::Incident, new.incident_id)
                    })?;
                    let seq = u32::try_from(seq)
                        .map_err(|_| unexpected(Self::BACKEND, format!("seq {seq}")))?;
                    Ok(Session {
                        id: new.id,
                        incident_id: new.incident_id,
                        seq,
                        // The statement stored the kind of this seq.
                        kind: korvus_store::SessionKind::for_seq(seq),
                        status: SessionStatus::Running,
                        prompt: new.prompt,
                        workspace_ref: new.workspace_ref,
                        exit_reason: None,
                        counters: Default::default(),
                        fence: 1,
                        cancel_requested: false,
                        owner: new.lease.map(|l| l.owner),
                        lease_expires_at: expires
                            .map(|ms| rows::lease_expiry(Self::BACKEND, ms))
                            .transpose()?,
                        revision: 1,
                        created_at,
                        ended_at: None,
                        started_at: None,
                        attempt: 1,
                        resume_pending: false,
                        resume_after: None,
                        admission: new.admission,
                        runner: new.runner,
                    })
                }

                async fn get_session(&self, id: SessionId) -> Result<Session> {
                    self.session_row(id).await
                }

                async fn session_by_idempotency_key(
                    &self,
                    incident: IncidentId,
                    key: &str,
                ) -> Result<Option<Session>> {
                    let row: Option<SessionRow> =
                        sqlx::query_as(sql::SESSION_BY_IDEMPOTENCY_KEY)
                            .bind(incident.as_uuid())
                            .bind(key)
                            .fetch_optional_completed(&self.pool)
                            .await
                            .map_err(backend(Self::BACKEND))?;
                    row.map(|r| r.into_model(Self::BACKEND)).transpose()
                }

                async fn list_sessions(
                    &self,
                    incident: IncidentId,
                    page: Page,
                ) -> Result<Paged<Session>> {
                    let rows: Vec<SessionRow> = sqlx::query_as(sql::LIST_SESSIONS)
                    .bind(incident.as_uuid())
                    .bind(i64::from(page.after_number()?))
                    .bind(page.fetch())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    let rows = rows::all(Self::BACKEND, rows, SessionRow::into_model)?;
                    Ok(page.finish(rows, |s| s.seq.to_string()))
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
                        // Nothing to insert; the contract still wants
                        // NotFound for an unknown session.
                        self.session_row(session).await?;
                        return Ok(Vec::new());
                    }
                    let rows = self.insert_context_ref_rows(session, refs).await?;
                    if rows.is_empty() {
                        return Err(StoreError::not_found(Entity::Session, session));
                    }
                    let mut stored = rows::all(Self::BACKEND, rows, ContextRefRow::into_model)?;
                    stored.sort_by_key(|r| r.position);
                    Ok(stored)
                }

                async fn list_context_refs(
                    &self,
                    session: SessionId,
                ) -> Result<Vec<SessionContextRef>> {
                    let rows: Vec<ContextRefRow> = sqlx::query_as(sql::LIST_CONTEXT_REFS)
                    .bind(session.as_uuid())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    rows::all(Self::BACKEND, rows, ContextRefRow::into_model)
                }

                async fn settle_session(
                    &self,
                    id: SessionId,
                    settlement: Settlement,
                ) -> Result<Session> {
                    self.settle_row(id, settlement).await
                }

                async fn continue_session(
                    &self,
                    id: SessionId,
                    from: ContinueFrom,
                    lease: Option<Lease>,
                ) -> Result<Session> {
                    let t = match from {
                        ContinueFrom::Terminal => Transition::Reopen,
                        ContinueFrom::Idle => Transition::ResumeIdle,
                    };
                    self.transition(id, t, lease).await
                }

                async fn cancel_idle_session(&self, id: SessionId) -> Result<Session> {
                    self.transition(id, Transition::CancelIdle, None).await
                }

                async fn delete_session(&self, id: SessionId, fence: u64) -> Result<()> {
                    self.delete_session_rows(id, fence).await
                }

                async fn create_report(&self, new: NewReport) -> Result<Report> {
                    validate::new_report(&new)?;
                    let report = new.stored_at(rows::now());
                    let done = rows::bind_report!(sqlx::query(Self::statements().insert_report()), &report)
                    .execute(&self.pool)
                    .await
                    .map_err(|e| {
                        Self::op(Entity::Report, Some(constraint::REPORTS_SESSION_FK)).err(e)
                    })?;
                    if done.rows_affected() == 0 {
                        let found = self.get_session(report.session_id).await.ok();
                        let (inc, fence) = (report.incident_id, report.fence);
                        return Err(rows::fence_refused(found, inc, fence, constraint::REPORTS_SESSION_FK));
                    }
                    Ok(report)
                }

                async fn get_report(&self, session: SessionId, revision: u32) -> Result<Report> {
                    let not_found =
                        || StoreError::not_found(Entity::Report, format!("{session}/{revision}"));
                    // Revisions are written as 32-bit integers: a larger
                    // one is never stored.
                    let Ok(rev) = i32::try_from(revision) else {
                        return Err(not_found());
                    };
                    let row: Option<ReportRow> = sqlx::query_as(sql::SELECT_REPORT)
                    .bind(session.as_uuid())
                    .bind(rev)
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    row.ok_or_else(not_found)?.into_model(Self::BACKEND)
                }

                async fn list_reports(&self, session: SessionId, page: Page) -> Result<Paged<Report>> {
                    let rows: Vec<ReportRow> = sqlx::query_as(sql::LIST_REPORTS)
                    .bind(session.as_uuid())
                    .bind(i64::from(page.after_number()?))
                    .bind(page.fetch())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    let rows = rows::all(Self::BACKEND, rows, ReportRow::into_model)?;
                    Ok(page.finish(rows, |r| r.revision.to_string()))
                }

                async fn next_report_revision(&self, session: SessionId) -> Result<u32> {
                    let next: Option<i64> = sqlx::query_scalar(sql::NEXT_REPORT_REVISION)
                    .bind(session.as_uuid())
                    .fetch_optional_completed(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    let next = next.ok_or_else(|| StoreError::not_found(Entity::Session, session))?;
                    u32::try_from(next).map_err(|_| {
                        unexpected(Self::BACKEND, format!("report revision {next}"))
                    })
                }

                async fn create_artifacts(&self, new: Vec<NewArtifact>) -> Result<Vec<Artifact>> {
                    for n in &new {
                        validate::new_artifact(n)?;
                    }
                    if new.is_empty() {
                        return Ok(Vec::new());
                    }
                    let created_at = rows::now();
                    self.insert_artifact_rows(&new, created_at).await?;
                    Ok(new.into_iter().map(|n| n.stored_at(created_at)).collect())
                }

                async fn replace_checkpoints(
                    &self,
                    session: SessionId,
                    fence: u64,
                    insert: Vec<NewArtifact>,
                    delete: Vec<ArtifactId>,
                ) -> Result<Vec<Artifact>> {
                    self.replace_checkpoint_rows(session, fence, insert, delete).await
                }

                async fn get_artifacts(&self, ids: &[ArtifactId]) -> Result<Vec<Artifact>> {
                    if ids.is_empty() {
                        return Ok(Vec::new());
                    }
                    let rows = self.artifact_rows(ids).await?;
                    let found = rows::all(Self::BACKEND, rows, ArtifactRow::into_model)?;
                    rows::in_request_order(ids, found)
                }

                async fn list_session_artifacts(
                    &self,
                    session: SessionId,
                    page: Page,
                ) -> Result<Paged<Artifact>> {
                    let rows: Vec<ArtifactRow> = sqlx::query_as(sql::LIST_SESSION_ARTIFACTS)
                    .bind(session.as_uuid())
                    .bind(page.after_id()?)
                    .bind(page.fetch())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    let rows = rows::all(Self::BACKEND, rows, ArtifactRow::into_model)?;
                    Ok(page.finish(rows, |a| a.id.to_string()))
                }

                async fn latest_session_artifacts(
                    &self,
                    session: SessionId,
                ) -> Result<Vec<Artifact>> {
                    let rows: Vec<ArtifactRow> = sqlx::query_as(sql::LATEST_SESSION_ARTIFACTS)
                    .bind(session.as_uuid())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    let mut latest = rows::all(Self::BACKEND, rows, ArtifactRow::into_model)?;
                    // By bytes, whatever the database's collation.
                    latest.sort_by(|a, b| a.path.cmp(&b.path).then(a.id.cmp(&b.id)));
                    Ok(latest)
                }

                async fn list_incident_artifacts(
                    &self,
                    incident: IncidentId,
                    page: Page,
                ) -> Result<Paged<Artifact>> {
                    let rows: Vec<ArtifactRow> = sqlx::query_as(sql::LIST_INCIDENT_ARTIFACTS)
                    .bind(incident.as_uuid())
                    .bind(page.after_id()?)
                    .bind(page.fetch())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend(Self::BACKEND))?;
                    let rows = rows::all(Self::BACKEND, rows, ArtifactRow::into_model)?;
                    Ok(page.finish(rows, |a| a.id.to_string()))
                }
            }
        };
    };
}

pub(crate) use sql_store;
