//! A session row as the databases return it, and its conversion into the
//! model (see [`rows`](crate::rows) for the other rows and the helpers).

use std::str::FromStr;

use chrono::{DateTime, Utc};
use korvus_store::{
    Admission, Counters, IncidentId, OwnerId, Priority, Session, SessionId, SessionKind,
    SessionStatus, StoreError, WorkspaceRef,
};
use uuid::Uuid;

use crate::error::unexpected;

/// The columns of [`session_columns`](crate::rows), as one struct.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SessionRow {
    id: Uuid,
    incident_id: Uuid,
    seq: i64,
    kind: String,
    status: String,
    prompt: String,
    workspace_repo: Option<String>,
    workspace_commit: Option<String>,
    exit_reason: Option<String>,
    turns: i64,
    tool_calls: i64,
    input_tokens: i64,
    output_tokens: i64,
    revision: i32,
    fence: i64,
    cancel_fence: Option<i64>,
    owner: Option<Uuid>,
    lease_expires_ms: Option<i64>,
    created_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    pool: String,
    priority: i16,
    queue_key: Option<String>,
    idempotency_key: Option<String>,
    attempt: i32,
    resume_pending: bool,
    resume_after_ms: Option<i64>,
    runner: Option<String>,
}

/// A lease expiry in milliseconds since the epoch as a time.
pub(crate) fn lease_expiry(backend: &'static str, ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| unexpected(backend, format!("lease expiry {ms} ms")))
}

impl SessionRow {
    pub(crate) fn into_model(self, backend: &'static str) -> Result<Session, StoreError> {
        // A pending resume is owned by the reserved owner only for earlier
        // releases' sake: the model shows it unowned. The flag means
        // nothing once the row is no longer active.
        let active = self.status == SessionStatus::Running.as_str()
            && !self
                .exit_reason
                .as_deref()
                .is_some_and(|r| korvus_store::exit_reason::IDLE.contains(&r));
        // Only while the reserved owner holds it: a row a settle or an
        // earlier release's reopen left flagged is not pending.
        let pending = self.resume_pending && active && self.owner == Some(RESUME_OWNER);
        let (owner, lease_expires_ms) = if pending {
            (None, None)
        } else {
            (self.owner, self.lease_expires_ms)
        };
        Ok(Session {
            id: SessionId::from_uuid(self.id),
            incident_id: IncidentId::from_uuid(self.incident_id),
            seq: unsigned(backend, "seq", self.seq)?,
            kind: parse::<SessionKind>(backend, "session kind", &self.kind)?,
            status: parse::<SessionStatus>(backend, "session status", &self.status)?,
            prompt: self.prompt,
            workspace_ref: workspace(backend, self.workspace_repo, self.workspace_commit)?,
            exit_reason: self.exit_reason.map(Into::into),
            counters: counters(
                backend,
                self.turns,
                self.tool_calls,
                self.input_tokens,
                self.output_tokens,
            )?,
            revision: unsigned(backend, "session revision", i64::from(self.revision))?,
            fence: u64::try_from(self.fence)
                .map_err(|_| unexpected(backend, format!("session fence {}", self.fence)))?,
            cancel_requested: self.cancel_fence == Some(self.fence),
            owner: owner.map(OwnerId::from_uuid),
            lease_expires_at: lease_expires_ms
                .map(|ms| lease_expiry(backend, ms))
                .transpose()?,
            created_at: self.created_at,
            ended_at: self.ended_at,
            started_at: self.started_at,
            attempt: unsigned(backend, "session attempt", i64::from(self.attempt))?,
            resume_pending: pending,
            resume_after: match self.resume_after_ms {
                Some(ms) if pending => Some(lease_expiry(backend, ms)?),
                _ => None,
            },
            admission: Admission {
                pool: self.pool,
                priority: u8::try_from(self.priority)
                    .ok()
                    .and_then(Priority::new)
                    .ok_or_else(|| {
                        unexpected(backend, format!("session priority {}", self.priority))
                    })?,
                queue_key: self.queue_key,
                idempotency_key: self.idempotency_key,
            },
            runner: self.runner,
        })
    }
}

pub(crate) fn parse<T: FromStr>(
    backend: &'static str,
    what: &str,
    value: &str,
) -> Result<T, StoreError> {
    value
        .parse()
        .map_err(|_| unexpected(backend, format!("{what} {value:?}")))
}

pub(crate) fn unsigned<T: TryFrom<i64>>(
    backend: &'static str,
    what: &str,
    value: i64,
) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| unexpected(backend, format!("{what} {value}")))
}

pub(crate) fn workspace(
    backend: &'static str,
    repo: Option<String>,
    commit: Option<String>,
) -> Result<Option<WorkspaceRef>, StoreError> {
    match (repo, commit) {
        (Some(repo), Some(commit)) => Ok(Some(WorkspaceRef { repo, commit })),
        (None, None) => Ok(None),
        _ => Err(unexpected(
            backend,
            "workspace ref with only one of repo and commit",
        )),
    }
}

pub(crate) fn counters(
    backend: &'static str,
    turns: i64,
    tool_calls: i64,
    input_tokens: i64,
    output_tokens: i64,
) -> Result<Counters, StoreError> {
    Ok(Counters {
        turns: unsigned(backend, "counters.turns", turns)?,
        tool_calls: unsigned(backend, "counters.tool_calls", tool_calls)?,
        input_tokens: unsigned(backend, "counters.input_tokens", input_tokens)?,
        output_tokens: unsigned(backend, "counters.output_tokens", output_tokens)?,
    })
}

/// The reserved owner of a session whose resume is pending
/// (`release_for_resume`): no manager has this id, and its `owners` row
/// (written by the migration that added resumes) never expires, so a
/// replica of an earlier release sees the row held and leaves it alone.
pub(crate) const RESUME_OWNER: uuid::Uuid =
    uuid::Uuid::from_u128(0x0000_0000_0000_0000_0000_0000_0000_f026);

/// The claim expiry a pending resume's row carries (9999-12-31, in ms):
/// never lapses by any clock.
pub(crate) const RESUME_LEASE_MS: i64 = 253_402_300_799_999;
