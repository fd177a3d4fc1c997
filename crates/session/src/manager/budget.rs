//! [`Manager::set_budget`] and the other budget calls: a session's or an
//! incident's budget set in the store, and a session paused at its budget
//! continued once it is raised.

use korvus_runner::ExitReason;
use korvus_store::{Budget, BudgetLimits, BudgetScope, Budgets, IncidentId, SessionId};
use tracing::info;

use crate::manager::Manager;
use crate::{Result, SessionError};

/// What a session paused at its budget is told when the budget is raised
/// (its agent resumes its own thread with this message).
pub const BUDGET_RAISED_MESSAGE: &str =
    "korvus: the budget of this session was raised; continue where you stopped.";

/// Where a session's budgets stand: its own and its incident's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionBudgets {
    /// The session's own budget, if one is set.
    pub session: Option<Budget>,
    /// Its incident's budget (shared by every session of the incident),
    /// if one is set.
    pub incident: Option<Budget>,
}

impl SessionBudgets {
    /// Whether either budget is reached.
    pub fn reached(&self) -> bool {
        [self.session, self.incident]
            .iter()
            .flatten()
            .any(|b| b.reached().is_some())
    }
}

impl Manager {
    fn budgets(&self) -> Result<&dyn Budgets> {
        self.inner.budgets.as_deref().ok_or(SessionError::NoBudgets)
    }

    /// Sets the budget of session `id` (replacing its limits, keeping what
    /// it spent). When the session is paused at its budget (idle, exit
    /// reason `budget_reached`) and neither its budget nor its incident's
    /// is reached any more, it continues at once — the next revision, its
    /// agent resuming its own thread with [`BUDGET_RAISED_MESSAGE`] —
    /// exactly as [`send_message`](Manager::send_message) continues it.
    /// Returns where the budgets stand.
    ///
    /// # Errors
    /// `NoBudgets` (the manager keeps none), `NotFound`, `Store`
    /// (`InvalidInput` for a limit out of range); a continue's errors
    /// (`ShuttingDown`, `OutputKept`, …) — the budget is set either way.
    ///
    /// # Cancel safety
    /// The budget is one store write, committed whole or not; a continue,
    /// once begun, runs on its own task as
    /// [`send_message`](Manager::send_message)'s does.
    pub async fn set_budget(&self, id: SessionId, limits: BudgetLimits) -> Result<SessionBudgets> {
        let row = self.inner.store.get_session(id).await?;
        self.budgets()?
            .set_budget(BudgetScope::Session(id), limits)
            .await?;
        let standing = self.standing(&row).await?;
        // The row read before the budget was set: a paused session is
        // continued by a conditional transition, so a session that moved
        // meanwhile is left as it is.
        let paused = row.is_idle()
            && row.exit_reason.as_deref() == Some(ExitReason::BUDGET_REACHED.as_str());
        if paused && !standing.reached() {
            info!(session_id = %id, "budget raised; the session continues");
            match self.send_message(id, BUDGET_RAISED_MESSAGE).await {
                // Another caller moved it first (a cancel, an answer).
                Ok(_) | Err(SessionError::NotAwaitingUser { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(standing)
    }

    /// Sets the budget shared by every session of incident `id`. It
    /// continues no session by itself: a session of the incident paused at
    /// its budget continues through [`set_budget`](Manager::set_budget)
    /// (its own limits again, or raised) or an answer.
    ///
    /// # Errors
    /// `NotFound` for an unknown incident (with budgets kept or not),
    /// `NoBudgets`, `Store` (`InvalidInput` for a limit out of range).
    ///
    /// # Cancel safety
    /// One store write, committed whole or not.
    pub async fn set_incident_budget(
        &self,
        id: IncidentId,
        limits: BudgetLimits,
    ) -> Result<Budget> {
        if self.inner.budgets.is_none() {
            // `NotFound` for an unknown incident comes first, as it does
            // for a session's budget.
            self.inner.store.get_incident(id).await?;
        }
        let budget = self
            .budgets()?
            .set_budget(BudgetScope::Incident(id), limits)
            .await?;
        Ok(budget)
    }

    /// Where the budget of incident `id` stands: `None` when none is set.
    ///
    /// # Errors
    /// `NotFound` (an unknown incident), `NoBudgets`, `Store`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn incident_budget(&self, id: IncidentId) -> Result<Option<Budget>> {
        // The incident first, as a session's budget calls read the session
        // first: an unknown one is `NotFound` with or without budgets.
        self.inner.store.get_incident(id).await?;
        Ok(self.budgets()?.budget(BudgetScope::Incident(id)).await?)
    }

    /// Where session `id`'s budgets stand: its own and its incident's.
    ///
    /// # Errors
    /// `NoBudgets`, `NotFound`, `Store`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn budget(&self, id: SessionId) -> Result<SessionBudgets> {
        let row = self.inner.store.get_session(id).await?;
        self.standing(&row).await
    }

    /// Where `row`'s budgets stand: two reads, nothing written.
    async fn standing(&self, row: &korvus_store::Session) -> Result<SessionBudgets> {
        let budgets = self.budgets()?;
        let (session, incident) = futures::try_join!(
            budgets.budget(BudgetScope::Session(row.id)),
            budgets.budget(BudgetScope::Incident(row.incident_id)),
        )?;
        Ok(SessionBudgets { session, incident })
    }
}
