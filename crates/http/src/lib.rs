//! The HTTP surface of korvus: a router an embedding service mounts to give
//! its users sessions over HTTP — JSON routes, a live event stream, safe
//! downloads and a small web view.
//!
//! # Overview
//!
//! [`router`] turns a [`Manager`] into an [`axum::Router`]. The embedder
//! nests it under a path of its own and wraps it in its own authentication;
//! the router adds no lifecycle rule of its own — every route is one call
//! into the manager (or, for reads, its store), and every failure is an
//! [`ApiError`]: a status code and a JSON body `{"error", "code"}`.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the web view (static files compiled in) |
//! | `POST /api/incidents`, `GET /api/incidents` | create, list |
//! | `GET /api/incidents/{id}`, `POST …/close` | get, close |
//! | `POST /api/incidents/{id}/sessions`, `GET …` | create a session, list them |
//! | `GET /api/incidents/{id}/budget`, `POST …` | the incident's budget: read, set |
//! | `GET /api/sessions/{id}` | the session row, its counters live, its cause and place in line |
//! | `POST /api/sessions/{id}/cancel`, `…/reopen`, `…/messages` | steer it |
//! | `GET /api/sessions/{id}/budget`, `POST …` | its and its incident's budgets; set its own |
//! | `GET /api/sessions/{id}/events` | Server-Sent Events: stored prefix, live events, `end` |
//! | `GET /api/sessions/{id}/reports`, `…/reports/{revision}` | report rows, one report's markdown |
//! | `GET /api/sessions/{id}/artifacts`, `GET /api/artifacts/{id}`, `…/content` | artifacts and their bytes |
//! | `GET /api/sessions/{id}/log` | the turn log as JSON lines |
//!
//! [`guard`] is the token check of `korvus serve` (bearer token or a cookie
//! exchanged for it, `Host` and `Origin` checks, CSRF): an embedder with an
//! auth layer of its own does not need it. [`Server`] is what `korvus
//! serve` runs the router on: HTTP/1.1 with a deadline on request heads.
//!
//! # Why it is shaped like this
//!
//! Agent output is untrusted, and a browser is the one place it could turn
//! into running code. So downloads are attachments under a sandboxing
//! policy (`download.rs`), the view renders markdown with DOM text nodes
//! only and is served under `script-src 'self'` (`view.rs`), and ids and
//! bodies are checked before anything is called. Many browsers following
//! one session share one reader of its log (`events.rs`), so a thousand
//! viewers are not a thousand pollers of the database.
//!
//! This crate sits beside the backends (it depends on `korvus-session` and
//! the seams, never on a backend crate), so it compiles without sqlx or the
//! AWS SDK; `korvus-cli` composes it with concrete backends.
//!
//! # Example: mounted under the embedder's own auth
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use async_trait::async_trait;
//! # use korvus_session::{Manager, RunContext, RunError, RunOutcome, Runner};
//! # #[derive(Debug)] struct Agent;
//! # #[async_trait] impl Runner for Agent {
//! #     async fn run(&self, _: RunContext) -> Result<RunOutcome, RunError> {
//! #         Ok(RunOutcome::completed(Default::default()))
//! #     }
//! #     async fn resume(&self, c: RunContext, _: String) -> Result<RunOutcome, RunError> { self.run(c).await }
//! # }
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let manager = Manager::builder(Arc::new(korvus_store::MemoryStore::new()), Arc::new(Agent)).build();
//! use axum::{extract::Request, http::StatusCode, middleware::{self, Next}, response::Response};
//!
//! async fn my_auth(req: Request, next: Next) -> Result<Response, StatusCode> {
//!     // Your session cookie, OIDC or mTLS check goes here.
//!     match req.headers().get("x-user") {
//!         Some(_) => Ok(next.run(req).await),
//!         None => Err(StatusCode::UNAUTHORIZED),
//!     }
//! }
//!
//! let korvus = korvus_http::router(manager.clone()).layer(middleware::from_fn(my_auth));
//! let app = korvus_http::mount(axum::Router::new(), "/korvus", korvus);
//! axum::serve(tokio::net::TcpListener::bind("127.0.0.1:3000").await?, app).await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod budget;
mod download;
mod error;
mod events;
mod gate;
pub mod guard;
pub mod openapi;
mod pages;
mod routes;
mod server;
mod view;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub mod webhook;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use korvus_session::Manager;

