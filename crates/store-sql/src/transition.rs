//! The conditional transitions of a session row: [`Transition`], each one
//! `UPDATE … WHERE <condition> RETURNING` statement both engines run as it
//! is.
//!
//! Concurrent transitions of one row cannot both match. PostgreSQL lets the
//! first to take the row lock update it, and the others re-check the
//! condition on the updated row, match nothing and write nothing; SQLite runs
//! writes one at a time, so the later ones find the row changed. A statement
//! that matched nothing is told apart from an unknown id by a second read,
//! on the failure path only.

use korvus_store::{SessionId, SessionStatus, StoreError};

use crate::error::unexpected;
use crate::rows::{active, placeholders, report_columns, session_columns};

/// One conditional transition of a session row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// `continue_session` from a terminal row: the session becomes running again with the
    /// next revision, the next fence and a new lease. Binds `$1` id, `$2`
    /// running, `$3` owner, `$4` ttl (ms), `$5…` the terminal statuses.
    Reopen,
    /// `cancel_idle_session`: an idle session (running, exit reason
    /// `awaiting_user` or `budget_reached`) becomes cancelled. Binds `$1`
    /// id, `$2` cancelled, `$3` the exit reason `cancelled`, `$4`
    /// `ended_at`, `$5` running.
    CancelIdle,
    /// `continue_session` from an idle row: the session becomes active with the next
    /// revision, the next fence and a new lease. Binds `$1` id, `$2`
    /// running, `$3` owner, `$4` ttl (ms).
    ResumeIdle,
}

/// The lease a transition that starts a run writes: the owner and the
/// expiry by the database clock (`now` is the engine's
/// [`NOW_MS`](crate::dialect::StoreDialect::NOW_MS)). Both NULL when
/// `$owner` and `$ttl` are: the row is queued, from now.
fn own(now: &str, owner: usize, ttl: usize) -> String {
    format!(
        "owner = ${owner}, lease_expires_ms = {now} + ${ttl}, detached = FALSE, \
         queued_ms = CASE WHEN ${owner} IS NULL THEN {now} END"
    )
}

/// `alias`'s row waits to be resumed (prefix `alias` with its dot, or
/// empty): flagged, and held by the reserved owner's claim that never
/// expires. The claim decides, not the flag alone: a flag a cancel or
/// settlement of a pending row left behind means nothing once the row is
/// continued and owned again.
fn pending(alias: &str) -> String {
    format!(
        "({alias}resume_pending = TRUE AND {alias}lease_expires_ms = {})",
        crate::session_row::RESUME_LEASE_MS
    )
}

/// The orphan predicate of `expired_leases` and `take_over`: active, not
/// queued (owned, or started), past its claim's expiry by the database
/// clock, and held by no live owner: unowned, released by its owner's
/// heartbeat (`detached`), or its owner's `owners` row expired or gone.
fn orphan(now: &str) -> String {
    format!(
        concat!(
            active!(),
            " AND (owner IS NOT NULL OR started_at IS NOT NULL) AND NOT {pending}",
            " AND (lease_expires_ms IS NULL OR lease_expires_ms <= {now})",
            " AND (owner IS NULL OR detached = TRUE OR NOT EXISTS (SELECT 1 FROM owners AS o \
             WHERE o.id = sessions.owner AND o.expires_ms > {now}))"
        ),
        now = now,
        pending = pending("")
    )
}

/// `create_report`: the row, only while the session (in that incident) is
/// active at the report's fence; `share` locks the session row read
/// (PostgreSQL `FOR SHARE`: a fence move and the insert wait for each
/// other; SQLite writes one at a time). Binds `$1…$15` in `report_columns`
/// order.
fn insert_report(share: &str) -> String {
    format!(
        concat!(
            "INSERT INTO reports (",
            report_columns!(),
            ") SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15 \
             WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND incident_id = $2 \
             AND fence = $12 AND ",
            active!(),
            "{})"
        ),
        share
    )
}

/// `alias`'s row is queued: active, unowned, not started.
fn queued(alias: &str) -> String {
    let not_idle = crate::rows::not_idle(&format!("{alias}."));
    format!(
        "{alias}.status = 'running' \
         AND {not_idle} \
         AND {alias}.owner IS NULL AND {alias}.started_at IS NULL"
    )
}

