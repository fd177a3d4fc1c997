//! Shared scaffolding: a manager on SQLite + files with a scripted runner,
//! and helpers to call the router.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use korvus_blob::FsBlobStore;
use korvus_log::{Event, EventKind, Role};
pub(crate) use korvus_runner::testing::{write_files, ScriptRunner};
use korvus_runner::{RunContext, RunOutcome};
use korvus_session::Manager;
use korvus_store::{CoordinatedStore, Counters, Incident, NewIncident};
use korvus_store_sql::{migrate, open_sqlite, SqliteLog, SqliteStore};
use korvus_workspace::ScratchRoot;
use serde_json::Value;
use tower::ServiceExt;

/// A manager on SQLite and files in a temp dir.
pub(crate) struct Env {
    pub(crate) manager: Manager,
    pub(crate) store: Arc<dyn CoordinatedStore>,
    /// The same store's budgets (the manager keeps them there).
    pub(crate) budgets: Arc<dyn korvus_store::Budgets>,
    pub(crate) incident: Incident,
    _dir: tempfile::TempDir,
}

impl Env {
    pub(crate) async fn new(runner: ScriptRunner) -> Self {
        Self::with(runner, |b| b).await
    }

    /// As `new`, with the manager's builder adjusted by `configure`.
    pub(crate) async fn with(
        runner: ScriptRunner,
        configure: impl FnOnce(korvus_session::ManagerBuilder) -> korvus_session::ManagerBuilder,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pool = open_sqlite(&dir.path().join("korvus.db")).await.unwrap();
        migrate(&pool).await.unwrap();
        let sqlite = Arc::new(SqliteStore::new(pool.clone()));
        let budgets: Arc<dyn korvus_store::Budgets> = sqlite.clone();
        let store: Arc<dyn CoordinatedStore> = sqlite;
        let blobs = FsBlobStore::open(dir.path().join("blobs")).unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        let manager = configure(
            Manager::builder(Arc::clone(&store), Arc::new(runner))
                .turn_log(Arc::new(SqliteLog::new(pool)))
                .blob_store(Arc::new(blobs))
                .scratch_root(ScratchRoot::supplied(&scratch))
                .cancel_grace(Duration::from_millis(200))
                .budgets(Arc::clone(&budgets)),
        )
        .build();
        let incident = store
            .create_incident(NewIncident {
                title: "db-1 disk".into(),
                workspace: None,
            })
            .await
            .unwrap();
        Self {
            manager,
            store,
            budgets,
            incident,
            _dir: dir,
        }
    }

    pub(crate) fn router(&self) -> Router {
        korvus_http::router(self.manager.clone())
    }
}

/// A runner that writes `files` (the first usually `report.md`), logs
/// `events` messages, and completes.
pub(crate) fn writing(
    files: &'static [(&'static str, &'static str)],
    events: usize,
) -> ScriptRunner {
    ScriptRunner::new(move |ctx, _| async move {
        write_files(&ctx, files);
        log_messages(&ctx, events).await;
        Ok(RunOutcome::completed(Counters::default()))
    })
}

pub(crate) async fn log_messages(ctx: &RunContext, n: usize) {
    for i in 0..n {
        ctx.log
            .append(&[Event::new(EventKind::Message {
                role: Role::Assistant,
                text: format!("message {i}"),
            })])
            .await
            .unwrap();
    }
}

/// What a call answered.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header"))
            .to_str()
            .unwrap()
    }

    /// Asserts an error answer: this status and JSON `code`.
    #[track_caller]
    pub(crate) fn assert_error(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        let body = self.json();
        assert_eq!(body["code"], code, "{body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
    }
}

pub(crate) async fn call(router: &Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

pub(crate) fn request(method: Method, uri: &str, json: Option<Value>) -> Request<Body> {
    let builder = Request::builder().method(method).uri(uri);
    match json {
        Some(v) => builder
            .header("content-type", "application/json")
            .body(Body::from(v.to_string()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

pub(crate) async fn get(router: &Router, uri: &str) -> Answer {
    call(router, request(Method::GET, uri, None)).await
}

pub(crate) async fn post(router: &Router, uri: &str, json: Value) -> Answer {
    call(router, request(Method::POST, uri, Some(json))).await
}

/// Waits until the session's row is terminal (or waiting for the user).
pub(crate) async fn settled(env: &Env, id: &str) -> Value {
    let id = id.parse().unwrap();
    let row = env
        .manager
        .await_settled(id, Duration::from_secs(20))
        .await
        .unwrap();
    serde_json::to_value(row).unwrap()
}
