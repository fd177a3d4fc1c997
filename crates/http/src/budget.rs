//! The budget routes: where a session's budgets stand (also part of its
//! detail), and setting its budget — which continues a session paused at
//! it once raised ([`Manager::set_budget`](korvus_session::Manager::set_budget));
//! an incident's budget, read and set (continuing nothing by itself).

use axum::extract::State;
use axum::Json;
use korvus_session::{Manager, SessionBudgets};
use korvus_store::{Budget, BudgetLimit, BudgetLimits, IncidentId, Session, SessionId, Spend};
use serde::Serialize;

use crate::error::{parse_id, ApiError, ApiJson, ApiPath};
use crate::AppState;

type Result<T> = std::result::Result<T, ApiError>;

/// One budget as the API shows it: its limits, what was spent, the
/// tokens left and the limit reached, if any.
#[derive(Debug, Serialize)]
pub(crate) struct BudgetView {
    limits: BudgetLimits,
    spent: Spend,
    remaining_tokens: Option<u64>,
    reached: Option<BudgetLimit>,
}

impl From<Budget> for BudgetView {
    fn from(b: Budget) -> Self {
        Self {
            limits: b.limits,
            spent: b.spent,
            remaining_tokens: b.remaining_tokens(),
            reached: b.reached(),
        }
    }
}

/// A session's budgets: its own and its incident's.
#[derive(Debug, Default, Serialize)]
pub(crate) struct BudgetsView {
    session: Option<BudgetView>,
    incident: Option<BudgetView>,
}

impl From<SessionBudgets> for BudgetsView {
    fn from(b: SessionBudgets) -> Self {
        Self {
            session: b.session.map(Into::into),
            incident: b.incident.map(Into::into),
        }
    }
}

impl BudgetsView {
    /// `session`'s budgets for its detail; what cannot be read (no
    /// budgets kept, the store failing) shows none and is logged.
    pub(crate) async fn of(manager: &Manager, session: &Session) -> Self {
        match manager.budget(session.id).await {
            Ok(b) => b.into(),
            Err(korvus_session::SessionError::NoBudgets) => Self::default(),
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "the session's budgets could not be read");
                Self::default()
            }
        }
    }
}

pub(crate) async fn get_budget(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<BudgetsView>> {
    let id: SessionId = parse_id("session", &id)?;
    Ok(Json(app.manager.budget(id).await?.into()))
}

pub(crate) async fn set_budget(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(limits): ApiJson<BudgetLimits>,
) -> Result<Json<BudgetsView>> {
    let id: SessionId = parse_id("session", &id)?;
    Ok(Json(app.manager.set_budget(id, limits).await?.into()))
}

/// An incident's budget: shared by every session of the incident.
#[derive(Debug, Serialize)]
pub(crate) struct IncidentBudgetView {
    incident: Option<BudgetView>,
}

pub(crate) async fn get_incident_budget(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<IncidentBudgetView>> {
    let id: IncidentId = parse_id("incident", &id)?;
    let budget = app.manager.incident_budget(id).await?;
    Ok(Json(IncidentBudgetView {
        incident: budget.map(Into::into),
    }))
}

pub(crate) async fn set_incident_budget(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(limits): ApiJson<BudgetLimits>,
) -> Result<Json<IncidentBudgetView>> {
    let id: IncidentId = parse_id("incident", &id)?;
    let budget = app.manager.set_incident_budget(id, limits).await?;
    Ok(Json(IncidentBudgetView {
        incident: Some(budget.into()),
    }))
}
