//! How a run ends, decided in one place.
//!
//! Every way a revision can end is an [`Ending`]: what the runner did
//! (returned, failed, panicked, timed out, was cancelled or stopped for a
//! lapsed lease), a revision that never ran, a run another manager took
//! over, and a run that returned but whose report did not land.
//! [`Ending::settles`] is the one table that maps each to the status and
//! exit reason the session row and the report row take:
//!
//! | ending | status | exit reason | scratch dir |
//! |---|---|---|---|
//! | returned `awaiting_user` or `budget_reached` | `running` (idle) | as returned | kept if its output is not stored |
//! | returned anything else | `completed` | as returned | kept if its output is not stored |
//! | returned, report not authored / not uploaded / row not written | `failed` | `report_author_failed` / `report_upload_failed` / `report_persist_failed` | kept if its output is not stored |
//! | runner error | `failed` | the error's, else `runner_failed` | kept if its output is not stored |
//! | panicked | `failed` | `panicked` | kept if its output is not stored |
//! | timed out | `failed` | `timeout` | kept if its output is not stored |
//! | cancelled | `cancelled` | `cancelled` | kept if its output is not stored |
//! | stopped for a lapsed lease | `failed` | `lease_lost` | kept if its output is not stored |
//! | taken over (its manager gone) | `failed` (`cancelled` when a cancel was pending) | `owner_lost` (`cancelled`) | salvaged; kept if not stored whole |
//! | never ran | `failed` | why: `workspace_failed`, `context_refs_failed`, `turn_log_failed`, `runner_failed`, `owner_lost` | nothing of the agent's: removed |
//!
//! Three endings are one store transition each, decided where the row is
//! (`korvus_store`), not here: a forced cancel and a cancel of a queued
//! row (`Coordination::force_cancel`: `cancelled`, its run fenced off and
//! its dir left for a salvage) and a cancel of an idle row
//! (`Store::cancel_idle_session`: `cancelled`, no run to land).
//!
//! Whatever the ending, a dir whose output is not stored whole is kept
//! (`korvus_workspace::keep`) and a row whose outcome could not be written
//! keeps its dir too: that is decided by what the landing stored, not by
//! the ending. The launchers (create, admission, reopen, the supervisor)
//! hand a revision that cannot run to [`Inner::fail_early`](crate::inner::Inner)
//! with a [`Ending::NotRun`]; the supervisor lands every run that ran
//! (`land.rs`), a takeover settles a lost one (`salvage.rs`).

use korvus_runner::ExitReason;
use korvus_store::SessionStatus;

/// Every way a revision ends; see the module docs for the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The runner returned this exit reason (`awaiting_user`: it waits for
    /// the user; `budget_reached`: korvus stopped it at its budget — both
    /// leave the session idle).
    Returned(ExitReason),
    /// The runner returned an error, with the exit reason it named.
    RunnerFailed(Option<ExitReason>),
    /// The runner panicked.
    Panicked,
    /// The run exceeded the run timeout.
    TimedOut,
    /// The run was cancelled.
    Cancelled,
    /// This manager stopped the run: its lease may have lapsed.
    LeaseLost,
    /// A run that returned normally (not waiting) whose report did not
    /// land; the reason says which step failed.
    ReportFailed(ExitReason),
    /// Another manager took the run over, its own manager gone;
    /// `cancelled` when a cancel was pending or reached it meanwhile.
    TakenOver {
        /// Whether it ends `cancelled` instead of `owner_lost`.
        cancelled: bool,
    },
    /// The revision never ran; the reason names what failed first.
    NotRun(ExitReason),
}

impl Ending {
    /// The status and exit reason this ending settles with: the one table.
    pub(crate) fn settles(&self) -> (SessionStatus, ExitReason) {
        match self {
            Ending::Returned(r) if r.is_idle() => (SessionStatus::Running, r.clone()),
            Ending::Returned(r) => (SessionStatus::Completed, r.clone()),
            Ending::RunnerFailed(r) => (
                SessionStatus::Failed,
                r.clone().unwrap_or(ExitReason::RUNNER_FAILED),
            ),
            Ending::Panicked => (SessionStatus::Failed, ExitReason::PANICKED),
            Ending::TimedOut => (SessionStatus::Failed, ExitReason::TIMEOUT),
            Ending::Cancelled => (SessionStatus::Cancelled, ExitReason::CANCELLED),
            Ending::LeaseLost => (SessionStatus::Failed, ExitReason::LEASE_LOST),
            Ending::ReportFailed(r) | Ending::NotRun(r) => (SessionStatus::Failed, r.clone()),
            Ending::TakenOver { cancelled: true } => {
                (SessionStatus::Cancelled, ExitReason::CANCELLED)
            }
            Ending::TakenOver { cancelled: false } => {
                (SessionStatus::Failed, ExitReason::OWNER_LOST)
            }
        }
    }

