//! Kept output attached later: what a salvage of a settled session writes
//! ([`Coordination::attach_kept_output`](crate::Coordination::attach_kept_output)),
//! and the rules every backend judges it by.
//!
//! A run whose files or report row could not be stored (the blob store
//! refused, the disk was full) leaves its scratch dir kept and its session
//! settled without them. Once the cause is gone, a salvage stores that dir
//! and attaches the rows to the same revision, under a new fence, in one
//! transaction: the only write a settled row accepts.

use crate::validate::{invalid, new_artifact, new_report};
use crate::{NewArtifact, NewReport, Result, Session, SessionId, StoreError};

/// The rows a salvage of a settled session attaches to one of its
/// revisions: the stored files and the report row's new state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptOutput {
    /// The artifact rows of the stored files: all of the session and of
    /// `report`'s revision, at the new fence (the presented one plus one).
    pub artifacts: Vec<NewArtifact>,
    /// The revision's report row as the salvage sees it. When the revision
    /// has a row, only its document (when it had none), manifest key,
    /// `salvaged_from`, `detail` and fence are taken from here; otherwise
    /// this row is inserted.
    pub report: NewReport,
}

impl KeptOutput {
    /// Rows to attach for `report`'s revision.
    pub fn new(artifacts: Vec<NewArtifact>, report: NewReport) -> Self {
        Self { artifacts, report }
    }

    /// Checks the rows against the session `id` presented at `fence`:
    /// every row of that session, incident and revision, at `fence + 1`,
    /// and each valid on its own. The revision against the row's own is
    /// checked by the backend, under its lock.
    ///
    /// # Errors
    /// `InvalidInput` naming the first field that breaks a rule.
    pub fn validate(&self, id: SessionId, fence: u64) -> Result<()> {
        let r = &self.report;
        new_report(r)?;
        if r.session_id != id {
            return Err(invalid("session_id", "the report is of another session"));
        }
        let next = fence
            .checked_add(1)
            .ok_or_else(|| invalid("fence", "the session's fence cannot move past this one"))?;
        if r.fence != next {
            return Err(invalid(
                "fence",
                "the rows must present the fence after the salvage's",
            ));
        }
        for a in &self.artifacts {
            new_artifact(a)?;
            if a.session_id != id || a.incident_id != r.incident_id {
                return Err(invalid("session_id", "an artifact is of another session"));
            }
            if a.revision != r.revision {
                return Err(invalid("revision", "an artifact is of another revision"));
            }
            if a.fence != next {
                return Err(invalid("fence", "an artifact presents another fence"));
            }
        }
        let mut ids: Vec<_> = self.artifacts.iter().map(|a| a.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(StoreError::Conflict {
                entity: crate::Entity::Artifact,
                detail: "an artifact id appears twice in the salvage".to_owned(),
            });
        }
        Ok(())
    }
}

impl Session {
    /// Why this row refuses a salvage presented at `fence` for `revision`:
    /// [`Fenced`](StoreError::Fenced) when the row moved past `fence`,
    /// [`NotFinished`](StoreError::NotFinished) while a run is active (its
    /// own landing stores its dir), `InvalidInput` for a revision the
    /// session has not reached; `None` when a settled row (terminal or
    /// idle) may take it.
    pub fn salvage_refusal(&self, fence: u64, revision: u32) -> Option<StoreError> {
        if self.fence != fence {
            Some(StoreError::Fenced {
                session: self.id,
                presented: fence,
                current: self.fence,
            })
        } else if self.is_active() {
            Some(StoreError::NotFinished { session: self.id })
        } else if revision > self.revision {
            Some(invalid(
                "revision",
                "the session has not reached this revision",
            ))
        } else {
            None
        }
    }
}
