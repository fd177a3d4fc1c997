//! Names of the referential and uniqueness rules, as carried by
//! [`StoreError::Constraint`](crate::StoreError::Constraint).
//!
//! The SQL migrations name their constraints exactly so, and [`MemoryStore`](crate::MemoryStore)
//! reports the same names, so callers can match a name without knowing the backend.

/// A session must belong to an existing incident.
pub const SESSIONS_INCIDENT_FK: &str = "sessions_incident_fk";
/// A report's `(incident_id, session_id)` must name an existing session of that incident.
pub const REPORTS_SESSION_FK: &str = "reports_session_fk";
/// An artifact's `(incident_id, session_id)` must name an existing session of that incident.
pub const ARTIFACTS_SESSION_FK: &str = "artifacts_session_fk";
/// A context ref's `(incident_id, artifact_id)` must name an artifact of the session's incident.
pub const CONTEXT_REFS_ARTIFACT_FK: &str = "session_context_refs_artifact_fk";
/// A context ref's `(incident_id, session_id)` must name an existing session of that incident.
pub const CONTEXT_REFS_SESSION_FK: &str = "session_context_refs_session_fk";