/// `alias`'s row may be claimed: queued, or an active row whose resume is
/// pending and whose backoff has passed by the database clock `now`.
fn claimable(alias: &str, now: &str) -> String {
    let not_idle = crate::rows::not_idle(&format!("{alias}."));
    format!(
        "({queued} OR ({pending} AND {alias}.status = 'running' \
         AND {not_idle} \
         AND ({alias}.resume_after_ms IS NULL OR {alias}.resume_after_ms <= {now})))",
        queued = queued(alias),
        pending = pending(&format!("{alias}."))
    )
}

/// The runs in progress per key of pool `$1` (owned and active: claimed,
/// started or continued; not a pending resume, whose reserved owner runs
/// nothing), as a derived table `(k, n)`, counted once per
/// statement. `key` is the engine's queue key of an alias (`{t}`).
fn busy(key: &str) -> String {
    let not_idle = crate::rows::not_idle("o.");
    format!(
        "(SELECT {o_key} AS k, count(*) AS n FROM sessions AS o WHERE o.pool = $1 \
          AND o.owner IS NOT NULL AND NOT {pending} AND o.status = 'running' \
          AND {not_idle} \
          GROUP BY {o_key})",
        o_key = key.replace("{t}", "o"),
        pending = pending("o."),
    )
}

/// The pick of `claim_next`: the next queued row of pool `$1` — highest
/// priority, then the key with the fewest runs in progress, then the key
/// claimed longest ago (never: first), then the oldest queued — selecting `columns` of it (alias `s`). `cap` is an
/// extra condition on the key's busy count (empty: none), `lock` the row
/// lock the pick takes (of `s` only). The busy counts are one grouped
/// scan of the pool's runs in progress, not one count per queued row.
fn pick(key: &str, columns: &str, cap: &str, lock: &str, now: &str) -> String {
    format!(
        "SELECT {columns} FROM sessions AS s LEFT JOIN {busy} AS b ON b.k = {s_key} \
         LEFT JOIN queue_keys AS q ON q.pool = s.pool AND q.queue_key = {s_key} \
         WHERE s.pool = $1 AND {claimable}{cap_clause} \
         ORDER BY s.priority DESC, COALESCE(b.n, 0), COALESCE(q.last_claimed_ms, 0), \
         s.queued_ms, s.id LIMIT 1{lock}",
        busy = busy(key),
        s_key = key.replace("{t}", "s"),
        claimable = claimable("s", now),
        cap_clause = if cap.is_empty() {
            String::new()
        } else {
            format!(" AND COALESCE(b.n, 0) < {cap}")
        },
    )
}

/// `claim_next`: the row [`pick`] names (with `cap` on its key's busy
/// count, or none), owned under `$2` (owner) for `$3` (ttl, ms), at the
/// next fence.
fn claim_next(now: &str, key: &str, cap: &str, lock: &str) -> String {
    format!(
        concat!(
            "UPDATE sessions SET owner = $2, lease_expires_ms = {now} + $3, detached = FALSE, \
             fence = fence + 1, resume_pending = FALSE, resume_after_ms = NULL \
             WHERE id = ({pick}) \
             AND (owner IS NULL AND started_at IS NULL OR {pending}) AND ",
            active!(),
            " RETURNING ",
            session_columns!()
        ),
        now = now,
        pick = pick(key, "s.id", cap, lock, now),
        pending = pending(""),
    )
}

/// `key_busy`: the runs in progress of key `$2` in pool `$1`.
fn key_busy(key: &str) -> String {
    let not_idle = crate::rows::not_idle("o.");
    format!(
        "SELECT count(*) FROM sessions AS o WHERE o.pool = $1 AND {} = $2 \
         AND o.owner IS NOT NULL AND NOT {} AND o.status = 'running' \
         AND {not_idle}",
        key.replace("{t}", "o"),
        pending("o.")
    )
}

/// `queue_depth`: the queued rows of pool `$1`, and of them those of key
/// `$2`.
fn queue_depth(key: &str) -> String {
    format!(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN {} = $2 THEN 1 ELSE 0 END), 0) \
         FROM sessions AS s WHERE s.pool = $1 AND {}",
        key.replace("{t}", "s"),
        queued("s")
    )
}

