//! Rows as the databases return them, and their conversion into the model.
//!
//! Both backends return the same column names and Rust types (UUIDs, UTC
//! timestamps, signed integers, text), so one set of `FromRow` structs serves
//! both. Conversion checks every range and enum on the way out: a row the
//! model cannot hold is a `Backend` error, never a panic.

use std::collections::HashMap;

use chrono::{DateTime, SubsecRound, Utc};
use korvus_store::{
    Artifact, ArtifactId, ArtifactKind, Incident, IncidentId, IncidentStatus, Report, Session,
    SessionContextRef, SessionId, StoreError,
};
use uuid::Uuid;

use crate::error::unexpected;
use crate::session_row::{counters, parse, unsigned, workspace};
pub(crate) use crate::session_row::{lease_expiry, SessionRow};

/// `$first, $first+1, …` for `n` values.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A session row's lease as the model reports it (`lease_expires_ms`, of
/// the unaliased `sessions`): its claim's expiry, or its holding owner's
/// lease when later (see [`heartbeat`](crate::heartbeat)).
macro_rules! lease_column {
    () => {
        "COALESCE((SELECT o.expires_ms FROM owners AS o WHERE o.id = sessions.owner \
         AND o.expires_ms > sessions.lease_expires_ms AND sessions.detached = FALSE), \
         lease_expires_ms) AS lease_expires_ms"
    };
}

/// The columns of [`SessionRow`], in the order the queries name them, of
/// the unaliased `sessions` table.
macro_rules! session_columns {
    () => {
        concat!(
            "id, incident_id, seq, kind, status, prompt, workspace_repo, workspace_commit, \
         exit_reason, turns, tool_calls, input_tokens, output_tokens, revision, fence, cancel_fence, \
         owner, ",
            $crate::rows::lease_column!(),
            ", created_at, ended_at, started_at, pool, priority, queue_key, idempotency_key, \
             attempt, resume_pending, resume_after_ms, runner"
        )
    };
}

/// The columns of [`IncidentRow`].
macro_rules! incident_columns {
    () => {
        "id, title, status, workspace_repo, workspace_commit, created_at"
    };
}

/// The columns of [`ReportRow`].
macro_rules! report_columns {
    () => {
        "session_id, incident_id, revision, markdown_key, markdown_bytes, exit_reason, \
         turns, tool_calls, input_tokens, output_tokens, detail, fence, created_at, manifest_key, salvaged_from"
    };
}

/// Binds a [`Report`]'s columns as `$1…$15`, in [`report_columns`] order,
/// to the query `$q` (of [`INSERT_REPORT`] or its if-absent variant).
macro_rules! bind_report {
    ($q:expr, $report:expr) => {{
        let r: &korvus_store::Report = $report;
        let c = r.counters;
        $q.bind(r.session_id.as_uuid())
            .bind(r.incident_id.as_uuid())
            .bind($crate::rows::to_i32(r.revision))
            .bind(r.markdown_key.as_deref())
            .bind($crate::rows::to_i64(r.markdown_bytes))
            .bind(r.exit_reason.as_str())
            .bind($crate::rows::to_i64(c.turns))
            .bind($crate::rows::to_i64(c.tool_calls))
            .bind($crate::rows::to_i64(c.input_tokens))
            .bind($crate::rows::to_i64(c.output_tokens))
            .bind(r.detail.as_deref())
            .bind($crate::rows::to_i64(r.fence))
            .bind(r.created_at)
            .bind(r.manifest_key.as_deref())
            .bind(r.salvaged_from.as_deref())
    }};
}
pub(crate) use bind_report;

/// The condition on a `sessions` row that its run is active: running and
/// not idle ([`Session::is_active`]). Only an active row accepts the writes
/// of its run. The status and exit reason are written as literals (checked
/// against the model's constants by a unit test), so every statement that
/// uses it keeps its binds.
macro_rules! active {
    () => {
        concat!(
            "status = 'running' AND (exit_reason IS NULL OR exit_reason NOT IN ",
            crate::rows::idle_reasons!(),
            ")"
        )
    };
}
pub(crate) use active;

/// The exit reasons that leave a `running` row idle
/// ([`korvus_store::exit_reason::IDLE`]) as an SQL list, written as
/// literals for the same reason as [`active!`] (and checked by the same
/// unit test). The triggers of the `idle_budget_reached` migration write
/// the same list.
macro_rules! idle_reasons {
    () => {
        "('awaiting_user', 'budget_reached')"
    };
}
pub(crate) use idle_reasons;