    /// Whether the runner returned normally and the session ends with it
    /// (not waiting for the user): only such a run is judged by its
    /// report.
    pub(crate) fn returned_normally(&self) -> bool {
        matches!(self, Ending::Returned(r) if !r.is_idle())
    }

    /// This ending once its report failed with `reason`
    /// (`report_author_failed`, `report_upload_failed`,
    /// `report_persist_failed`): a run that returned normally fails with
    /// it, the later step's reason replacing an earlier one's (a report row
    /// not written outweighs a document not authored); any other ending
    /// keeps its own (its row only gets no document).
    pub(crate) fn with_report_failure(self, reason: ExitReason) -> Self {
        if self.returned_normally() || matches!(self, Ending::ReportFailed(_)) {
            Ending::ReportFailed(reason)
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds() {
        let done = ExitReason::COMPLETED;
        let rows = [
            (
                Ending::Returned(done.clone()),
                SessionStatus::Completed,
                done.clone(),
            ),
            (
                Ending::Returned(ExitReason::AWAITING_USER),
                SessionStatus::Running,
                ExitReason::AWAITING_USER,
            ),
            (
                Ending::Returned(ExitReason::BUDGET_REACHED),
                SessionStatus::Running,
                ExitReason::BUDGET_REACHED,
            ),
            (
                Ending::RunnerFailed(None),
                SessionStatus::Failed,
                ExitReason::RUNNER_FAILED,
            ),
            (
                Ending::RunnerFailed(Some(ExitReason::STALLED)),
                SessionStatus::Failed,
                ExitReason::STALLED,
            ),
            (
                Ending::Panicked,
                SessionStatus::Failed,
                ExitReason::PANICKED,
            ),
            (Ending::TimedOut, SessionStatus::Failed, ExitReason::TIMEOUT),
            (
                Ending::Cancelled,
                SessionStatus::Cancelled,
                ExitReason::CANCELLED,
            ),
            (
                Ending::LeaseLost,
                SessionStatus::Failed,
                ExitReason::LEASE_LOST,
            ),
            (
                Ending::TakenOver { cancelled: false },
                SessionStatus::Failed,
                ExitReason::OWNER_LOST,
            ),
            (
                Ending::TakenOver { cancelled: true },
                SessionStatus::Cancelled,
                ExitReason::CANCELLED,
            ),
            (
                Ending::NotRun(ExitReason::WORKSPACE_FAILED),
                SessionStatus::Failed,
                ExitReason::WORKSPACE_FAILED,
            ),
        ];
        for (ending, status, reason) in rows {
            assert_eq!(ending.settles(), (status, reason), "{ending:?}");
        }
    }

    #[test]
    fn only_a_normal_return_fails_for_its_report() {
        let upload = ExitReason::REPORT_UPLOAD_FAILED;
        assert_eq!(
            Ending::Returned(ExitReason::COMPLETED)
                .with_report_failure(upload.clone())
                .settles(),
            (SessionStatus::Failed, upload.clone())
        );
        let author = Ending::Returned(ExitReason::COMPLETED)
            .with_report_failure(ExitReason::REPORT_AUTHOR_FAILED);
        assert_eq!(
            author.with_report_failure(ExitReason::REPORT_PERSIST_FAILED),
            Ending::ReportFailed(ExitReason::REPORT_PERSIST_FAILED)
        );
        for kept in [
            Ending::Returned(ExitReason::AWAITING_USER),
            Ending::Cancelled,
            Ending::RunnerFailed(None),
            Ending::TimedOut,
        ] {
            assert_eq!(kept.clone().with_report_failure(upload.clone()), kept);
        }
    }
}
