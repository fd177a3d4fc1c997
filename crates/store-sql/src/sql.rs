//! The statements both engines run as they are, each a named constant in
//! one place, grouped by table, with the binds it takes.
//!
//! What differs per engine — the session insert that allocates `seq`, the
//! statements that read the database clock, the batch inserts — is built
//! in `postgres.rs`, `sqlite.rs` and [`transition`](crate::transition)
//! from the engine's [`StoreDialect`](crate::dialect::StoreDialect). A test
//! renders every statement of each engine, these included, to
//! `sql/postgres.sql` and `sql/sqlite.sql` and fails when the checked-in
//! files differ (`KORVUS_UPDATE_SQL=1` rewrites them), so a change to a
//! statement shows up in review as SQL.

use crate::rows::{
    active, artifact_columns, context_ref_columns, incident_columns, report_columns,
    session_columns,
};

/// Defines each statement as a `pub(crate) const` and lists them all in
/// the constant named first (`statements! { SHARED; … }`), so no statement
/// defined this way can be left out of the snapshot. The engine modules
/// use it for their own statements.
macro_rules! statements {
    ($list:ident; $( $(#[$doc:meta])* $name:ident = $sql:expr; )*) => {
        $( $(#[$doc])* pub(crate) const $name: &str = $sql; )*

        /// Every statement defined with it, by name, in definition order.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) const $list: &[(&str, &str)] = &[$((stringify!($name), $name)),*];
    };
}
pub(crate) use statements;

statements! {
    SHARED;

    // Incidents.

    /// `create_incident`. Binds `$1` id, `$2` title, `$3` status, `$4`
    /// workspace repo, `$5` workspace commit, `$6` created at.
    INSERT_INCIDENT = "INSERT INTO incidents \
        (id, title, status, workspace_repo, workspace_commit, created_at) \
        VALUES ($1, $2, $3, $4, $5, $6)";

    /// `get_incident`. Binds `$1` id.
    SELECT_INCIDENT = concat!("SELECT ", incident_columns!(), " FROM incidents WHERE id = $1");

    /// `list_incidents`, one page: ids are UUID v7, which both engines
    /// order bytewise (PostgreSQL as uuid, SQLite as a BLOB), so id order is
    /// roughly creation order. Binds `$1` the id after which the page
    /// starts (the nil UUID first), `$2` the limit + 1.
    LIST_INCIDENTS = concat!(
        "SELECT ",
        incident_columns!(),
        " FROM incidents WHERE id > $1 ORDER BY id LIMIT $2"
    );

    /// `close_incident`. Binds `$1` id, `$2` closed.
    CLOSE_INCIDENT = concat!(
        "UPDATE incidents SET status = $2 WHERE id = $1 RETURNING ",
        incident_columns!()
    );

    // Sessions.

    /// One session row. Binds `$1` id.
    SELECT_SESSION = concat!("SELECT ", session_columns!(), " FROM sessions WHERE id = $1");

    /// The session of an incident with an idempotency key. Binds `$1`
    /// incident, `$2` key.
    SESSION_BY_IDEMPOTENCY_KEY = concat!(
        "SELECT ",
        session_columns!(),
        " FROM sessions WHERE incident_id = $1 AND idempotency_key = $2"
    );

    /// Whether a session exists (a refused transition's second read).
    /// Binds `$1` id.
    SESSION_EXISTS = "SELECT 1 FROM sessions WHERE id = $1";

    /// `list_sessions`, one page. Binds `$1` incident, `$2` the seq after
    /// which the page starts (0 first), `$3` the rows to fetch (the
    /// limit + 1).
    LIST_SESSIONS = concat!(
        "SELECT ",
        session_columns!(),
        " FROM sessions WHERE incident_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
    );

    /// The settle: writes the outcome and ends the lease, only while the
    /// row is active at the presented fence. Binds `$1` id, `$2` status,
    /// `$3` exit reason, `$4…$7` counters, `$8` `ended_at`, `$9` fence.
    SETTLE = concat!(
        "UPDATE sessions SET status = $2, exit_reason = $3, turns = $4, \
         tool_calls = $5, input_tokens = $6, output_tokens = $7, ended_at = $8, \
         owner = NULL, lease_expires_ms = NULL \
         WHERE id = $1 AND fence = $9 AND ",
        active!(),
        " RETURNING ",
        session_columns!()
    );

    /// `cancel_idle_session`: an idle session (running, exit reason
    /// `awaiting_user` or `budget_reached`) becomes cancelled. Binds `$1`
    /// id, `$2` cancelled, `$3` the exit reason `cancelled`, `$4`
    /// `ended_at`, `$5` running.
    CANCEL_IDLE = concat!(
        "UPDATE sessions SET status = $2, exit_reason = $3, ended_at = $4 \
         WHERE id = $1 AND status = $5 AND exit_reason IN ",
        crate::rows::idle_reasons!(),
        " RETURNING ",
        session_columns!()
    );

    /// `force_cancel`'s first step: the active row at `$2` (fence) gets
    /// the next fence, so every write of its run is refused from here on;
    /// the settle then ends it at the new fence. Binds `$1` id, `$2` fence.
    BUMP_FENCE = concat!(
        "UPDATE sessions SET fence = fence + 1 WHERE id = $1 AND fence = $2 AND ",
        active!(),
        " RETURNING ",
        session_columns!()
    );

    /// `attach_kept_output`'s first step: a settled row (not active) at
    /// `$2` (fence) that has reached revision `$3` gets the next fence.
    /// Binds `$1` id, `$2` fence, `$3` revision.
    SALVAGE_FENCE = concat!(
        "UPDATE sessions SET fence = fence + 1 WHERE id = $1 AND fence = $2 AND revision >= $3 \
         AND NOT (",
        active!(),
        ") RETURNING ",
        session_columns!()
    );

    /// `attach_kept_output`: the revision's report row takes the salvage
    /// (its document only when it had none). Binds `$1` session, `$2`
    /// revision, `$3` document key, `$4` document bytes, `$5` manifest key,
    /// `$6` salvaged from, `$7` detail, `$8` fence.
    SALVAGE_REPORT = "UPDATE reports SET \
        markdown_bytes = CASE WHEN markdown_key IS NULL THEN $4 ELSE markdown_bytes END, \
        markdown_key = COALESCE(markdown_key, $3), \
        manifest_key = COALESCE($5, manifest_key), \
        salvaged_from = $6, detail = $7, fence = $8 \
        WHERE session_id = $1 AND revision = $2";

    /// `mark_started`: the active row at `$2` (fence) records when its run
    /// started, unless it did. Binds `$1` id, `$2` fence, `$3` now.
    MARK_STARTED = concat!(
        "UPDATE sessions SET started_at = COALESCE(started_at, $3) \
         WHERE id = $1 AND fence = $2 AND ",
        active!(),
        " RETURNING ",
        session_columns!()
    );

    /// `request_cancel`: a running session's row records a cancel request
    /// naming its current fence. Binds `$1` id, `$2` running.
    REQUEST_CANCEL = concat!(
        "UPDATE sessions SET cancel_fence = fence WHERE id = $1 AND status = $2 RETURNING ",
        session_columns!()
    );

    /// `cancel_requests`: `(id, fence)` of the running sessions whose
    /// request names their current fence. Binds `$1` running.
    CANCEL_REQUESTS = "SELECT id, fence FROM sessions \
        WHERE cancel_fence IS NOT NULL AND cancel_fence = fence AND status = $1";

    // Context refs.

    /// `list_context_refs`. Binds `$1` session.
    LIST_CONTEXT_REFS = concat!(
        "SELECT ",
        context_ref_columns!(),
        " FROM session_context_refs WHERE session_id = $1 ORDER BY position"
    );

    // Reports.

    /// `get_report`, and the row that stands after an insert unless
    /// present. Binds `$1` session, `$2` revision.
    SELECT_REPORT = concat!(
        "SELECT ",
        report_columns!(),
        " FROM reports WHERE session_id = $1 AND revision = $2"
    );

    /// `list_reports`, one page. Binds `$1` session, `$2` the revision
    /// after which the page starts (0 first), `$3` the limit + 1.
    LIST_REPORTS = concat!(
        "SELECT ",
        report_columns!(),
        " FROM reports WHERE session_id = $1 AND revision > $2 ORDER BY revision LIMIT $3"
    );

    /// `next_report_revision`, widened before the `+ 1` so the largest
    /// 32-bit revision cannot overflow; no row for an unknown session.
    /// Binds `$1` session.
    NEXT_REPORT_REVISION = "SELECT CAST((SELECT COALESCE(MAX(revision), 0) FROM reports \
        WHERE session_id = $1) AS BIGINT) + 1 FROM sessions WHERE id = $1";

    /// `settle_with_report` and `force_cancel`, after their settle in the
    /// same transaction: the report row unless its revision has one — also
    /// one a concurrent insert committed meanwhile (`ON CONFLICT DO
    /// NOTHING`: the stored row wins, never a `Conflict`) — only while the
    /// session (in that incident) is at the report's fence. Binds `$1…$15`
    /// in `report_columns` order.
    INSERT_REPORT_IF_ABSENT = concat!(
        "INSERT INTO reports (",
        report_columns!(),
        ") SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15 \
         WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND incident_id = $2 AND fence = $12) \
         ON CONFLICT (session_id, revision) DO NOTHING"
    );

    // Artifacts.

    /// `list_session_artifacts`, one page. Binds `$1` session, `$2` the id
    /// after which the page starts (the nil UUID first), `$3` the limit + 1.
    LIST_SESSION_ARTIFACTS = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE session_id = $1 AND id > $2 ORDER BY id LIMIT $3"
    );

    /// `latest_session_artifacts`: the newest row of each kind and path
    /// (greatest revision, then `created_at`, then id), checkpoint rows
    /// left out. Binds `$1` session.
    LATEST_SESSION_ARTIFACTS = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM (SELECT ",
        artifact_columns!(),
        ", ROW_NUMBER() OVER (PARTITION BY kind, path \
         ORDER BY revision DESC, created_at DESC, id DESC) AS newest \
         FROM artifacts WHERE session_id = $1 AND kind <> 'checkpoint') AS latest \
         WHERE newest = 1 ORDER BY path, id"
    );

    /// `list_incident_artifacts`, one page. Binds `$1` incident, `$2` the
    /// id after which the page starts (the nil UUID first), `$3` the
    /// limit + 1.
    LIST_INCIDENT_ARTIFACTS = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE incident_id = $1 AND id > $2 ORDER BY id LIMIT $3"
    );

    // Checkpoints (`replace_checkpoints`, one transaction, in this order).

    /// Takes the session row's lock while it is active at the fence (a
    /// racing reopen or takeover waits for the commit); 0 rows: refused.
    /// Binds `$1` session, `$2` fence.
    GUARD_REPLACEMENT = concat!(
        "UPDATE sessions SET fence = fence WHERE id = $1 AND fence = $2 AND ",
        active!()
    );

    /// Deletes one checkpoint row the run at the fence wrote; 0 rows: the
    /// id names no such row. Binds `$1` artifact, `$2` session, `$3`
    /// fence, `$4` the checkpoint kind.
    DELETE_CHECKPOINT = "DELETE FROM artifacts \
        WHERE id = $1 AND session_id = $2 AND fence = $3 AND kind = $4";

    // Retention (`delete_session`, one transaction, in this order).

    /// Takes the row's lock while it is terminal at the fence (so a
    /// racing reopen waits, then finds no row); 0 rows: refused. Binds
    /// `$1` session, `$2` fence.
    GUARD_DELETION = "UPDATE sessions SET fence = fence WHERE id = $1 AND fence = $2 \
        AND status IN ('completed', 'failed', 'cancelled')";

    /// Whether another session inherited one of this session's artifacts
    /// as context. Binds `$1` session.
    INHERITED_ARTIFACT = "SELECT 1 FROM artifacts a JOIN session_context_refs r \
        ON r.incident_id = a.incident_id AND r.artifact_id = a.id \
        WHERE a.session_id = $1 AND r.session_id <> $1 LIMIT 1";

    /// A session's context refs. Binds `$1` session.
    DELETE_SESSION_REFS = "DELETE FROM session_context_refs WHERE session_id = $1";

    /// A session's reports. Binds `$1` session.
    DELETE_SESSION_REPORTS = "DELETE FROM reports WHERE session_id = $1";

    /// A session's artifact rows. Binds `$1` session.
    DELETE_SESSION_ARTIFACTS = "DELETE FROM artifacts WHERE session_id = $1";

    /// The session's webhook events. Binds `$1` session.
    DELETE_SESSION_EVENTS = "DELETE FROM webhook_outbox WHERE session_id = $1";

    /// The session's budget (its incident's stays). Binds `$1` session.
    DELETE_SESSION_BUDGET = "DELETE FROM budgets WHERE scope = 'session' AND scope_id = $1";

    /// The session row, last. Binds `$1` session.
    DELETE_SESSION = "DELETE FROM sessions WHERE id = $1";

    // The webhook outbox (the rest is built from the dialect: `outbox.rs`).

    /// `Outbox::undelivered`.
    UNDELIVERED_EVENTS = "SELECT COUNT(*) FROM webhook_outbox WHERE delivered_ms IS NULL";

    // Turn logs.

    /// `TurnLog::create`. Binds `$1` id, `$2` header, `$3` size in bytes.
    INSERT_LOG = "INSERT INTO turn_logs (id, header, size_bytes) VALUES ($1, $2, $3)";

    /// A log's row. Binds `$1` id.
    SELECT_LOG = "SELECT header, event_count, size_bytes FROM turn_logs WHERE id = $1";

    /// `TurnLog::list`.
    LIST_LOGS = "SELECT id FROM turn_logs ORDER BY id";

    /// `TurnLog::delete`, first statement: a log's events. Binds `$1` id.
    DELETE_LOG_EVENTS = "DELETE FROM turn_events WHERE log_id = $1";

    /// `TurnLog::delete`, second statement (same transaction): the log's
    /// row. Binds `$1` id.
    DELETE_LOG = "DELETE FROM turn_logs WHERE id = $1";

    /// `LogIo::read`. Binds `$1` log, `$2` first seq, `$3` limit.
    READ_EVENTS = "SELECT seq, body FROM turn_events WHERE log_id = $1 AND seq >= $2 \
        ORDER BY seq LIMIT $3";

    /// The stored texts of a window of events (an append's retry check).
    /// Binds `$1` log, `$2` first seq, `$3` limit.
    READ_BODIES = "SELECT body FROM turn_events WHERE log_id = $1 AND seq >= $2 \
        ORDER BY seq LIMIT $3";

    /// `LogIo::event_count`. Binds `$1` log.
    EVENT_COUNT = "SELECT event_count FROM turn_logs WHERE id = $1";

    /// `LogIo::claim`: records `$2` as the log's newest writer epoch unless
    /// a newer one claimed it. Binds `$1` log, `$2` epoch.
    CLAIM_EPOCH = "UPDATE turn_logs SET epoch = $2 WHERE id = $1 AND epoch <= $2";

    /// A log's newest epoch (a refused claim's second read). Binds `$1` log.
    SELECT_EPOCH = "SELECT epoch FROM turn_logs WHERE id = $1";

    /// A log's count and newest epoch (why an append was refused). Binds
    /// `$1` log.
    COUNT_AND_EPOCH = "SELECT event_count, epoch FROM turn_logs WHERE id = $1";
}

/// PostgreSQL: `INSERT … SELECT` of artifact rows from arrays — binds
/// `$1…$10` and `$12` the columns, `$11` the creation time — up to its
/// `FROM`/`AS` (a statement adds its own `WHERE`).
#[cfg(feature = "postgres")]
macro_rules! unnest_artifacts {
    () => {
        concat!(
            "INSERT INTO artifacts (",
            crate::rows::artifact_columns!(),
            ") SELECT u.id, u.incident_id, u.session_id, u.kind, u.path, u.blob_key, \
             u.content_type, u.size_bytes, u.sha256, u.revision, $11, u.fence \
             FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], \
             $5::text[], $6::text[], $7::text[], $8::int8[], $9::text[], $10::int4[], $12::int8[]) \
             AS u(id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, \
             sha256, revision, fence)"
        )
    };
}

#[cfg(feature = "postgres")]
pub(crate) use unnest_artifacts;
