//! The webhook [`Outbox`](korvus_store::Outbox) of both engines, written
//! once by [`sql_outbox!`]. The events themselves are written by a trigger
//! on `sessions` (migration `…_webhook_outbox.sql`), in the transaction of
//! the transition they report; these statements claim, acknowledge and
//! count them, every time judged by the database clock.

/// The outbox statements of one engine, built from its clock and its
/// row-lock clause.
#[derive(Debug)]
pub(crate) struct OutboxStatements {
    /// Claims due events. Binds `$1` claimer, `$2` ttl ms, `$3` limit.
    pub(crate) claim: String,
    /// Marks an event delivered. Binds `$1`..`$4` the key.
    pub(crate) delivered: String,
    /// Gives a failed attempt's claim back. Binds `$1`..`$4` the key, `$5`
    /// claimer, `$6` retry delay ms, `$7` error.
    pub(crate) failed: String,
}

const KEY: &str = "session_id = $1 AND revision = $2 AND fence = $3 AND kind = $4";

impl OutboxStatements {
    pub(crate) fn new(now: &str, skip_locked: &str) -> Self {
        Self {
            claim: format!(
                "UPDATE webhook_outbox SET attempts = attempts + 1, claimed_by = $1, \
                 claim_until_ms = {now} + $2 \
                 WHERE (session_id, revision, fence, kind) IN (\
                 SELECT s.session_id, s.revision, s.fence, s.kind FROM webhook_outbox s \
                 WHERE s.delivered_ms IS NULL AND s.due_ms <= {now} \
                 AND (s.claim_until_ms IS NULL OR s.claim_until_ms <= {now}) \
                 ORDER BY s.created_ms LIMIT $3{skip_locked}) \
                 RETURNING session_id, incident_id, revision, fence, kind, status, exit_reason, \
                 created_ms, attempts"
            ),
            delivered: format!(
                "UPDATE webhook_outbox SET delivered_ms = {now}, claim_until_ms = NULL \
                 WHERE {KEY} AND delivered_ms IS NULL"
            ),
            failed: format!(
                "UPDATE webhook_outbox SET due_ms = {now} + $6, claimed_by = NULL, \
                 claim_until_ms = NULL, last_error = $7 \
                 WHERE {KEY} AND claimed_by = $5 AND delivered_ms IS NULL"
            ),
        }
    }

    /// Every statement, by name: what the SQL snapshot renders.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn all(&self) -> [(&'static str, &str); 3] {
        [
            ("CLAIM_EVENTS", &self.claim),
            ("EVENT_DELIVERED", &self.delivered),
            ("EVENT_FAILED", &self.failed),
        ]
    }
}

/// A claimed event's row: `(session, incident, revision, fence, kind,
/// status, exit reason, created ms, attempts)`.
pub(crate) type EventRow = (
    uuid::Uuid,
    uuid::Uuid,
    i32,
    i64,
    String,
    String,
    Option<String>,
    i64,
    i32,
);

/// The model of a claimed event's row.
pub(crate) fn event(
    backend: &'static str,
    row: EventRow,
) -> Result<korvus_store::OutboxEvent, korvus_store::StoreError> {
    use crate::error::unexpected;
    let (session, incident, revision, fence, kind, status, exit_reason, created_ms, attempts) = row;
    Ok(korvus_store::OutboxEvent {
        key: korvus_store::OutboxKey {
            session_id: korvus_store::SessionId::from_uuid(session),
            revision: u32::try_from(revision)
                .map_err(|_| unexpected(backend, format!("outbox revision {revision}")))?,
            fence: u64::try_from(fence)
                .map_err(|_| unexpected(backend, format!("outbox fence {fence}")))?,
            kind: korvus_store::OutboxKind::parse(&kind)
                .ok_or_else(|| unexpected(backend, format!("outbox kind {kind:?}")))?,
        },
        incident_id: korvus_store::IncidentId::from_uuid(incident),
        status: status
            .parse()
            .map_err(|_| unexpected(backend, format!("outbox status {status:?}")))?,
        exit_reason: exit_reason.map(Into::into),
        occurred_at: chrono::DateTime::from_timestamp_millis(created_ms)
            .ok_or_else(|| unexpected(backend, format!("outbox time {created_ms} ms")))?,
        attempts: u32::try_from(attempts).unwrap_or(0),
    })
}

/// Writes the [`Outbox`](korvus_store::Outbox) impl of `$store`.
macro_rules! sql_outbox {
    ($store:ident) => {
        const _: () = {
            use std::sync::LazyLock;
            use std::time::Duration;

            use korvus_store::{Outbox, OutboxEvent, OutboxKey, OwnerId, Result};

            use $crate::completed::Completed as _;
            use $crate::dialect::StoreDialect;
            use $crate::error::backend;
            use $crate::outbox::{event, EventRow, OutboxStatements};

            static OUTBOX: LazyLock<OutboxStatements> = LazyLock::new(|| {
                OutboxStatements::new(
                    <$store as StoreDialect>::NOW_MS,
                    <$store as StoreDialect>::SKIP_LOCKED,
                )
            });

            impl $store {
                /// This engine's outbox statements.
                #[cfg_attr(not(test), allow(dead_code))]
                pub(crate) fn outbox_statements() -> &'static OutboxStatements {
                    &OUTBOX
                }
            }

            fn millis(d: Duration) -> i64 {
                i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
            }

            #[async_trait::async_trait]
            impl Outbox for $store {
                async fn claim_events(
                    &self,
                    claimer: OwnerId,
                    limit: u32,
                    ttl: Duration,
                ) -> Result<Vec<OutboxEvent>> {
                    let rows: Vec<EventRow> = sqlx::query_as(&OUTBOX.claim)
                        .bind(claimer.as_uuid())
                        .bind(millis(ttl))
                        .bind(i64::from(limit))
                        .fetch_all(self.pool())
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    let mut events = rows
                        .into_iter()
                        .map(|r| event(Self::BACKEND, r))
                        .collect::<Result<Vec<_>>>()?;
                    events.sort_by_key(|e| e.occurred_at);
                    Ok(events)
                }

                async fn mark_delivered(&self, key: OutboxKey) -> Result<()> {
                    sqlx::query(&OUTBOX.delivered)
                        .bind(key.session_id.as_uuid())
                        .bind($crate::rows::to_i32(key.revision))
                        .bind($crate::rows::to_i64(key.fence))
                        .bind(key.kind.as_str())
                        .execute(self.pool())
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    Ok(())
                }

                async fn mark_failed(
                    &self,
                    key: OutboxKey,
                    claimer: OwnerId,
                    retry_in: Duration,
                    error: &str,
                ) -> Result<()> {
                    sqlx::query(&OUTBOX.failed)
                        .bind(key.session_id.as_uuid())
                        .bind($crate::rows::to_i32(key.revision))
                        .bind($crate::rows::to_i64(key.fence))
                        .bind(key.kind.as_str())
                        .bind(claimer.as_uuid())
                        .bind(millis(retry_in))
                        .bind(error)
                        .execute(self.pool())
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    Ok(())
                }

                async fn undelivered(&self) -> Result<u64> {
                    let n: i64 = sqlx::query_scalar($crate::sql::UNDELIVERED_EVENTS)
                        .fetch_one_completed(self.pool())
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    Ok(u64::try_from(n).unwrap_or(0))
                }
            }
        };
    };
}

pub(crate) use sql_outbox;
