//! The rules a session row carries — queued, idle, active, which writes
//! it refuses — written once for every backend.

use crate::{Session, SessionStatus};

impl Session {
    /// `true` for a queued session: active (running, not idle), owned by
    /// no manager and not started — waiting for a manager of its pool to
    /// claim it. A queued row is never an orphan.
    pub fn is_queued(&self) -> bool {
        self.is_active() && self.owner.is_none() && self.started_at.is_none()
    }

    /// `true` for a session whose interrupted run waits to be resumed
    /// (see [`Session::resume_pending`]): active, owned by no manager, and
    /// claimable like a queued row once [`Session::resume_after`] passed.
    pub fn is_resume_pending(&self) -> bool {
        self.is_active() && self.resume_pending
    }

    /// `true` for an idle session: `running` with exit reason
    /// [`AWAITING_USER`](crate::exit_reason::AWAITING_USER) — the runner
    /// returned to wait for the user and no run is active. Such a row is
    /// recognisable on any replica; only
    /// [`cancel_idle_session`](crate::Store::cancel_idle_session) and
    /// [`continue_session`](crate::Store::continue_session) move it on.
    pub fn is_idle(&self) -> bool {
        self.status == SessionStatus::Running
            && self.exit_reason.as_deref() == Some(crate::exit_reason::AWAITING_USER)
    }

    /// `true` while a run is active: `running` and not
    /// [idle](Session::is_idle). Only an active row accepts the writes of
    /// its run (settlement, report row, artifact rows); a terminal or idle
    /// row refuses them with
    /// [`StoreError::NotActive`](crate::StoreError::NotActive).
    pub fn is_active(&self) -> bool {
        self.status == SessionStatus::Running && !self.is_idle()
    }

    /// Why this row refuses a write (settlement, report row, artifact row)
    /// of the run at `fence`: [`Fenced`](crate::StoreError::Fenced) when
    /// the row's fence is another, [`NotActive`](crate::StoreError::NotActive)
    /// when the run at that fence already ended; `None` when it accepts it.
    /// Every backend judges writes by this rule.
    pub fn refusal(&self, fence: u64) -> Option<crate::StoreError> {
        if self.fence != fence {
            Some(crate::StoreError::Fenced {
                session: self.id,
                presented: fence,
                current: self.fence,
            })
        } else if !self.is_active() {
            Some(crate::StoreError::NotActive {
                session: self.id,
                fence,
            })
        } else {
            None
        }
    }

    /// Why [`Store::delete_session`](crate::Store::delete_session) at
    /// `fence` must leave this row: [`Fenced`](crate::StoreError::Fenced)
    /// when the row moved past `fence`,
    /// [`NotFinished`](crate::StoreError::NotFinished) when it is not
    /// terminal; `None` when it may go (as far as the row itself says).
    pub fn deletion_refusal(&self, fence: u64) -> Option<crate::StoreError> {
        if self.fence != fence {
            Some(crate::StoreError::Fenced {
                session: self.id,
                presented: fence,
                current: self.fence,
            })
        } else if !self.status.is_terminal() {
            Some(crate::StoreError::NotFinished { session: self.id })
        } else {
            None
        }
    }

    /// Whether this row already holds exactly what `settlement` writes
    /// (status, exit reason, counters, at its fence): a retried settlement
    /// whose first attempt committed finds this, and the store answers it
    /// `Ok` instead of refusing it.
    pub fn holds(&self, settlement: &crate::Settlement) -> bool {
        self.fence == settlement.fence
            && self.status == settlement.status
            && self.exit_reason == settlement.exit_reason
            && self.counters == settlement.counters
    }
}