/// `alias`'s row waits in its pool's line: queued, or its resume pending
/// (whatever its backoff).
fn waiting(alias: &str) -> String {
    let not_idle = crate::rows::not_idle(&format!("{alias}."));
    format!(
        "({queued} OR ({pending} AND {alias}.status = 'running' \
         AND {not_idle}))",
        queued = queued(alias),
        pending = pending(&format!("{alias}."))
    )
}

/// `queue_position`: see [`Statements::queue_position`].
fn queue_position() -> String {
    format!(
        "SELECT (SELECT COUNT(*) FROM sessions AS s WHERE s.pool = me.pool AND {s_waits} \
         AND (s.priority > me.priority OR s.priority = me.priority \
         AND (COALESCE(s.queued_ms, 0) < COALESCE(me.queued_ms, 0) \
         OR COALESCE(s.queued_ms, 0) = COALESCE(me.queued_ms, 0) AND s.id < me.id))) \
         FROM sessions AS me WHERE me.id = $1 AND {me_waits}",
        s_waits = waiting("s"),
        me_waits = waiting("me"),
    )
}

/// `release`: see [`Statements::release`].
fn release(now: &str) -> String {
    format!(
        concat!(
            "UPDATE sessions SET owner = NULL, lease_expires_ms = NULL, \
             fence = fence + 1, queued_ms = COALESCE(queued_ms, {now}) \
             WHERE id = $1 AND fence = $2 AND started_at IS NULL AND ",
            active!(),
            " RETURNING ",
            session_columns!()
        ),
        now = now
    )
}

/// `release_for_resume`: see [`Statements::release_for_resume`].
fn release_for_resume(now: &str) -> String {
    format!(
        concat!(
            "UPDATE sessions SET owner = $3, lease_expires_ms = $4, detached = FALSE, \
             fence = fence + 1, attempt = attempt + 1, resume_pending = TRUE, \
             resume_after_ms = {now} + $5, queued_ms = COALESCE(queued_ms, {now}) \
             WHERE id = $1 AND fence = $2 AND (cancel_fence IS NULL OR cancel_fence <> $2) AND ",
            active!(),
            " RETURNING ",
            session_columns!()
        ),
        now = now
    )
}

/// `claim_row`: see [`Statements::claim_row`].
fn claim_row(now: &str) -> String {
    format!(
        concat!(
            "UPDATE sessions SET owner = $2, lease_expires_ms = {now} + $3, detached = FALSE, \
             fence = fence + 1, resume_pending = FALSE, resume_after_ms = NULL WHERE id = $1 \
             AND (owner IS NULL AND started_at IS NULL OR {pending}) AND ",
            active!(),
            " RETURNING ",
            session_columns!()
        ),
        now = now,
        pending = pending("")
    )
}

