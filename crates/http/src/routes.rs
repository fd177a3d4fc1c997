//! The JSON routes: incidents and sessions, each a thin call into the
//! [`Manager`](korvus_session::Manager) or its store. No lifecycle rule
//! lives here: what may happen to a session is the manager's to decide.

use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use korvus_session::{ContextRequest, CreateOptions, CreateSession};
use korvus_store::{
    Artifact, ArtifactId, ArtifactKind, Entity, Incident, IncidentId, NewIncident, Priority,
    Session, SessionId, StoreError, StoreExt, WorkspaceRef,
};
use serde::{Deserialize, Serialize};

use crate::error::{parse_id, ApiError, ApiJson, ApiPath, ApiQuery};
use crate::pages::{self, PageQuery};
use crate::AppState;

type Result<T> = std::result::Result<T, ApiError>;

/// `POST /api/incidents`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewIncidentBody {
    title: String,
    #[serde(default)]
    workspace: Option<WorkspaceBody>,
}

/// A git repository on the server's disk and a commit pinned in it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkspaceBody {
    repo: String,
    commit: String,
}

/// `POST /api/incidents/{id}/sessions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewSessionBody {
    prompt: String,
    #[serde(default)]
    context: Vec<ContextBody>,
    /// 1..=9 (5 when left out): how urgent it is when it is queued.
    #[serde(default)]
    priority: Priority,
    /// The key it is queued under (a tenant, say); the incident when left
    /// out.
    #[serde(default)]
    queue_key: Option<String>,
    /// Its budget, set before its run starts.
    #[serde(default)]
    budget: Option<korvus_store::BudgetLimits>,
}

/// One inherited artifact of a new session.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextBody {
    artifact_id: String,
    #[serde(default)]
    role: String,
}

/// `POST /api/sessions/{id}/reopen` and `/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessageBody {
    message: String,
}

pub(crate) async fn create_incident(
    State(app): State<AppState>,
    ApiJson(body): ApiJson<NewIncidentBody>,
) -> Result<(StatusCode, Json<Incident>)> {
    if body.title.trim().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_input",
            "a title is required",
        ));
    }
    let new = NewIncident {
        title: body.title,
        workspace: body.workspace.map(|w| WorkspaceRef {
            repo: w.repo,
            commit: w.commit,
        }),
    };
    let incident = app.manager.store().create_incident(new).await?;
    Ok((StatusCode::CREATED, Json(incident)))
}

