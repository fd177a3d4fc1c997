//! The heartbeat's statements: [`Heartbeat`], an owner-level lease.
//!
//! A manager incarnation's lease is **one row** of `owners`, `(id,
//! expires_ms)`, whatever the number of runs it holds. A session row keeps
//! its own `lease_expires_ms` only as the claim's expiry, written once when
//! a run is claimed (create, continue, queue claim, takeover); after that
//! the row is held for as long as its owner's row is live. So a beat
//! writes one row, not one per run — at 10,000 runs that is the difference
//! between rewriting 10,000 session rows (and their index entries, and the
//! WAL for them) every period and rewriting one.
//!
//! What a per-row renewal did for free, the beat now does explicitly: a
//! session its owner holds but no longer lists (its run is gone: it could
//! not write its outcome) is *released* from the owner's lease, once its
//! claim's own expiry has passed (`detached = TRUE`), and becomes an
//! orphan. A listed run that was released is taken back (`detached =
//! FALSE`): a run is never released while its manager names it. Both
//! touch only the rows that change, so in the steady state a beat writes
//! the owner row and nothing else.
//!
//! The beat also forgets owners whose lease expired a day ago. An expired
//! owner and an absent one mean the same to the orphan predicate, so this
//! only keeps the table small; the day keeps `lease_expires_at` of a
//! recent orphan readable.

use crate::built::Dialect;

/// How long after its expiry an owner row is deleted, in milliseconds.
const FORGET_AFTER_MS: i64 = 24 * 60 * 60 * 1000;

/// The heartbeat's statements. Their parameters are numbered alike: `$1`
/// owner, `$2` ttl (ms), `$3` running, `$4` the listed runs as a JSON
/// array of run keys. On SQLite, which runs the steps one by one, every
/// step is given all four (SQLite binds a `$N` by its name and ignores
/// the values a statement does not name).
#[derive(Debug)]
pub(crate) struct Heartbeat {
    /// All four steps in one statement, for an engine that allows writes
    /// in `WITH` (PostgreSQL): `held`'s answer.
    pub(crate) one_statement: Option<String>,
    /// The owner's row, renewed to now + ttl.
    pub(crate) owner: String,
    /// Deletes owners expired a day ago (never `$1`).
    pub(crate) forget: String,
    /// Releases the owner's unlisted rows whose claim expired, and takes
    /// back its listed released ones.
    pub(crate) release: String,
    /// `(id, fence)` of the listed runs the owner holds.
    pub(crate) held: String,
}

impl Heartbeat {
    /// The statements of the engine `dialect` describes.
    pub(crate) fn new(dialect: &Dialect) -> Self {
        let Dialect {
            now,
            run_key,
            texts_4,
            writes_in_with,
            ..
        } = *dialect;
        let owner = format!(
            "INSERT INTO owners (id, expires_ms) VALUES ($1, {now} + $2) \
             ON CONFLICT (id) DO UPDATE SET expires_ms = excluded.expires_ms"
        );
        let forget =
            format!("DELETE FROM owners WHERE expires_ms < {now} - {FORGET_AFTER_MS} AND id <> $1");
        let listed = format!("{run_key} IN ({texts_4})");
        let not_idle = crate::rows::not_idle("");
        let release = format!(
            "UPDATE sessions SET detached = NOT detached \
             WHERE owner = $1 AND status = $3 \
             AND {not_idle} \
             AND ((detached = TRUE AND {listed}) \
                  OR (detached = FALSE AND NOT {listed} AND lease_expires_ms <= {now}))"
        );
        let held =
            format!("SELECT id, fence FROM sessions WHERE owner = $1 AND status = $3 AND {listed}");
        let one_statement = writes_in_with.then(|| {
            format!(
                "WITH beat AS ({owner} RETURNING id), forgot AS ({forget} RETURNING id), \
                 moved AS ({release} RETURNING id) {held}"
            )
        });
        Self {
            one_statement,
            owner,
            forget,
            release,
            held,
        }
    }
}

/// Writes `$store`'s `heartbeat_rows` (the `heartbeat` of the
/// [`Coordination`](korvus_store::Coordination) impl) where
/// [`sql_lease!`](crate::lease::sql_lease) expands, whose imports and
/// `STATEMENTS` it uses.
macro_rules! heartbeat_rows {
    ($store:ident) => {
        impl $store {
            pub(crate) async fn heartbeat_rows(
                &self,
                lease: Lease,
                runs: &[(SessionId, u64)],
            ) -> Result<Vec<(SessionId, u64)>> {
                // Also with no runs: the statement is how the reaper
                // knows this manager reaches the database.
                let beat = &STATEMENTS.heartbeat;
                let keys = transition::run_keys(runs);
                let (owner, ttl) = (lease.owner.as_uuid(), lease.ttl_millis());
                let running = SessionStatus::Running.as_str();
                let err = backend(Self::BACKEND);
                let rows: Vec<(uuid::Uuid, i64)> = if let Some(one) = &beat.one_statement {
                    sqlx::query_as(one)
                        .bind(owner)
                        .bind(ttl)
                        .bind(running)
                        .bind(keys.as_str())
                        .fetch_all(&self.pool)
                        .await
                        .map_err(&err)?
                } else {
                    // The steps in one transaction (SQLite), each given
                    // all four values; the last, `held`, answers.
                    let mut tx = self.pool.begin().await.map_err(&err)?;
                    let mut rows = Vec::new();
                    for step in [&beat.forget, &beat.owner, &beat.release, &beat.held] {
                        rows = sqlx::query_as(step)
                            .bind(owner)
                            .bind(ttl)
                            .bind(running)
                            .bind(keys.as_str())
                            .fetch_all(&mut *tx)
                            .await
                            .map_err(&err)?;
                    }
                    tx.commit().await.map_err(&err)?;
                    rows
                };
                transition::pairs(Self::BACKEND, rows)
            }
        }
    };
}

pub(crate) use heartbeat_rows;
