//! The rules a session row carries — queued, idle, active, which writes
//! it refuses — written once for every backend.

use crate::{Session, SessionStatus};

/// Where a session stands ([`Session::phase`]). The row's
/// [`status`](Session::status) is `running` in every phase but
/// [`Ended`](Phase::Ended); the phases tell apart what `running` covers.
///
/// How a session moves (the store method that moves it, on every
/// backend):
///
/// | from | to | by |
/// |---|---|---|
/// | (none) | `Queued` | `create_session` without a lease |
/// | (none) | `Claimed` | `create_session` with a lease |
/// | `Queued` | `Claimed` | `claim_next` |
/// | `ResumePending` | `Started` (its run had started) | `claim_next` |
/// | `Claimed` | `Started` | `mark_started` |
/// | `Claimed` | `Queued` | `release` |
/// | `Claimed`, `Started` | `ResumePending` | `release_for_resume` |
/// | `Claimed`, `Started` | the same, under a new owner at the next fence | `take_over` |
/// | `Started` | `Idle` | `settle_session` with `awaiting_user` or `budget_reached` |
/// | `Claimed`, `Started` | `Ended` | `settle_session`, `settle_with_report` |
/// | `Queued`, `ResumePending`, `Claimed`, `Started` | `Ended` | `force_cancel` |
/// | `Idle` | `Ended` | `cancel_idle_session` |
/// | `Idle`, `Ended` | `Queued` or `Claimed` | `continue_session` (an answer, a reopen: the next revision) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Waiting for a manager of its pool to claim it: unowned, not started.
    Queued,
    /// Its interrupted run waits, like a queued row, to be resumed by a
    /// manager of its pool ([`Session::resume_pending`]).
    ResumePending,
    /// A manager owns it and has not started its run yet.
    Claimed,
    /// Its run started ([`Session::started_at`]) and is active.
    Started,
    /// Its runner returned to wait for the user (`awaiting_user`), or
    /// korvus stopped it at its budget (`budget_reached`): no run is
    /// active until an answer (or a raised budget) continues it.
    Idle,
    /// Terminal: `completed`, `failed` or `cancelled` (until a reopen).
    Ended,
}

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

    /// `true` for an idle session: `running` with an exit reason of
    /// [`exit_reason::IDLE`](crate::exit_reason::IDLE) —
    /// [`AWAITING_USER`](crate::exit_reason::AWAITING_USER) (the runner
    /// returned to wait for the user) or
    /// [`BUDGET_REACHED`](crate::exit_reason::BUDGET_REACHED) (korvus
    /// stopped the run at its budget) — and no run is active. Such a row is
    /// recognisable on any replica; only
    /// [`cancel_idle_session`](crate::Store::cancel_idle_session) and
    /// [`continue_session`](crate::Store::continue_session) move it on.
    pub fn is_idle(&self) -> bool {
        self.status == SessionStatus::Running
            && self
                .exit_reason
                .as_deref()
                .is_some_and(|r| crate::exit_reason::IDLE.contains(&r))
    }

    /// `true` while a run is active: `running` and not
    /// [idle](Session::is_idle). Only an active row accepts the writes of
    /// its run (settlement, report row, artifact rows); a terminal or idle
    /// row refuses them with
    /// [`StoreError::NotActive`](crate::StoreError::NotActive).
    pub fn is_active(&self) -> bool {
        self.status == SessionStatus::Running && !self.is_idle()
    }

    /// Where the session stands, derived from its row: the one name for
    /// what the predicates above tell apart.
    pub fn phase(&self) -> Phase {
        if self.status.is_terminal() {
            Phase::Ended
        } else if self.is_idle() {
            Phase::Idle
        } else if self.is_resume_pending() {
            Phase::ResumePending
        } else if self.is_queued() {
            Phase::Queued
        } else if self.started_at.is_none() {
            Phase::Claimed
        } else {
            Phase::Started
        }
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