pub(crate) async fn list_incidents(
    State(app): State<AppState>,
    uri: OriginalUri,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response> {
    let page = query.page()?;
    let paged = app.manager.store().list_incidents(page.clone()).await?;
    Ok(pages::respond(&uri, &page, paged))
}

pub(crate) async fn get_incident(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Incident>> {
    let id: IncidentId = parse_id("incident", &id)?;
    Ok(Json(app.manager.store().get_incident(id).await?))
}

pub(crate) async fn close_incident(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Incident>> {
    let id: IncidentId = parse_id("incident", &id)?;
    Ok(Json(app.manager.store().close_incident(id).await?))
}

/// The `Idempotency-Key` header of a create: at most one session per key
/// in an incident.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

pub(crate) async fn create_session(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<NewSessionBody>,
) -> Result<(StatusCode, Json<Session>)> {
    let idempotency_key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::bad_request("invalid_input", "Idempotency-Key is not visible ASCII")
                })?
                .to_owned(),
        ),
    };
    let incident_id: IncidentId = parse_id("incident", &id)?;
    let context = body
        .context
        .into_iter()
        .map(|c| {
            Ok(
                ContextRequest::new(parse_id::<ArtifactId>("artifact", &c.artifact_id)?)
                    .with_role(c.role),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let mut request = CreateSession::new(incident_id, body.prompt).with_context(context);
    if let Some(limits) = body.budget {
        request = request.budget(limits);
    }
    let session = app
        .manager
        .create_with(request, {
            let mut v = CreateOptions::default();
            v.priority = body.priority;
            v.queue_key = body.queue_key;
            v.idempotency_key = idempotency_key;
            v
        })
        .await?;
    Ok((StatusCode::CREATED, Json(session)))
}

pub(crate) async fn list_sessions(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    uri: OriginalUri,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response> {
    let id: IncidentId = parse_id("incident", &id)?;
    let page = query.page()?;
    let store = app.manager.store();
    // An unknown incident is a 404, not an empty list.
    store.get_incident(id).await?;
    let paged = store.list_sessions(id, page.clone()).await?;
    Ok(pages::respond(&uri, &page, paged))
}

/// `GET /api/sessions/{id}` and the event stream's `end`: the row, with
/// its counters read live from the turn log while it runs, why it failed
/// where it waits in line ([`Manager::progress`](korvus_session::Manager::progress))
/// and where its budgets stand (none shown when the manager keeps none).
#[derive(Debug, Serialize)]
pub(crate) struct SessionDetail {
    #[serde(flatten)]
    session: Session,
    cause: Option<String>,
    queue_position: Option<u64>,
    budget: crate::budget::BudgetsView,
}

impl SessionDetail {
    /// The detail of `session`, a row just read. What cannot be read
    /// (the log, the report row, the queue) leaves the row as it is, with
    /// no cause and no place in line, and is logged: the row is still
    /// worth answering.
    pub(crate) async fn of(manager: &korvus_session::Manager, mut session: Session) -> Self {
        let budget = crate::budget::BudgetsView::of(manager, &session).await;
        match manager.progress(&session).await {
            Ok(progress) => {
                session.counters = progress.counters;
                Self {
                    session,
                    cause: progress.cause,
                    queue_position: progress.queue_position,
                    budget,
                }
            }
            Err(e) => {
                tracing::warn!(session = %session.id, error = %e, "the session's progress could not be read");
                Self {
                    session,
                    cause: None,
                    queue_position: None,
                    budget,
                }
            }
        }
    }
}

pub(crate) async fn get_session(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionDetail>> {
    let id: SessionId = parse_id("session", &id)?;
    let row = app.manager.store().get_session(id).await?;
    Ok(Json(SessionDetail::of(&app.manager, row).await))
}

pub(crate) async fn cancel_session(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Session>> {
    let id: SessionId = parse_id("session", &id)?;
    Ok(Json(app.manager.cancel(id).await?))
}

pub(crate) async fn reopen_session(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<Json<Session>> {
    let id: SessionId = parse_id("session", &id)?;
    Ok(Json(app.manager.reopen(id, &body.message).await?))
}

pub(crate) async fn send_message(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<Json<Session>> {
    let id: SessionId = parse_id("session", &id)?;
    Ok(Json(app.manager.send_message(id, &body.message).await?))
}

pub(crate) async fn list_reports(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    uri: OriginalUri,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response> {
    let id: SessionId = parse_id("session", &id)?;
    let page = query.page()?;
    let store = app.manager.store();
    store.get_session(id).await?;
    let paged = store.list_reports(id, page.clone()).await?;
    Ok(pages::respond(&uri, &page, paged))
}

/// A page of the artifacts users may see: rows of a hidden kind are left
/// out of the page they fall in, so a page may hold fewer than `limit`.
pub(crate) async fn list_artifacts(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    uri: OriginalUri,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Response> {
    let id: SessionId = parse_id("session", &id)?;
    let page = query.page()?;
    let store = app.manager.store();
    store.get_session(id).await?;
    let mut paged = store.list_session_artifacts(id, page.clone()).await?;
    paged.items.retain(is_served);
    Ok(pages::respond(&uri, &page, paged))
}

/// Whether an artifact is served to users: a real agent's kept state
/// (`agent_state`, its thread for a reopen) is not, nor is a run's mid-run
/// copy of a file (`checkpoint`, promoted or deleted when the run lands).
pub(crate) fn is_served(artifact: &Artifact) -> bool {
    !matches!(
        artifact.kind,
        ArtifactKind::AgentState | ArtifactKind::Checkpoint
    )
}

/// An artifact users may see, or `404 not_found`.
pub(crate) async fn served_artifact(app: &AppState, id: ArtifactId) -> Result<Artifact> {
    let artifact = app.manager.store().get_artifact(id).await?;
    if !is_served(&artifact) {
        return Err(StoreError::not_found(Entity::Artifact, id).into());
    }
    Ok(artifact)
}

pub(crate) async fn get_artifact(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Artifact>> {
    let id: ArtifactId = parse_id("artifact", &id)?;
    Ok(Json(served_artifact(&app, id).await?))
}
