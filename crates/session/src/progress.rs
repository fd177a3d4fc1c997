//! [`Manager::progress`]: what a session's row does not say by itself —
//! its usage while a run goes, why it failed, where it waits in line —
//! read from its turn log, report and queue, so any replica answers and a
//! run writes nothing extra.

use korvus_log::{Access, LogId};
use korvus_store::{Counters, Session, SessionStatus, StoreError};

use crate::{Manager, Result};

/// A session's live usage and, once it ended without completing, its cause.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// The current run's usage: while the session is active, counted from
    /// its turn log — the turn starts, tool calls and usage events the run
    /// at the row's fence appended — as the row's counters are once it
    /// settles (the runner's figures when it reports larger ones); once it
    /// settled, the row's.
    pub counters: Counters,
    /// Why the session ended as it did. For a failed one: its current
    /// revision's report detail, else the last note korvus wrote in its
    /// log since the revision began. For a cancelled one: its report's
    /// detail when the report is of the cancel. `None` otherwise, and
    /// when neither says anything.
    pub cause: Option<String>,
    /// For a session waiting in its pool's line (queued, or its resume
    /// pending), an estimate of its place, 1 being next
    /// ([`Coordination::queue_position`](korvus_store::Coordination::queue_position)).
    pub queue_position: Option<u64>,
}

impl Manager {
    /// What `session` (a row just read) used so far, where it waits in
    /// line if it is queued and, if it failed or was cancelled, why. Reads
    /// the turn log (and, for a cause, the report row); writes nothing. A
    /// session whose log does not exist yet (queued, never started) keeps
    /// the row's counters.
    ///
    /// # Errors
    /// `Log` when the log cannot be read; `Store` when the report row
    /// cannot be read for a reason other than its absence.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads (the log through a read handle).
    pub async fn progress(&self, session: &Session) -> Result<Progress> {
        let mut progress = Progress {
            counters: session.counters,
            cause: None,
            queue_position: None,
        };
        if session.is_queued() || session.is_resume_pending() {
            progress.queue_position = self.store().queue_position(session.id).await?;
        }
        let ended_badly = matches!(
            session.status,
            SessionStatus::Failed | SessionStatus::Cancelled
        );
        if !session.is_active() && !ended_badly {
            return Ok(progress);
        }
        let log = match self
            .inner
            .logs
            .open(LogId::from_uuid(session.id.as_uuid()), Access::Read)
            .await
        {
            Ok(log) => Some(log),
            Err(korvus_log::LogError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        if session.is_active() {
            if let Some(log) = &log {
                progress.counters = crate::usage::logged(log, session.fence).await?;
            }
            return Ok(progress);
        }
        progress.cause = match self.store().get_report(session.id, session.revision).await {
            // An idle revision cancelled keeps its waiting report: its
            // detail is not the cancel's.
            Ok(report) if Some(&report.exit_reason) == session.exit_reason.as_ref() => {
                report.detail.filter(|d| !d.trim().is_empty())
            }
            Ok(_) | Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        if progress.cause.is_none() && session.status == SessionStatus::Failed {
            if let Some(log) = &log {
                progress.cause = crate::closers::last_korvus_note(log).await?;
            }
        }
        Ok(progress)
    }
}