/// `prefix` (an alias and a dot, or nothing)'s row is not idle: no exit
/// reason, or one that is not of [`korvus_store::exit_reason::IDLE`].
pub(crate) fn not_idle(prefix: &str) -> String {
    format!(
        "({prefix}exit_reason IS NULL OR {prefix}exit_reason NOT IN {})",
        crate::rows::idle_reasons!()
    )
}

/// `(id, incident, fence, active)` of the sessions a batch of artifact
/// rows names ([`session_fences`] selects it).
pub(crate) type SessionFence = (Uuid, Uuid, i64, bool);

/// The columns of a [`SessionFence`], for `SELECT … FROM sessions`.
macro_rules! session_fences {
    () => {
        concat!("id, incident_id, fence, (", $crate::rows::active!(), ")")
    };
}
pub(crate) use session_fences;

/// Checks a batch of artifact rows against the sessions they name, as
/// read (and, on PostgreSQL, share-locked) in the insert's transaction. An
/// unknown session or one of another incident is the
/// `artifacts_session_fk` constraint; a session at another fence, or whose
/// run at that fence already ended, refuses the whole batch.
pub(crate) fn check_artifact_fences(
    new: &[korvus_store::NewArtifact],
    found: &[SessionFence],
) -> Result<(), StoreError> {
    for n in new {
        let row = found
            .iter()
            .find(|(id, _, _, _)| *id == n.session_id.as_uuid());
        match row {
            Some((_, incident, fence, active)) if *incident == n.incident_id.as_uuid() => {
                if u64::try_from(*fence).ok() != Some(n.fence) {
                    return Err(StoreError::Fenced {
                        session: n.session_id,
                        presented: n.fence,
                        current: u64::try_from(*fence).unwrap_or_default(),
                    });
                }
                if !active {
                    return Err(StoreError::NotActive {
                        session: n.session_id,
                        fence: n.fence,
                    });
                }
            }
            _ => {
                return Err(StoreError::Constraint {
                    name: korvus_store::constraint::ARTIFACTS_SESSION_FK.to_owned(),
                })
            }
        }
    }
    Ok(())
}