/// The statements of one engine built from its dialect (those that read
/// the database clock, and the fenced report insert with its row lock),
/// once per engine.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `continue_session` from a terminal row. Binds `$1` id, `$2`
    /// running, `$3` owner, `$4` ttl (ms), `$5…` the terminal statuses.
    reopen: String,
    /// `continue_session` from an idle row. Binds `$1` id, `$2` running,
    /// `$3` owner, `$4` ttl (ms).
    resume_idle: String,
    /// `heartbeat`: renews the owner's lease (its `owners` row), releases
    /// what it no longer runs, and names the listed runs it still holds.
    pub(crate) heartbeat: crate::heartbeat::Heartbeat,
    /// `expired_leases`: `(id, fence)` of the orphans. Binds nothing.
    pub(crate) expired: String,
    /// `take_over`: the orphan at `$2` (fence) gets the next fence and the
    /// lease of `$3` (owner) for `$4` (ttl, ms); a pending cancel request
    /// moves with it. Binds `$1` id.
    pub(crate) take_over: String,
    /// `create_report`: the row, only while the session (in that incident)
    /// is active at the report's fence. Binds `$1…$15` in
    /// `report_columns` order.
    insert_report: String,
    /// `claim_next` (see [`claim_next`]). Binds `$1` pool, `$2` owner,
    /// `$3` ttl (ms).
    pub(crate) claim_next: String,
    /// `claim_next` with a per-key cap, in one statement: for an engine
    /// whose writes run one at a time (SQLite), where the busy count it
    /// reads cannot change before it writes. Binds `$1` pool, `$2` owner,
    /// `$3` ttl (ms), `$4` the cap.
    pub(crate) claim_capped: String,
    /// The pick of a capped claim made in steps (PostgreSQL): the id and
    /// the key of the next queued row whose key is below the cap, row
    /// locked. Binds `$1` pool, `$2` the cap.
    pub(crate) pick_capped: String,
    /// How many runs of a key are in progress in a pool. Binds `$1` pool,
    /// `$2` the key.
    pub(crate) key_busy: String,
    /// `release`: the active row at `$2` (fence), not started, loses its
    /// owner and lease and moves to the next fence. It keeps `queued_ms`
    /// when it was queued before (its place in line); a row created owned
    /// and queued only now gets now. A cancel request for the claimed run
    /// (`cancel_fence`, the old fence) no longer matches. Binds `$1` id,
    /// `$2` fence.
    pub(crate) release: String,
    /// `release_for_resume`: the active row at `$2` (fence) moves to the
    /// next fence and attempt and waits to be resumed from `$5` ms from
    /// now, owned by the reserved owner `$3` with the lease `$4` that
    /// never lapses (so a replica of an earlier release neither takes it
    /// over nor claims it). A cancel request for the old run no longer
    /// matches. Binds `$1` id.
    pub(crate) release_for_resume: String,
    /// `queue_depth`: the queued rows of pool `$1`, and of them those
    /// whose key (queue key, else the incident as the engine writes it
    /// as text) is `$2`.
    pub(crate) queue_depth: String,
    /// `queue_position`: the waiting rows of the pool of session `$1`
    /// ahead of it (higher priority, or the same and queued before it);
    /// no row when it does not wait.
    pub(crate) queue_position: String,
    /// After a claim: its key's turn is taken now. Binds `$1` pool, `$2`
    /// key.
    pub(crate) stamp_key: String,
    /// The claim of the picked row: owned under `$2` (owner) for `$3`
    /// (ttl, ms) at the next fence, while it is still queued. Binds `$1`
    /// id.
    pub(crate) claim_row: String,
}

impl Statements {
    /// `now` is the engine's clock in ms, `run_key` a row's run key,
    /// `texts_4` the subquery of the texts of the JSON array `$4` and
    /// `share` the row lock of a fenced insert.
    pub(crate) fn new(dialect: &Dialect) -> Self {
        let Dialect {
            now,
            share,
            incident_text,
            skip_locked,
            ..
        } = *dialect;
        let orphan = orphan(now);
        let key = format!("COALESCE({{t}}.queue_key, {incident_text})");
        Self {
            reopen: format!(
                concat!(
                    "UPDATE sessions SET status = $2, ended_at = NULL, exit_reason = NULL, \
                     revision = revision + 1, fence = fence + 1, started_at = NULL, attempt = 1, {} \
                     WHERE id = $1 AND status IN ({}) RETURNING ",
                    session_columns!()
                ),
                own(now, 3, 4),
                placeholders(5, SessionStatus::TERMINAL.len())
            ),
            resume_idle: format!(
                concat!(
                    "UPDATE sessions SET exit_reason = NULL, revision = revision + 1, \
                     fence = fence + 1, started_at = NULL, attempt = 1, {} \
                     WHERE id = $1 AND status = $2 AND exit_reason IN {} \
                     RETURNING ",
                    session_columns!()
                ),
                own(now, 3, 4),
                crate::rows::idle_reasons!()
            ),
            heartbeat: crate::heartbeat::Heartbeat::new(dialect),
            expired: format!("SELECT id, fence FROM sessions WHERE {orphan}"),
            take_over: format!(
                concat!(
                    "UPDATE sessions SET fence = fence + 1, \
                     owner = $3, lease_expires_ms = {} + $4, detached = FALSE, \
                     cancel_fence = CASE WHEN cancel_fence = fence THEN fence + 1 \
                                         ELSE cancel_fence END \
                     WHERE id = $1 AND fence = $2 AND {} RETURNING ",
                    session_columns!()
                ),
                // Not `own`: a takeover leaves `queued_ms` as it is, so a
                // claim the reaper gives back keeps its place in line.
                now,
                orphan
            ),
            insert_report: insert_report(share),
            claim_next: claim_next(now, &key, "", skip_locked),
            claim_capped: claim_next(now, &key, "$4", skip_locked),
            pick_capped: pick(
                &key,
                &format!("s.id, {}", key.replace("{t}", "s")),
                "$2",
                skip_locked,
                now,
            ),
            key_busy: key_busy(&key),
            queue_depth: queue_depth(&key),
            queue_position: queue_position(),
            release: release(now),
            release_for_resume: release_for_resume(now),
            stamp_key: format!(
                "INSERT INTO queue_keys (pool, queue_key, last_claimed_ms) VALUES ($1, $2, {now}) \
                 ON CONFLICT (pool, queue_key) DO UPDATE SET last_claimed_ms = EXCLUDED.last_claimed_ms"
            ),
            claim_row: claim_row(now),
        }
    }