pub use crate::error::{ApiError, CODES as ERROR_CODES};
pub use crate::events::{SSE_FOLLOWERS, SSE_SUBSCRIBERS};
pub use crate::gate::{MAX_HEAD_BYTES, MAX_URI_BYTES};
pub use crate::guard::Guard;
pub use crate::server::{Server, DEFAULT_HEADER_READ_TIMEOUT};

/// The default limit on a request body: 64 KiB, room for a long prompt.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// What every handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) manager: Manager,
    pub(crate) hub: events::Hub,
}

/// Options of the router; [`Api::default`] is what [`router`] uses.
#[derive(Debug, Clone)]
#[must_use = "the options do nothing until a router is built from them"]
pub struct Api {
    body_limit: usize,
    view: bool,
}

impl Default for Api {
    fn default() -> Self {
        Self {
            body_limit: DEFAULT_BODY_LIMIT,
            view: true,
        }
    }
}

impl Api {
    /// The largest request body accepted (default [`DEFAULT_BODY_LIMIT`]);
    /// a larger one is refused with `413 body_too_large` before any
    /// handler runs.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Whether the web view is served at `/` (default `true`); without it
    /// only `/api/…` is routed.
    pub fn view(mut self, serve: bool) -> Self {
        self.view = serve;
        self
    }

    /// The router over `manager`.
    pub fn router(self, manager: Manager) -> Router {
        self.build(manager).0
    }

    /// The router, plus a handle that reports how many sessions have a
    /// live follower (for metrics and tests).
    pub fn router_with_stats(self, manager: Manager) -> (Router, Stats) {
        self.build(manager)
    }

    fn build(self, manager: Manager) -> (Router, Stats) {
        let state = AppState {
            manager,
            hub: events::Hub::default(),
        };
        let stats = Stats {
            hub: state.hub.clone(),
        };
        let api = api_routes()
            .router
            .fallback(no_route)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(self.body_limit))
            .with_state(state);
        let mut router = Router::new().nest("/api", api);
        if self.view {
            router = router.merge(view::routes());
        }
        // The view's routes answer a wrong method like the API's do.
        let router = router
            .fallback(no_route)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(tower_http::trace::TraceLayer::new_for_http());
        (router, stats)
    }
}

/// The API's routes as they are added: each method and path is recorded,
/// so the OpenAPI document can be checked against them
/// ([`openapi::check`]).
struct Routes {
    router: Router<AppState>,
    added: Vec<(Method, &'static str)>,
}

impl Routes {
    fn new() -> Self {
        Self {
            router: Router::new(),
            added: Vec::new(),
        }
    }