/// The distinct sessions a batch of artifact rows names.
pub(crate) fn artifact_sessions(new: &[korvus_store::NewArtifact]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = new.iter().map(|n| n.session_id.as_uuid()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Why a fenced write of `session` (in `incident`, at fence `presented`)
/// matched nothing, given the session row as it is now: an unknown session
/// or one of another incident is the write's foreign-key `constraint`;
/// otherwise the fence moved on or the run ended
/// ([`Session::refusal`]).
pub(crate) fn fence_refused(
    found: Option<Session>,
    incident: IncidentId,
    presented: u64,
    constraint: &str,
) -> StoreError {
    match found {
        Some(s) if s.incident_id == incident => {
            s.refusal(presented)
                .unwrap_or_else(|| StoreError::Conflict {
                    entity: korvus_store::Entity::Session,
                    detail: format!("session {} changed while it was written; try again", s.id),
                })
        }
        _ => StoreError::Constraint {
            name: constraint.to_owned(),
        },
    }
}

/// The columns of [`ArtifactRow`].
macro_rules! artifact_columns {
    () => {
        "id, incident_id, session_id, kind, path, blob_key, content_type, size_bytes, sha256, \
         revision, created_at, fence"
    };
}

/// The columns of [`ContextRefRow`].
macro_rules! context_ref_columns {
    () => {
        "session_id, incident_id, artifact_id, role, position"
    };
}

pub(crate) use {
    artifact_columns, context_ref_columns, incident_columns, lease_column, report_columns,
    session_columns,
};

/// "Now", at the precision both databases keep (microseconds), so a value a
/// store returns equals the value it reads back later.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// A counter or size for a signed 64-bit column (validated beforehand).
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A revision for a signed 32-bit column (validated beforehand).
pub(crate) fn to_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct IncidentRow {
    id: Uuid,
    title: String,
    status: String,
    workspace_repo: Option<String>,
    workspace_commit: Option<String>,
    created_at: DateTime<Utc>,
}

impl IncidentRow {
    pub(crate) fn into_model(self, backend: &'static str) -> Result<Incident, StoreError> {
        Ok(Incident {
            id: IncidentId::from_uuid(self.id),
            title: self.title,
            status: parse::<IncidentStatus>(backend, "incident status", &self.status)?,
            workspace: workspace(backend, self.workspace_repo, self.workspace_commit)?,
            created_at: self.created_at,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ReportRow {
    session_id: Uuid,
    incident_id: Uuid,
    revision: i32,
    markdown_key: Option<String>,
    manifest_key: Option<String>,
    markdown_bytes: i64,
    exit_reason: String,
    turns: i64,
    tool_calls: i64,
    input_tokens: i64,
    output_tokens: i64,
    detail: Option<String>,
    salvaged_from: Option<String>,
    fence: i64,
    created_at: DateTime<Utc>,
}

impl ReportRow {
    pub(crate) fn into_model(self, backend: &'static str) -> Result<Report, StoreError> {
        Ok(Report {
            session_id: SessionId::from_uuid(self.session_id),
            incident_id: IncidentId::from_uuid(self.incident_id),
            revision: unsigned(backend, "report revision", i64::from(self.revision))?,
            markdown_key: self.markdown_key,
            manifest_key: self.manifest_key,
            markdown_bytes: unsigned(backend, "markdown_bytes", self.markdown_bytes)?,
            exit_reason: self.exit_reason.into(),
            counters: counters(
                backend,
                self.turns,
                self.tool_calls,
                self.input_tokens,
                self.output_tokens,
            )?,
            detail: self.detail,
            salvaged_from: self.salvaged_from,
            fence: u64::try_from(self.fence)
                .map_err(|_| unexpected(backend, format!("report fence {}", self.fence)))?,
            created_at: self.created_at,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ArtifactRow {
    id: Uuid,
    incident_id: Uuid,
    session_id: Uuid,
    kind: String,
    path: String,
    blob_key: String,
    content_type: String,
    size_bytes: i64,
    sha256: String,
    revision: i32,
    created_at: DateTime<Utc>,
    fence: i64,
}

impl ArtifactRow {
    pub(crate) fn into_model(self, backend: &'static str) -> Result<Artifact, StoreError> {
        Ok(Artifact {
            id: ArtifactId::from_uuid(self.id),
            incident_id: IncidentId::from_uuid(self.incident_id),
            session_id: SessionId::from_uuid(self.session_id),
            kind: parse::<ArtifactKind>(backend, "artifact kind", &self.kind)?,
            path: self.path,
            blob_key: self.blob_key,
            content_type: self.content_type,
            size_bytes: unsigned(backend, "size_bytes", self.size_bytes)?,
            sha256: self.sha256,
            revision: unsigned(backend, "artifact revision", i64::from(self.revision))?,
            fence: u64::try_from(self.fence)
                .map_err(|_| unexpected(backend, format!("artifact fence {}", self.fence)))?,
            created_at: self.created_at,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ContextRefRow {
    session_id: Uuid,
    incident_id: Uuid,
    artifact_id: Uuid,
    role: String,
    position: i32,
}

impl ContextRefRow {
    pub(crate) fn into_model(self, backend: &'static str) -> Result<SessionContextRef, StoreError> {
        Ok(SessionContextRef {
            session_id: SessionId::from_uuid(self.session_id),
            incident_id: IncidentId::from_uuid(self.incident_id),
            artifact_id: ArtifactId::from_uuid(self.artifact_id),
            role: self.role,
            position: unsigned(backend, "context ref position", i64::from(self.position))?,
        })
    }
}

/// Converts every row, failing on the first that does not fit.
pub(crate) fn all<R, T>(
    backend: &'static str,
    rows: Vec<R>,
    f: impl Fn(R, &'static str) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    rows.into_iter().map(|r| f(r, backend)).collect()
}

/// Orders fetched artifacts as requested (repeats included), leaving out
/// unknown ids, like every store does.
pub(crate) fn in_request_order(
    ids: &[ArtifactId],
    found: Vec<Artifact>,
) -> Result<Vec<Artifact>, StoreError> {
    let by_id: HashMap<ArtifactId, Artifact> = found.into_iter().map(|a| (a.id, a)).collect();
    Ok(ids.iter().filter_map(|id| by_id.get(id).cloned()).collect())
}
