//! One home per run: which run it is ([`RunKey`]: session, incident,
//! revision, fence — each stored once; all that landing reads), what
//! preparing reads ([`Plan`], which then goes into the runner's context),
//! and the run itself while its supervisor drives it ([`Run`]).
//!
//! Every phase module (`prepare.rs`, `execute.rs`, `land.rs`, `write.rs`)
//! imports from here and from no sibling phase; the phases of a run are
//! methods of [`Run`] written in those modules, and the supervisor
//! (`supervise.rs`) calls them in order; `create.rs` / `reopen.rs` build
//! the plan. The imports form a DAG: run ← prepare / execute / land /
//! write ← supervise ← create / reopen.

use std::sync::Arc;

use korvus_log::LogHandle;
use korvus_store::{Artifact, Incident, IncidentId, Session, SessionId};
use tokio_util::sync::CancellationToken;

use crate::inner::Inner;
use crate::live::LiveRun;

/// One run of a revision, as its supervisor drives it through its phases:
/// what every phase reads — the manager's shared state, which run this is,
/// its turn log, its cancellation and its live-run entry — held once, with
/// the phases as its methods (`prepare`, `pin_docs`, `execute`, `land`,
/// `close_log`, `go_back`), the way ripgrep's searcher core holds one
/// search. Borrowed by the supervisor's task for the run's whole life; a
/// parked run holds it once.
pub(crate) struct Run<'r> {
    pub(crate) inner: &'r Arc<Inner>,
    /// The run's entry in the live-run table.
    pub(crate) live: &'r LiveRun,
    pub(crate) key: RunKey,
    /// The run's turn log, open at its fence.
    pub(crate) log: Arc<LogHandle>,
    /// Fires when the run must stop (its live entry's token).
    pub(crate) token: CancellationToken,
}

impl<'r> Run<'r> {
    /// The run `key` of `live`'s entry, writing to `log`; its token is the
    /// live entry's.
    pub(crate) fn new(
        inner: &'r Arc<Inner>,
        live: &'r LiveRun,
        key: RunKey,
        log: Arc<LogHandle>,
    ) -> Self {
        Self {
            inner,
            live,
            key,
            log,
            token: live.cancel.clone(),
        }
    }
}

/// Which run this is: the revision it lands and the fence it presents.
///
/// Every write of the run — report row, artifact rows, settlement, the
/// turn log's epoch — presents `fence`; its report row and artifacts are
/// of `revision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunKey {
    pub(crate) session: SessionId,
    pub(crate) incident: IncidentId,
    /// The report revision the run lands.
    pub(crate) revision: u32,
    /// The fence of the run: its writes present it.
    pub(crate) fence: u64,
}

impl RunKey {
    /// The run a session row is at: its revision and fence (right after
    /// create, or after the store's continue transition).
    pub(crate) fn of(session: &Session) -> Self {
        Self {
            session: session.id,
            incident: session.incident_id,
            revision: session.revision,
            fence: session.fence,
        }
    }
}

/// What the second and later iterations of a session need, read before
/// the store's transition.
#[derive(Debug)]
pub(crate) struct Resume {
    pub(crate) message: String,
    pub(crate) own: Vec<Artifact>,
    /// A resumed attempt's files: the revision's last checkpoint, restored
    /// after `own` as output of this revision (stored again at its
    /// landing, never skipped as unchanged earlier output).
    pub(crate) checkpoint: Vec<Artifact>,
    /// A resumed attempt's: what it continues from.
    pub(crate) resumed: Option<korvus_runner::Resumed>,
}

impl Resume {
    /// The message the runner gets, and what a resumed attempt continues
    /// from (the rest went into the prepared scratch dir).
    pub(crate) fn split(
        resume: Option<Resume>,
    ) -> (Option<String>, Option<korvus_runner::Resumed>) {
        match resume {
            Some(r) => (Some(r.message), r.resumed),
            None => (None, None),
        }
    }

    /// A continue's resume (reopen, answer): its message and the session's
    /// earlier output.
    pub(crate) fn continued(message: String, own: Vec<Artifact>) -> Self {
        Self {
            message,
            own,
            checkpoint: Vec::new(),
            resumed: None,
        }
    }
}

/// The value of `boxed`, its box freed on return. Moving out of a box with
/// `*boxed` frees the box only when the variable goes out of scope: in an
/// async fn that is when the future ends, so a parked run would keep the
/// emptied box for as long as it runs.
#[allow(clippy::boxed_local)] // The point: the box is consumed here.
pub(crate) fn unbox<T>(boxed: Box<T>) -> T {
    *boxed
}

/// Everything one run reads: its key, the session row as the runner sees
/// it, the incident, the inherited context and, for a continued session,
/// what it resumes from.
pub(crate) struct Plan {
    key: RunKey,
    session: Session,
    pub(crate) incident: Incident,
    pub(crate) inherited: Vec<(Artifact, String)>,
    pub(crate) resume: Option<Resume>,
}

impl Plan {
    /// The plan of the run `session` (the row the create or continue
    /// transition returned) starts at report revision `revision`.
    ///
    /// `revision` is the row's own unless the store already holds reports
    /// beyond it (never reuse a revision); the row the runner sees then
    /// carries the same number, so the run has one revision wherever it is
    /// read.
    pub(crate) fn new(
        mut session: Session,
        revision: u32,
        incident: Incident,
        inherited: Vec<(Artifact, String)>,
        resume: Option<Resume>,
    ) -> Self {
        session.revision = revision;
        Self {
            key: RunKey::of(&session),
            session,
            incident,
            inherited,
            resume,
        }
    }

    /// Which run this is.
    pub(crate) fn key(&self) -> RunKey {
        self.key
    }

    /// The session row as the run started it.
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// The session row and the incident, for the runner's context: the
    /// plan is not needed past that point (landing needs only the
    /// [`RunKey`]), so a parked run holds one copy of each, not two.
    pub(crate) fn into_parts(self) -> (Session, Incident) {
        (self.session, self.incident)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use korvus_store::{MemoryStore, NewIncident, NewSession, Store};

    #[tokio::test]
    async fn a_plan_has_one_revision_and_one_fence() {
        let store = MemoryStore::new();
        let incident = store
            .create_incident(NewIncident {
                title: "t".into(),
                workspace: None,
            })
            .await
            .unwrap();
        let session = store
            .create_session(NewSession {
                runner: None,
                admission: Default::default(),
                lease: None,
                id: SessionId::new(),
                incident_id: incident.id,
                prompt: "p".into(),
                workspace_ref: None,
            })
            .await
            .unwrap();
        // A store already holding reports beyond the row's revision.
        let plan = Plan::new(session, 3, incident, Vec::new(), None);
        assert_eq!(plan.key().revision, 3);
        assert_eq!(plan.session().revision, 3, "the row the runner sees agrees");
        assert_eq!(plan.key().fence, plan.session().fence);
        assert_eq!(plan.key(), RunKey::of(plan.session()));
    }
}
