//! Settling, leases and takeover, written once for both engines by
//! [`sql_lease!`]: the inherent methods behind
//! [`Store::settle_session`](korvus_store::Store::settle_session),
//! [`heartbeat`](korvus_store::Store::heartbeat),
//! [`expired_leases`](korvus_store::Store::expired_leases),
//! [`take_over`](korvus_store::Store::take_over) and
//! [`settle_with_report`](korvus_store::Store::settle_with_report), which
//! [`sql_store!`](crate::store::sql_store) delegates to.
//!
//! Every lease expiry is written and compared by the statements themselves
//! from the database clock ([`NOW_MS`](crate::dialect::StoreDialect::NOW_MS)),
//! so the clocks of the replicas never matter. A lease expires when its
//! expiry is not after the database's now: a ttl of zero is expired at
//! once, which tests use to make an orphan without waiting.

use crate::rows::{report_columns, session_columns};

/// The settle statement: writes the outcome, ends the lease, only at the
/// presented fence. Binds `$1` id, `$2` status, `$3` exit reason, `$4…$7`
/// counters, `$8` `ended_at`, `$9` fence.
pub(crate) const SETTLE: &str = concat!(
    "UPDATE sessions SET status = $2, exit_reason = $3, turns = $4, \
     tool_calls = $5, input_tokens = $6, output_tokens = $7, ended_at = $8, \
     owner = NULL, lease_expires_ms = NULL \
     WHERE id = $1 AND fence = $9 RETURNING ",
    session_columns!()
);

/// `settle_with_report`: the report row unless its revision has one, only
/// while the session (in that incident) is at the report's fence. Binds
/// `$1…$14` in `report_columns` order.
pub(crate) const INSERT_REPORT_IF_ABSENT: &str = concat!(
    "INSERT INTO reports (",
    report_columns!(),
    ") SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 \
     WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND incident_id = $2 AND fence = $12) \
     AND NOT EXISTS (SELECT 1 FROM reports WHERE session_id = $1 AND revision = $3)"
);

/// Writes the lease methods of `$store`, whose pool's connections are
/// `$conn`; see the module docs.
macro_rules! sql_lease {
    ($store:ident, $conn:ty) => {
        const _: () = {
            use std::sync::LazyLock;

            use korvus_store::{
                constraint, exit_reason, validate, Entity, Lease, NewReport, Report, Result,
                Session, SessionId, SessionStatus, Settlement, Store, StoreError,
            };

            use $crate::dialect::StoreDialect;
            use $crate::error::backend;
            use $crate::lease::{INSERT_REPORT_IF_ABSENT, SETTLE};
            use $crate::rows::{self, report_columns, to_i32, to_i64, ReportRow, SessionRow};
            use $crate::transition::{self, Clocked, Transition};

            static CLOCKED: LazyLock<Clocked> = LazyLock::new(|| {
                Clocked::new(
                    <$store as StoreDialect>::NOW_MS,
                    <$store as StoreDialect>::RUN_KEY,
                    <$store as StoreDialect>::JSON_TEXTS_4,
                )
            });

            impl $store {
                /// This engine's statements that read the database clock.
                pub(crate) fn clocked() -> &'static Clocked {
                    &CLOCKED
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
                    let q = sqlx::query_as::<_, SessionRow>(t.statement(Self::clocked()))
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
                            .bind(running)
                            .bind(exit_reason::AWAITING_USER),
                        Transition::ResumeIdle => q
                            .bind(running)
                            .bind(owner)
                            .bind(ttl)
                            .bind(exit_reason::AWAITING_USER),
                    };
                    let row = q
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    if let Some(row) = row {
                        return row.into_model(Self::BACKEND);
                    }
                    // Failure path only: tell an unknown session from one
                    // the condition refused.
                    let exists = sqlx::query("SELECT 1 FROM sessions WHERE id = $1")
                        .bind(id.as_uuid())
                        .fetch_optional(&self.pool)
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
                        .fetch_optional(&mut *conn)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    row.map(|r| r.into_model(Self::BACKEND)).transpose()
                }

                /// The error of a fenced write that matched nothing:
                /// `NotFound` or `Fenced`.
                async fn fenced(&self, id: SessionId, presented: u64) -> StoreError {
                    match self.get_session(id).await {
                        Ok(s) => StoreError::Fenced {
                            session: id,
                            presented,
                            current: s.fence,
                        },
                        Err(e) => e,
                    }
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
                        None => Err(self.fenced(id, settlement.fence).await),
                    }
                }

                pub(crate) async fn heartbeat_rows(
                    &self,
                    lease: Lease,
                    runs: &[(SessionId, u64)],
                ) -> Result<Vec<(SessionId, u64)>> {
                    // Also with no runs: the statement is how the reaper
                    // knows this manager reaches the database.
                    let rows = sqlx::query_as(&CLOCKED.heartbeat)
                        .bind(lease.owner.as_uuid())
                        .bind(lease.ttl_millis())
                        .bind(SessionStatus::Running.as_str())
                        .bind(transition::run_keys(runs))
                        .fetch_all(&self.pool)
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    transition::pairs(Self::BACKEND, rows)
                }

                pub(crate) async fn expired_rows(&self) -> Result<Vec<(SessionId, u64)>> {
                    let rows = sqlx::query_as(&CLOCKED.expired)
                        .bind(SessionStatus::Running.as_str())
                        .bind(korvus_store::exit_reason::AWAITING_USER)
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
                    let row: Option<SessionRow> = sqlx::query_as(&CLOCKED.take_over)
                        .bind(id.as_uuid())
                        .bind(to_i64(fence))
                        .bind(lease.owner.as_uuid())
                        .bind(lease.ttl_millis())
                        .bind(SessionStatus::Running.as_str())
                        .bind(korvus_store::exit_reason::AWAITING_USER)
                        .fetch_optional(&self.pool)
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
                        drop(tx);
                        return Err(self.fenced(id, settlement.fence).await);
                    };
                    rows::bind_report!(sqlx::query(INSERT_REPORT_IF_ABSENT), &report)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| {
                            Self::op(Entity::Report, Some(constraint::REPORTS_SESSION_FK)).err(e)
                        })?;
                    let stands: Option<ReportRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        report_columns!(),
                        " FROM reports WHERE session_id = $1 AND revision = $2"
                    ))
                    .bind(id.as_uuid())
                    .bind(to_i32(report.revision))
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(&err)?;
                    // No row: the session is not of the report's incident
                    // (the insert's condition refused); nothing is kept.
                    let stands = stands.ok_or_else(|| StoreError::Constraint {
                        name: constraint::REPORTS_SESSION_FK.to_owned(),
                    })?;
                    let stands = stands.into_model(Self::BACKEND)?;
                    tx.commit().await.map_err(&err)?;
                    Ok((session, stands))
                }
            }
        };
    };
}

pub(crate) use sql_lease;
