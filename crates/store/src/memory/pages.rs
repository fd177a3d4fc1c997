//! Pages of the memory store's lists (see [`Page`]): ranges of its ordered
//! maps where it keeps one, a scan otherwise.

use std::ops::Bound;

use super::MemoryStore;
use crate::{
    Artifact, ArtifactId, Incident, IncidentId, Page, Paged, Report, Result, Session, SessionId,
};

impl MemoryStore {
    pub(super) fn incidents_page(&self, page: &Page) -> Result<Paged<Incident>> {
        let after = IncidentId::from_uuid(page.after_id()?);
        let rows = self
            .lock()
            .incidents
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take(page.limit() as usize + 1)
            .map(|(_, i)| i.clone())
            .collect();
        Ok(page.finish(rows, |i| i.id.to_string()))
    }

    pub(super) fn sessions_page(
        &self,
        incident: IncidentId,
        page: &Page,
    ) -> Result<Paged<Session>> {
        let after = page.after_number()?;
        let inner = self.lock();
        let mut sessions: Vec<&Session> = inner
            .sessions
            .values()
            .filter(|s| s.incident_id == incident && s.seq > after)
            .collect();
        sessions.sort_by_key(|s| s.seq);
        sessions.truncate(page.limit() as usize + 1);
        let rows = sessions.into_iter().cloned().collect();
        Ok(page.finish(rows, |s| s.seq.to_string()))
    }

    pub(super) fn reports_page(&self, session: SessionId, page: &Page) -> Result<Paged<Report>> {
        let after = page.after_number()?;
        let rows = self
            .lock()
            .reports
            .range((
                Bound::Excluded((session, after)),
                Bound::Included((session, u32::MAX)),
            ))
            .take(page.limit() as usize + 1)
            .map(|(_, r)| r.clone())
            .collect();
        Ok(page.finish(rows, |r| r.revision.to_string()))
    }

    /// One page of the artifacts `keep` selects, by id (a scan: the memory
    /// store keeps no per-session index).
    pub(super) fn artifacts_page(
        &self,
        page: &Page,
        keep: impl Fn(&Artifact) -> bool,
    ) -> Result<Paged<Artifact>> {
        let after = ArtifactId::from_uuid(page.after_id()?);
        let rows = self
            .lock()
            .artifacts
            .range((Bound::Excluded(after), Bound::Unbounded))
            .map(|(_, a)| a)
            .filter(|a| keep(a))
            .take(page.limit() as usize + 1)
            .cloned()
            .collect();
        Ok(page.finish(rows, |a| a.id.to_string()))
    }
}
