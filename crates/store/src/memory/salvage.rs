//! Kept output attached to a settled session in the memory store:
//! [`Coordination::attach_kept_output`](crate::Coordination::attach_kept_output).

use chrono::Utc;

use super::MemoryStore;
use crate::{
    constraint, Artifact, Entity, KeptOutput, Report, Result, Session, SessionId, StoreError,
};

impl MemoryStore {
    /// `attach_kept_output`, under one lock: every check first, then every
    /// write, so all of it happens or none.
    pub(super) fn attach_kept_now(
        &self,
        id: SessionId,
        fence: u64,
        kept: KeptOutput,
    ) -> Result<(Session, Report)> {
        kept.validate(id, fence)?;
        let mut inner = self.lock();
        let report = kept.report;
        // In the order the SQL stores find them: the row, its fence and
        // state, then the incident the rows name.
        if let Some(refused) = inner.session(id)?.salvage_refusal(fence, report.revision) {
            return Err(refused);
        }
        inner.session_in(id, report.incident_id, constraint::REPORTS_SESSION_FK)?;
        if let Some(taken) = kept
            .artifacts
            .iter()
            .find(|a| inner.artifacts.contains_key(&a.id))
        {
            return Err(StoreError::Conflict {
                entity: Entity::Artifact,
                detail: format!("artifact id {} already exists", taken.id),
            });
        }
        // Checked: nothing below can fail.
        let now = Utc::now();
        for a in kept.artifacts {
            let a: Artifact = a.stored_at(now);
            inner.artifacts.insert(a.id, a);
        }
        let key = (id, report.revision);
        let stands = match inner.reports.get_mut(&key) {
            Some(row) => {
                if row.markdown_key.is_none() {
                    row.markdown_key = report.markdown_key;
                    row.markdown_bytes = report.markdown_bytes;
                }
                row.manifest_key = report.manifest_key.or(row.manifest_key.take());
                row.salvaged_from = report.salvaged_from;
                row.detail = report.detail;
                row.fence = report.fence;
                row.clone()
            }
            None => {
                let row = report.stored_at(now);
                inner.reports.insert(key, row.clone());
                row
            }
        };
        let session = inner.sessions.get_mut(&id).expect("checked above");
        session.fence += 1;
        Ok((session.clone(), stands))
    }
}
