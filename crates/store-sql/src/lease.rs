//! Settling, leases and takeover, written once for both engines by
//! [`sql_lease!`]: the [`Coordination`](korvus_store::Coordination) impl
//! (cancel requests, heartbeat, expired leases, takeover, settle with
//! report, forced cancel) and the inherent methods behind it and behind
//! [`Store::settle_session`](korvus_store::Store::settle_session) and
//! [`Store::continue_session`](korvus_store::Store::continue_session),
//! which [`sql_store!`](crate::store::sql_store) delegates to.
//!
//! Every lease expiry is written and compared by the statements themselves
//! from the database clock ([`NOW_MS`](crate::dialect::StoreDialect::NOW_MS)),
//! so the clocks of the replicas never matter. A lease expires when its
//! expiry is not after the database's now: a ttl of zero is expired at
//! once, which tests use to make an orphan without waiting.

/// Writes the lease methods of `$store`, whose pool's connections are
/// `$conn`; see the module docs.
macro_rules! sql_lease {
    ($store:ident, $conn:ty) => {
        const _: () = {
            use std::sync::LazyLock;

            use korvus_store::{
                constraint, exit_reason, validate, Coordination, Entity, Lease, NewReport, Report,
                Result, Session, SessionId, SessionStatus, Settlement, Store, StoreError,
            };

            use $crate::completed::Completed as _;
            use $crate::dialect::StoreDialect;
            use $crate::error::backend;
            use $crate::rows::{self, to_i32, to_i64, ReportRow, SessionRow};
            use $crate::sql::{
                BUMP_FENCE, CANCEL_REQUESTS, INSERT_REPORT_IF_ABSENT, MARK_STARTED, REQUEST_CANCEL,
                SELECT_REPORT, SESSION_EXISTS, SETTLE,
            };
            use $crate::transition::{self, Statements, Transition};

            static STATEMENTS: LazyLock<Statements> = LazyLock::new(|| {
                Statements::new(&transition::Dialect {
                    now: <$store as StoreDialect>::NOW_MS,
                    run_key: <$store as StoreDialect>::RUN_KEY,
                    texts_4: <$store as StoreDialect>::JSON_TEXTS_4,
                    share: <$store as StoreDialect>::SHARE_LOCK,
                    incident_text: <$store as StoreDialect>::INCIDENT_TEXT,
                    skip_locked: <$store as StoreDialect>::SKIP_LOCKED,
                    writes_in_with: <$store as StoreDialect>::WRITES_IN_WITH,
                })
            });

            impl $store {
                /// This engine's statements built from its dialect.
                pub(crate) fn statements() -> &'static Statements {
                    &STATEMENTS
                }

                /// Runs one conditional transition (see [`Transition`]);
                /// a run it starts is owned under `lease`.
                pub(crate) async fn transition(
                    &self,
                    id: SessionId,
                    t: Transition,
                    lease: Option<Lease>,
                ) -> Result<Session> {
                    let running = SessionStatus::Running.as_str();
                    let q = sqlx::query_as::<_, SessionRow>(t.statement(Self::statements()))
                        .bind(id.as_uuid());
                    let owner = lease.map(|l| l.owner.as_uuid());
                    let ttl = lease.map(|l| l.ttl_millis());
                    let q = match t {
                        Transition::Reopen => SessionStatus::TERMINAL
                            .iter()
                            .fold(q.bind(running).bind(owner).bind(ttl), |q, s| {
                                q.bind(s.as_str())
                            }),
                        Transition::CancelIdle => q
                            .bind(SessionStatus::Cancelled.as_str())
                            .bind(exit_reason::CANCELLED)
                            .bind(rows::now())
                            .bind(running),
                        Transition::ResumeIdle => q.bind(running).bind(owner).bind(ttl),
                    };
                    let row = q
                        .fetch_optional_completed(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if let Some(row) = row {
                        return row.into_model(Self::BACKEND);
                    }
                    // Failure path only: tell an unknown session from one
                    // the condition refused.
                    let exists = sqlx::query_scalar::<_, i32>(SESSION_EXISTS)
                        .bind(id.as_uuid())
                        .fetch_optional_completed(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    Err(match exists {
                        Some(_) => t.refused(id),
                        None => StoreError::not_found(Entity::Session, id),
                    })
                }

                /// The settle statement on `conn`; `None` when it matched
                /// no row (unknown session or stale fence).
                async fn settle_on(
                    conn: &mut $conn,
                    id: SessionId,
                    s: &Settlement,
                ) -> Result<Option<Session>> {
                    let ended_at = s.status.is_terminal().then(rows::now);
                    let c = s.counters;
                    let row: Option<SessionRow> = sqlx::query_as(SETTLE)
                        .bind(id.as_uuid())
                        .bind(s.status.as_str())
                        .bind(s.exit_reason.as_deref())
                        .bind(to_i64(c.turns))
                        .bind(to_i64(c.tool_calls))
                        .bind(to_i64(c.input_tokens))
                        .bind(to_i64(c.output_tokens))
                        .bind(ended_at)
                        .bind(to_i64(s.fence))
                        .fetch_optional_completed(&mut *conn)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    row.map(|r| r.into_model(Self::BACKEND)).transpose()
                }

                /// Why a settlement at `settlement.fence` matched nothing,
                /// from the row as it is now: `Ok(row)` when the row holds
                /// exactly that settlement (a retry whose first attempt
                /// committed), else `NotFound`, `Fenced` or `NotActive`.
                async fn settle_refused(
                    &self,
                    id: SessionId,
                    settlement: &Settlement,
                ) -> Result<Session> {
                    let now = self.get_session(id).await?;
                    if now.holds(settlement) {
                        return Ok(now);
                    }
                    Err(now
                        .refusal(settlement.fence)
                        .unwrap_or_else(|| StoreError::Conflict {
                            entity: Entity::Session,
                            detail: format!("session {id} changed while it was settled; try again"),
                        }))
                }

                pub(crate) async fn settle_row(
                    &self,
                    id: SessionId,
                    settlement: Settlement,
                ) -> Result<Session> {
                    validate::settlement(&settlement)?;
                    let mut conn = self.pool.acquire().await.map_err(backend(Self::BACKEND))?;
                    match Self::settle_on(&mut conn, id, &settlement).await? {
                        Some(session) => Ok(session),
                        None => {
                            drop(conn);
                            self.settle_refused(id, &settlement).await
                        }
                    }
                }

                /// Inserts `report` unless its revision has a row, on the
                /// transaction that just settled its session, and returns
                /// the row that stands.
                async fn report_unless_present(tx: &mut $conn, report: &Report) -> Result<Report> {
                    rows::bind_report!(sqlx::query(INSERT_REPORT_IF_ABSENT), report)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| {
                            Self::op(Entity::Report, Some(constraint::REPORTS_SESSION_FK)).err(e)
                        })?;
                    let stands: Option<ReportRow> = sqlx::query_as(SELECT_REPORT)
                        .bind(report.session_id.as_uuid())
                        .bind(to_i32(report.revision))
                        .fetch_optional_completed(&mut *tx)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    // No row: the session is not of the report's incident
                    // (the insert's condition refused); nothing is kept.
                    let stands = stands.ok_or_else(|| StoreError::Constraint {
                        name: constraint::REPORTS_SESSION_FK.to_owned(),
                    })?;
                    stands.into_model(Self::BACKEND)
                }

                pub(crate) async fn force_cancel_row(
                    &self,
                    id: SessionId,
                    fence: u64,
                    detail: String,
                ) -> Result<(Session, Report)> {
                    let err = backend(Self::BACKEND);
                    let mut tx = self.pool.begin().await.map_err(&err)?;
                    let bumped: Option<SessionRow> = sqlx::query_as(BUMP_FENCE)
                        .bind(id.as_uuid())
                        .bind(to_i64(fence))
                        .fetch_optional_completed(&mut *tx)
                        .await
                        .map_err(&err)?;
                    let Some(bumped) = bumped else {
                        // Rolled back now, not when the connection is next used: its
                        // locks must be gone before the next step looks again.
                        let _ = tx.rollback().await;
                        let now = self.get_session(id).await?;
                        return Err(now.refusal(fence).unwrap_or_else(|| StoreError::Conflict {
                            entity: Entity::Session,
                            detail: format!(
                                "session {id} changed while it was cancelled; try again"
                            ),
                        }));
                    };
                    let bumped = bumped.into_model(Self::BACKEND)?;
                    let (settlement, report) = korvus_store::forced_cancel(&bumped, detail);
                    validate::new_report(&report)?;
                    let report = report.stored_at(rows::now());
                    let Some(session) = Self::settle_on(&mut tx, id, &settlement).await? else {
                        return Err(korvus_store::StoreError::Conflict {
                            entity: Entity::Session,
                            detail: format!(
                                "session {id} changed while it was cancelled; try again"
                            ),
                        });
                    };
                    let stands = Self::report_unless_present(&mut tx, &report).await?;
                    tx.commit().await.map_err(&err)?;
                    Ok((session, stands))
                }

                pub(crate) async fn expired_rows(&self) -> Result<Vec<(SessionId, u64)>> {
                    let rows = sqlx::query_as(&STATEMENTS.expired)
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    transition::pairs(Self::BACKEND, rows)
                }

                pub(crate) async fn take_over_row(
                    &self,
                    id: SessionId,
                    fence: u64,
                    lease: Lease,
                ) -> Result<Session> {
                    let row: Option<SessionRow> = sqlx::query_as(&STATEMENTS.take_over)
                        .bind(id.as_uuid())
                        .bind(to_i64(fence))
                        .bind(lease.owner.as_uuid())
                        .bind(lease.ttl_millis())
                        .fetch_optional_completed(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if let Some(row) = row {
                        return row.into_model(Self::BACKEND);
                    }
                    // Failure path only: why the condition refused.
                    let now = self.get_session(id).await?;
                    Err(if now.fence != fence {
                        StoreError::Fenced {
                            session: id,
                            presented: fence,
                            current: now.fence,
                        }
                    } else {
                        StoreError::NotOrphaned { session: id }
                    })
                }

                pub(crate) async fn settle_with_report_rows(
                    &self,
                    id: SessionId,
                    settlement: Settlement,
                    new: NewReport,
                ) -> Result<(Session, Report)> {
                    validate::settlement(&settlement)?;
                    validate::new_report(&new)?;
                    validate::report_of_settlement(id, &settlement, &new)?;
                    let report = new.stored_at(rows::now());
                    let err = backend(Self::BACKEND);
                    let mut tx = self.pool.begin().await.map_err(&err)?;
                    // The settle first: it takes the row's write lock and
                    // checks the fence before the report is looked at.
                    let Some(session) = Self::settle_on(&mut tx, id, &settlement).await? else {
                        // Rolled back now, not when the connection is next used: its
                        // locks must be gone before the next step looks again.
                        let _ = tx.rollback().await;
                        let now = self.settle_refused(id, &settlement).await?;
                        // A retry whose first attempt committed.
                        let stands = self.get_report(id, report.revision).await?;
                        return Ok((now, stands));
                    };
                    let stands = Self::report_unless_present(&mut tx, &report).await?;
                    tx.commit().await.map_err(&err)?;
                    Ok((session, stands))
                }
            }

            $crate::heartbeat::heartbeat_rows!($store);
            $crate::salvage::salvage_rows!($store, $conn);
            $crate::resume::resume_rows!($store);

            #[async_trait::async_trait]
            impl Coordination for $store {
                async fn claim_next(
                    &self,
                    pool: &str,
                    per_key: Option<u32>,
                    lease: Lease,
                ) -> Result<Option<Session>> {
                    let row: Option<SessionRow> = match per_key {
                        None => sqlx::query_as(&STATEMENTS.claim_next)
                            .bind(pool)
                            .bind(lease.owner.as_uuid())
                            .bind(lease.ttl_millis())
                            .fetch_optional_completed(&self.pool)
                            .await
                            .map_err(backend(Self::BACKEND))?,
                        Some(cap) => self.claim_capped(pool, cap, lease).await?,
                    };
                    let Some(claimed) = row.map(|r| r.into_model(Self::BACKEND)).transpose()?
                    else {
                        return Ok(None);
                    };
                    // The key's turn is taken: fairness only, so a failure
                    // here is logged and the claim stands.
                    let key = claimed.admission.queue_key.clone().unwrap_or_else(|| {
                        <$store as StoreDialect>::incident_key(claimed.incident_id)
                    });
                    if let Err(e) = sqlx::query(&STATEMENTS.stamp_key)
                        .bind(pool)
                        .bind(&key)
                        .execute(&self.pool)
                        .await
                    {
                        tracing::warn!(error = %e, pool, key, "the claimed key's turn was not recorded");
                    }
                    Ok(Some(claimed))
                }

                async fn mark_started(&self, id: SessionId, fence: u64) -> Result<Session> {
                    let row: Option<SessionRow> = sqlx::query_as(MARK_STARTED)
                        .bind(id.as_uuid())
                        .bind(to_i64(fence))
                        .bind(rows::now())
                        .fetch_optional_completed(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if let Some(row) = row {
                        return row.into_model(Self::BACKEND);
                    }
                    // Failure path only: why the condition refused.
                    let now = self.get_session(id).await?;
                    Err(now.refusal(fence).unwrap_or_else(|| StoreError::Conflict {
                        entity: Entity::Session,
                        detail: format!("session {id} changed while its start was recorded"),
                    }))
                }

                async fn release(&self, id: SessionId, fence: u64) -> Result<Session> {
                    let row: Option<SessionRow> = sqlx::query_as(&STATEMENTS.release)
                        .bind(id.as_uuid())
                        .bind(to_i64(fence))
                        .fetch_optional_completed(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if let Some(row) = row {
                        return row.into_model(Self::BACKEND);
                    }
                    // Failure path only: why the condition refused.
                    let now = self.get_session(id).await?;
                    Err(now
                        .refusal(fence)
                        .unwrap_or(StoreError::AlreadyStarted { session: id }))
                }

                async fn release_for_resume(
                    &self,
                    id: SessionId,
                    fence: u64,
                    backoff: std::time::Duration,
                ) -> Result<Session> {
                    self.release_for_resume_row(id, fence, backoff).await
                }

                async fn queue_depth(
                    &self,
                    pool: &str,
                    queue_key: Option<&str>,
                    incident: korvus_store::IncidentId,
                ) -> Result<korvus_store::QueueDepth> {
                    let key = queue_key.map_or_else(
                        || <$store as StoreDialect>::incident_key(incident),
                        str::to_owned,
                    );
                    let (pool_n, key_n): (i64, i64) = sqlx::query_as(&STATEMENTS.queue_depth)
                        .bind(pool)
                        .bind(key)
                        .fetch_one_completed(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    let mut depth = korvus_store::QueueDepth::default();
                    depth.pool = u64::try_from(pool_n).unwrap_or(0);
                    depth.key = u64::try_from(key_n).unwrap_or(0);
                    Ok(depth)
                }

                async fn queue_position(&self, id: SessionId) -> Result<Option<u64>> {
                    self.queue_position_row(id).await
                }

                async fn request_cancel(&self, id: SessionId) -> Result<Session> {
                    let row: Option<SessionRow> = sqlx::query_as(REQUEST_CANCEL)
                        .bind(id.as_uuid())
                        .bind(SessionStatus::Running.as_str())
                        .fetch_optional_completed(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    match row {
                        Some(row) => row.into_model(Self::BACKEND),
                        // Terminal (or unknown): nothing to cancel.
                        None => self.get_session(id).await,
                    }
                }

                async fn cancel_requests(&self) -> Result<Vec<(SessionId, u64)>> {
                    let rows = sqlx::query_as(CANCEL_REQUESTS)
                        .bind(SessionStatus::Running.as_str())
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    transition::pairs(Self::BACKEND, rows)
                }

                fn cancel_signal(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
                    self.cancel_listener()
                }

                fn queue_signal(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
                    self.queue_listener()
                }

                async fn heartbeat(
                    &self,
                    lease: Lease,
                    runs: &[(SessionId, u64)],
                ) -> Result<Vec<(SessionId, u64)>> {
                    self.heartbeat_rows(lease, runs).await
                }

                async fn expired_leases(&self) -> Result<Vec<(SessionId, u64)>> {
                    self.expired_rows().await
                }

                async fn take_over(
                    &self,
                    id: SessionId,
                    fence: u64,
                    lease: Lease,
                ) -> Result<Session> {
                    self.take_over_row(id, fence, lease).await
                }

                async fn settle_with_report(
                    &self,
                    id: SessionId,
                    settlement: Settlement,
                    report: NewReport,
                ) -> Result<(Session, Report)> {
                    self.settle_with_report_rows(id, settlement, report).await
                }

                async fn attach_kept_output(
                    &self,
                    id: SessionId,
                    fence: u64,
                    kept: korvus_store::KeptOutput,
                ) -> Result<(Session, Report)> {
                    self.attach_kept_rows(id, fence, kept).await
                }

                async fn force_cancel(
                    &self,
                    id: SessionId,
                    fence: u64,
                    detail: String,
                ) -> Result<(Session, Report)> {
                    self.force_cancel_row(id, fence, detail).await
                }
            }
        };
    };
}

pub(crate) use sql_lease;