    /// The fenced report insert (see the field).
    pub(crate) fn insert_report(&self) -> &str {
        &self.insert_report
    }

    /// Every statement, by name, in a fixed order: what the SQL snapshot
    /// renders.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn all(&self) -> Vec<(&'static str, &str)> {
        let mut all: Vec<(&'static str, &str)> = vec![
            ("REOPEN", &self.reopen),
            ("RESUME_IDLE", &self.resume_idle),
            ("HEARTBEAT_OWNER", &self.heartbeat.owner),
            ("HEARTBEAT_FORGET", &self.heartbeat.forget),
            ("HEARTBEAT_RELEASE", &self.heartbeat.release),
            ("HEARTBEAT_HELD", &self.heartbeat.held),
            ("EXPIRED_LEASES", &self.expired),
            ("TAKE_OVER", &self.take_over),
            ("INSERT_REPORT", &self.insert_report),
            ("CLAIM_NEXT", &self.claim_next),
            ("CLAIM_CAPPED", &self.claim_capped),
            ("PICK_CAPPED", &self.pick_capped),
            ("KEY_BUSY", &self.key_busy),
            ("CLAIM_ROW", &self.claim_row),
            ("RELEASE", &self.release),
            ("RELEASE_FOR_RESUME", &self.release_for_resume),
            ("QUEUE_DEPTH", &self.queue_depth),
            ("QUEUE_POSITION", &self.queue_position),
            ("STAMP_KEY", &self.stamp_key),
        ];
        if let Some(one) = &self.heartbeat.one_statement {
            all.push(("HEARTBEAT", one));
        }
        all
    }
}

pub(crate) use crate::built::Dialect;

/// `runs` as the JSON array of run keys a heartbeat binds.
pub(crate) fn run_keys(runs: &[(SessionId, u64)]) -> String {
    let keys: Vec<String> = runs
        .iter()
        .map(|(id, fence)| format!("{}:{fence}", id.as_uuid().simple()))
        .collect();
    serde_json::to_string(&keys).unwrap_or_else(|_| "[]".to_owned())
}

/// `(id, fence)` rows (of [`CANCEL_REQUESTS`](crate::sql::CANCEL_REQUESTS), a heartbeat, the expired
/// leases) as the seam's pairs.
pub(crate) fn pairs(
    backend: &'static str,
    rows: Vec<(uuid::Uuid, i64)>,
) -> Result<Vec<(SessionId, u64)>, StoreError> {
    rows.into_iter()
        .map(|(id, fence)| {
            let fence = u64::try_from(fence)
                .map_err(|_| unexpected(backend, format!("session fence {fence}")))?;
            Ok((SessionId::from_uuid(id), fence))
        })
        .collect()
}

impl Transition {
    /// The statement of the engine whose clocked statements are `clocked`;
    /// see each variant for its binds.
    pub(crate) fn statement(self, built: &Statements) -> &str {
        match self {
            Transition::Reopen => &built.reopen,
            Transition::CancelIdle => crate::sql::CANCEL_IDLE,
            Transition::ResumeIdle => &built.resume_idle,
        }
    }

    /// The error for an existing session the statement did not match.
    pub(crate) fn refused(self, session: SessionId) -> StoreError {
        match self {
            Transition::Reopen => StoreError::NotFinished { session },
            Transition::CancelIdle | Transition::ResumeIdle => StoreError::NotIdle { session },
        }
    }
}