    fn get<H, T>(mut self, path: &'static str, handler: H) -> Self
    where
        H: axum::handler::Handler<T, AppState>,
        T: 'static,
    {
        self.added.push((Method::GET, path));
        let route = query_check(Method::GET, path, get(handler));
        self.router = self.router.route(path, route);
        self
    }

    fn post<H, T>(mut self, path: &'static str, handler: H) -> Self
    where
        H: axum::handler::Handler<T, AppState>,
        T: 'static,
    {
        self.added.push((Method::POST, path));
        let route = query_check(Method::POST, path, post(handler));
        self.router = self.router.route(path, route);
        self
    }
}

/// Refuses, with `400 invalid_input` naming it, a query parameter the
/// route does not take (`takes`): the ones it takes are those the OpenAPI
/// table documents for it, so the document and the router agree. (A
/// repeated parameter is refused by the route's own extractor.)
async fn known_query(
    State(takes): State<Arc<[&'static str]>>,
    request: Request,
    next: Next,
) -> Response {
    match unknown_param(request.uri(), &takes) {
        Some(name) => ApiError::bad_request(
            "invalid_input",
            format!("this route takes no query parameter `{name}`"),
        )
        .into_response(),
        None => next.run(request).await,
    }
}

fn query_check<T>(method: Method, path: &str, route: MethodRouter<T>) -> MethodRouter<T>
where
    T: Clone + Send + Sync + 'static,
{
    let takes: Arc<[&'static str]> = openapi::query_params(&method, path).into();
    route.route_layer(middleware::from_fn_with_state(takes, known_query))
}

/// The first query parameter of `uri` not in `takes` (names decoded as
/// the extractors decode them; a query that does not decode is left to
/// them).
fn unknown_param(uri: &axum::http::Uri, takes: &[&str]) -> Option<String> {
    let query = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri).ok()?;
    query
        .0
        .into_iter()
        .map(|(name, _)| name)
        .find(|name| !takes.contains(&name.as_str()))
}

/// Every API route, under `/api`.
fn api_routes() -> Routes {
    Routes::new()
        .post("/incidents", routes::create_incident)
        .get("/incidents", routes::list_incidents)
        .get("/incidents/{id}", routes::get_incident)
        .post("/incidents/{id}/close", routes::close_incident)
        .post("/incidents/{id}/sessions", routes::create_session)
        .get("/incidents/{id}/sessions", routes::list_sessions)
        .get("/incidents/{id}/budget", budget::get_incident_budget)
        .post("/incidents/{id}/budget", budget::set_incident_budget)
        .get("/sessions/{id}", routes::get_session)
        .post("/sessions/{id}/cancel", routes::cancel_session)
        .post("/sessions/{id}/reopen", routes::reopen_session)
        .post("/sessions/{id}/messages", routes::send_message)
        .get("/sessions/{id}/budget", budget::get_budget)
        .post("/sessions/{id}/budget", budget::set_budget)
        .get("/sessions/{id}/events", events::events)
        .get("/sessions/{id}/reports", routes::list_reports)
        .get(
            "/sessions/{id}/reports/{revision}",
            download::report_markdown,
        )
        .get("/sessions/{id}/artifacts", routes::list_artifacts)
        .get("/sessions/{id}/log", download::log_export)
        .get("/artifacts/{id}", routes::get_artifact)
        .get("/artifacts/{id}/content", download::artifact_content)
        .get("/openapi.json", openapi_document)
}

/// Every method and path the API answers, under `/api` (e.g. `GET
/// /sessions/{id}`), in the order they are routed; the OpenAPI document
/// describes exactly these.
pub fn routes() -> Vec<(Method, &'static str)> {
    api_routes().added
}

async fn openapi_document() -> axum::Json<&'static serde_json::Value> {
    axum::Json(openapi::document())
}

/// The router over `manager` with the default options ([`Api`]).
pub fn router(manager: Manager) -> Router {
    Api::default().router(manager)
}

/// Mounts `router` — this crate's router, possibly wrapped in the
/// embedder's authentication or [`Guard`] — into `outer` under `prefix`
/// (e.g. `/korvus`): the API at `<prefix>/api/…` and the view at
/// `<prefix>/`, which `<prefix>` redirects to. Use it instead of
/// `outer.nest(prefix, router)`: a nested router is never asked for
/// `<prefix>/`, so the view would be served only at `<prefix>`, where its
/// relative asset and API paths resolve outside the prefix. `<prefix>/`
/// is handed to `router` as its root, so whatever wraps it applies there
/// too.
///
/// # Panics
/// When `prefix` does not start with `/`, ends with `/`, or collides
/// with a route of `outer` (as [`Router::nest`] does).
pub fn mount(outer: Router, prefix: &str, router: Router) -> Router {
    let root = router.clone();
    outer.nest(prefix, router).route(
        &format!("{prefix}/"),
        axum::routing::any(move |mut request: axum::extract::Request| {
            let root = root.clone();
            async move {
                let path = match request.uri().query() {
                    Some(query) => format!("/?{query}"),
                    None => "/".to_owned(),
                };
                // Only the path changes: an HTTP/2 request keeps its
                // authority (its `Host`) for the guard, as through `nest`.
                let mut parts = request.uri().clone().into_parts();
                let uri = path.parse().map(|p| {
                    parts.path_and_query = Some(p);
                    axum::http::Uri::from_parts(parts)
                });
                match uri {
                    Ok(Ok(uri)) => {
                        *request.uri_mut() = uri;
                        match tower::ServiceExt::oneshot(root, request).await {
                            Ok(response) => response,
                            Err(never) => match never {},
                        }
                    }
                    Ok(Err(_)) | Err(_) => no_route().await.into_response(),
                }
            }
        }),
    )
}

/// Live figures of a router ([`Api::router_with_stats`]).
#[derive(Debug, Clone)]
pub struct Stats {
    hub: events::Hub,
}

impl Stats {
    /// How many sessions have a follower now: one per session with at least
    /// one event-stream subscriber, however many subscribers it has.
    pub fn followers(&self) -> usize {
        self.hub.followers()
    }
}

async fn no_route() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this route",
    )
}
