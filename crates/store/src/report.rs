//! Report rows: the landed `report.md` of one iteration of a session.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Counters, ExitReason, IncidentId, SessionId};

/// A report revision: the landed `report.md` of one iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The session.
    pub session_id: SessionId,
    /// The session's incident.
    pub incident_id: IncidentId,
    /// 1-based, unique per session.
    pub revision: u32,
    /// Blob key of the markdown, or `None` when no document could be stored.
    pub markdown_key: Option<String>,
    /// Blob key of the harvest manifest of the iteration (what its persist
    /// phase stored, left out and failed, and whether its rows were
    /// written), or `None` when there was no phase or the manifest could
    /// not be stored.
    pub manifest_key: Option<String>,
    /// Size of the markdown in bytes (0 without a document).
    pub markdown_bytes: u64,
    /// Why the iteration ended.
    pub exit_reason: ExitReason,
    /// Usage of the iteration.
    pub counters: Counters,
    /// What went wrong while landing the iteration, cause first (e.g. a
    /// degraded persist), or `None`. At most
    /// [`MAX_REPORT_DETAIL_BYTES`](crate::validate::MAX_REPORT_DETAIL_BYTES).
    pub detail: Option<String>,
    /// Where the revision's output was salvaged from, when the run that
    /// made it did not land it itself (its manager died): "the scratch
    /// dir of … on manager …". `None` for a revision its own run landed.
    /// At most [`MAX_REPORT_DETAIL_BYTES`](crate::validate::MAX_REPORT_DETAIL_BYTES).
    pub salvaged_from: Option<String>,
    /// The fence of the run that wrote it ([`Session::fence`](crate::Session::fence)), so a
    /// stale write could be counted afterwards.
    pub fence: u64,
    /// When the row was created.
    pub created_at: DateTime<Utc>,
}

/// What it takes to create a report row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReport {
    /// The session; must exist and belong to `incident_id`.
    pub session_id: SessionId,
    /// The session's incident.
    pub incident_id: IncidentId,
    /// Must not exist yet for this session (`Conflict` otherwise).
    pub revision: u32,
    /// Blob key of the markdown, if stored.
    pub markdown_key: Option<String>,
    /// Blob key of the harvest manifest, if stored.
    pub manifest_key: Option<String>,
    /// Size of the markdown in bytes.
    pub markdown_bytes: u64,
    /// Why the iteration ended.
    pub exit_reason: ExitReason,
    /// Usage of the iteration.
    pub counters: Counters,
    /// What went wrong while landing the iteration, cause first, or `None`.
    /// No NUL byte, at most
    /// [`MAX_REPORT_DETAIL_BYTES`](crate::validate::MAX_REPORT_DETAIL_BYTES).
    pub detail: Option<String>,
    /// Where the output was salvaged from, when another manager landed
    /// it after its run was lost ([`Report::salvaged_from`]); `None`
    /// otherwise. No NUL byte, at most
    /// [`MAX_REPORT_DETAIL_BYTES`](crate::validate::MAX_REPORT_DETAIL_BYTES).
    pub salvaged_from: Option<String>,
    /// The fence of the writing run: the row is written only while it is
    /// the session's ([`StoreError::Fenced`](crate::StoreError::Fenced)
    /// otherwise).
    pub fence: u64,
}

impl NewReport {
    /// The row a store returns after inserting this request at `created_at`.
    /// One definition for every backend.
    pub fn stored_at(self, created_at: DateTime<Utc>) -> Report {
        Report {
            session_id: self.session_id,
            incident_id: self.incident_id,
            revision: self.revision,
            markdown_key: self.markdown_key,
            manifest_key: self.manifest_key,
            markdown_bytes: self.markdown_bytes,
            exit_reason: self.exit_reason,
            counters: self.counters,
            detail: self.detail,
            salvaged_from: self.salvaged_from,
            fence: self.fence,
            created_at,
        }
    }
}
