//! What each engine does its own way: [`StoreDialect`] and [`LogDialect`],
//! implemented once in `postgres.rs` and once in `sqlite.rs`.
//!
//! Everything else — validation, the statements both engines run as they
//! are, binds, error mapping, row conversion — is written once by
//! [`sql_store!`](crate::store::sql_store) and [`sql_log!`](crate::log::sql_log),
//! which call these. This is object_store's split of a per-backend request
//! trait and one shared algorithm over it, with the shared half a macro
//! (see [`store`](crate::store) for why).

use chrono::{DateTime, Utc};
use korvus_store::{ArtifactId, ContextRef, Entity, NewArtifact, Result, SessionId};

use crate::error::Op;
use crate::rows::{ArtifactRow, ContextRefRow};
#[cfg(doc)]
use crate::{log::sql_log, store::sql_store};

/// What one engine's [`Store`](korvus_store::Store) does its own way. The
/// code [`sql_store!`] writes calls these only with input it has already
/// validated.
pub(crate) trait StoreDialect {
    /// The `backend` name in this engine's `Backend` errors.
    const BACKEND: &'static str;

    /// The database clock in milliseconds since the Unix epoch, as an SQL
    /// expression: what leases are written and judged by.
    const NOW_MS: &'static str;

    /// A session row's run as text, `<id as 32 lowercase hex digits>:<fence>`,
    /// as an SQL expression over the `sessions` columns: what a heartbeat's
    /// list of runs is matched against.
    const RUN_KEY: &'static str;

    /// The row lock a fenced insert takes on the session row it checks
    /// (appended to that `SELECT`): `" FOR SHARE"` on PostgreSQL, so a
    /// concurrent takeover or forced cancel cannot move the fence between
    /// the check and the commit; empty on SQLite, whose writes run one at
    /// a time.
    const SHARE_LOCK: &'static str;

    /// A session's incident id as text, for the queue key of a row without
    /// one; `{t}` stands for the table's alias.
    const INCIDENT_TEXT: &'static str;

    /// The queue key of a session without a queue key of its own, its
    /// incident `id`, as [`INCIDENT_TEXT`](StoreDialect::INCIDENT_TEXT)
    /// writes it.
    fn incident_key(id: korvus_store::IncidentId) -> String;

    /// The row lock a queue claim takes on the row it picks (appended to
    /// that `SELECT`, whose queued row is aliased `s`): `" FOR UPDATE OF s
    /// SKIP LOCKED"` on PostgreSQL, so
    /// concurrent claims take different rows instead of queueing on one;
    /// empty on SQLite, whose writes run one at a time.
    const SKIP_LOCKED: &'static str;

    /// Whether a `WITH` may hold writes (`INSERT`, `UPDATE`, `DELETE …
    /// RETURNING`): PostgreSQL's heartbeat is then one statement; SQLite
    /// runs its steps in one transaction.
    const WRITES_IN_WITH: bool;

    /// A subquery of the texts in the JSON array bound as `$4`.
    const JSON_TEXTS_4: &'static str;

    /// The `INSERT` of a new session that allocates its `seq` (the incident's
    /// next number) inside the same statement, so concurrent creates cannot
    /// take the same one. Binds `$1` id, `$2` incident id, `$3` kind, `$4`
    /// status, `$5` prompt, `$6` workspace repo, `$7` workspace commit,
    /// `$8` creation time, `$9` owner and `$10` lease ttl in ms (both NULL
    /// for none: the row is queued), `$11` pool, `$12` priority, `$13`
    /// queue key, `$14` idempotency key; returns the `seq` and the lease
    /// expiry, or no row when the incident does not exist.
    const INSERT_SESSION: &'static str;

    /// Inserts `refs` (at least one), numbered after the session's stored
    /// refs in request order, all or none. Returns the stored rows in any
    /// order, or none when the session does not exist.
    async fn insert_context_ref_rows(
        &self,
        session: SessionId,
        refs: &[ContextRef],
    ) -> Result<Vec<ContextRefRow>>;

    /// Inserts `new` (at least one) stamped `created_at`, all or none.
    async fn insert_artifact_rows(
        &self,
        new: &[NewArtifact],
        created_at: DateTime<Utc>,
    ) -> Result<()>;

    /// The rows of those of `ids` (at least one) that exist, in any order.
    async fn artifact_rows(&self, ids: &[ArtifactId]) -> Result<Vec<ArtifactRow>>;

    /// [`Coordination::claim_next`](korvus_store::Coordination::claim_next)
    /// with a per-key cap of `cap` runs in progress, exact across
    /// concurrent claimers: the claimed row, or none when nothing queued
    /// in `pool` may start.
    async fn claim_capped(
        &self,
        pool: &str,
        cap: u32,
        lease: korvus_store::Lease,
    ) -> Result<Option<crate::rows::SessionRow>>;

    /// [`Coordination::cancel_signal`](korvus_store::Coordination::cancel_signal): a
    /// `Notify` fed by the engine's notifications of new cancel requests,
    /// or `None` for an engine without them.
    fn cancel_listener(&self) -> Option<std::sync::Arc<tokio::sync::Notify>>;

    /// [`Coordination::queue_signal`](korvus_store::Coordination::queue_signal):
    /// a `Notify` fed by the engine's notifications that work for the
    /// queue appeared, or `None` for an engine without them.
    fn queue_listener(&self) -> Option<std::sync::Arc<tokio::sync::Notify>>;

    /// How a failing write about `entity` is reported (see [`Op`]).
    fn op(entity: Entity, foreign_key: Option<&'static str>) -> Op {
        Op {
            backend: Self::BACKEND,
            entity,
            foreign_key,
        }
    }
}

/// What one engine's turn log does its own way: implemented by the per-log
/// I/O type [`sql_log!`] defines, which has the fields `pool` and `id`.
pub(crate) trait LogDialect {
    /// The `backend` name in this engine's `Backend` errors.
    const BACKEND: &'static str;

    /// Appends `bodies` (the events' JSON texts, at least one) to this log in
    /// one transaction, numbered from `at`, with `bytes` added to the log's
    /// size — only when the log holds exactly `at` events and its newest
    /// writer epoch is not newer than `epoch`, both checked under the log
    /// row's lock so writers in other processes cannot interleave; a stored
    /// append records `epoch` as the log's newest. Returns
    /// `None` when stored, or the count the log held instead (then nothing
    /// was stored); `Fenced` when a newer epoch claimed the log; `NotFound`
    /// when the log does not exist.
    async fn append_bodies(
        &self,
        at: u64,
        bodies: &[String],
        bytes: i64,
        epoch: u64,
    ) -> korvus_log::Result<Option<i64>>;
}
