//! A scripted model server on loopback, for driving the real Codex and
//! Claude Code binaries without the internet.
//!
//! # Overview
//!
//! [`StubServer`] listens on `127.0.0.1` and answers just enough of three
//! model APIs, streamed as Server-Sent Events when the request says
//! `"stream": true` and as one JSON body otherwise:
//!
//! | API | route | used by |
//! |---|---|---|
//! | OpenAI Responses | `POST /v1/responses` | Codex (`wire_api = "responses"`) |
//! | OpenAI Chat Completions | `POST /v1/chat/completions` | clients of the older API (usage in a stream only with `stream_options.include_usage`) |
//! | Anthropic Messages | `POST /v1/messages` (and `/v1/messages/count_tokens`) | Claude Code (`ANTHROPIC_BASE_URL`) |
//!
//! The script is one agent turn: when the conversation ends with the
//! user's words, the model asks for one shell command ([`Script::command`],
//! by default one that writes `report.md`); when it ends with that
//! command's output, the model answers [`Script::reply`]. Every response
//! reports [`Script::usage`]. [`Mode`] turns the server into one that
//! fails (HTTP 500) or never answers. Every request is recorded
//! ([`StubServer::requests`]), so a test can check, say, that a resumed
//! agent sent its earlier turn back.
//!
//! It sits outside korvus's layers: it depends on no korvus crate. The
//! CLI's `korvus demo --agent codex` and the end-to-end tests use it.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
//! use korvus_model_stub::{Script, StubServer};
//!
//! let stub = StubServer::start(Script::default()).await?;
//! assert!(stub.base_url().starts_with("http://127.0.0.1:"));
//! assert!(stub.requests().is_empty());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

mod chat;
mod messages;
mod responses;
mod tls;

pub use crate::tls::TestCa;

/// The command the default script asks for: it writes `report.md`.
pub const REPORT_COMMAND: &str =
    "printf '# Findings\\n\\nThe disk is full of WAL segments.\\n' > report.md && echo written";

/// The default script's final answer.
pub const REPLY: &str = "Report written to report.md.";

/// How the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The scripted turn.
    #[default]
    Script,
    /// Every model request gets `500 Internal Server Error`.
    ServerError,
    /// Every model request is accepted and never answered.
    Silent,
    /// Every model request gets the answer korvus's model gateway gives a
    /// call past its budget — an error of type `budget_reached` with
    /// `x-should-retry: false`, `402 Payment Required` on the Messages API
    /// and `400 Bad Request` on OpenAI's — for checking what an agent
    /// does with it.
    Refuse,
}

/// What the model does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The shell command the model asks to run when the user has spoken.
    pub command: String,
    /// The model's answer once the command's output is back.
    pub reply: String,
    /// Input and output tokens each response reports.
    pub usage: (u64, u64),
    /// How the server answers.
    pub mode: Mode,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            command: REPORT_COMMAND.to_owned(),
            reply: REPLY.to_owned(),
            usage: (100, 10),
            mode: Mode::Script,
        }
    }
}

/// Which API a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Messages,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    ChatCompletions,
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The API it used.
    pub api: Api,
    /// Its JSON body.
    pub body: Value,
    /// Its `Authorization` header (Responses) or `x-api-key` header
    /// (Messages), if any.
    pub key: Option<String>,
}

impl Recorded {
    /// Whether `text` appears anywhere in the body (for checks such as
    /// "the resumed agent sent its first prompt back").
    pub fn mentions(&self, text: &str) -> bool {
        contains(&self.body, text)
    }
}

fn contains(v: &Value, text: &str) -> bool {
    match v {
        Value::String(s) => s.contains(text),
        Value::Array(items) => items.iter().any(|i| contains(i, text)),
        Value::Object(map) => map.values().any(|i| contains(i, text)),
        _ => false,
    }
}

#[derive(Debug)]
struct Shared {
    script: Script,
    requests: Mutex<Vec<Recorded>>,
}

/// A running stub server; stopped when dropped.
#[derive(Debug)]
pub struct StubServer {
    addr: SocketAddr,
    tls: bool,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl StubServer {
    /// Starts a server on `127.0.0.1` (a free port) following `script`.
    pub async fn start(script: Script) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (shared, app) = router(script);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            tls: false,
            shared,
            task,
        })
    }

    /// As [`start`](Self::start), over HTTPS with `ca`'s server
    /// certificate: a client must trust [`TestCa::ca_pem`].
    pub async fn start_tls(script: Script, ca: &TestCa) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (shared, app) = router(script);
        let task = tokio::spawn(tls::serve(listener, app, ca)?);
        Ok(Self {
            addr,
            tls: true,
            shared,
            task,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` (`https://` when started with TLS;
    /// Claude Code's `ANTHROPIC_BASE_URL`).
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/v1` (a Codex provider's `base_url`).
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// The model requests received so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The stub's routes over the shared state of a new server.
fn router(script: Script) -> (Arc<Shared>, Router) {
    let shared = Arc::new(Shared {
        script,
        requests: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/responses", post(responses::responses))
        .route("/responses", post(responses::responses))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .with_state(Arc::clone(&shared));
    (shared, app)
}

/// Records a request and answers it as the mode says; `Ok` carries the
/// body and the request's number (1, 2, …) for a scripted answer.
async fn admit(
    shared: &Shared,
    api: Api,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Value, usize), Response> {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let key = ["authorization", "x-api-key"]
        .iter()
        .find_map(|h| headers.get(*h)?.to_str().ok().map(str::to_owned));
    let n = {
        let mut requests = shared
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        requests.push(Recorded {
            api,
            body: body.clone(),
            key,
        });
        requests.len()
    };
    match shared.script.mode {
        Mode::Script => Ok((body, n)),
        Mode::ServerError => Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"error":{"type":"server_error","message":"the stub model server fails on purpose"}}"#,
        )
            .into_response()),
        Mode::Refuse => Err((
            match api {
                Api::Messages => StatusCode::PAYMENT_REQUIRED,
                Api::Responses | Api::ChatCompletions => StatusCode::BAD_REQUEST,
            },
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::HeaderName::from_static("x-should-retry"), "false"),
            ],
            r#"{"type":"error","error":{"type":"budget_reached","message":"the stub refuses as korvus does past a budget"}}"#,
        )
            .into_response()),
        Mode::Silent => {
            std::future::pending::<()>().await;
            unreachable!("a pending future never completes")
        }
    }
}

/// Whether a request asks for a streamed answer (`"stream": true`).
fn streamed(request: &Value) -> bool {
    request.get("stream").and_then(Value::as_bool) == Some(true)
}

/// A Server-Sent Events body of `(event, data)` pairs.
fn sse(events: &[(&str, Value)]) -> Response {
    let mut text = String::new();
    for (event, data) in events {
        text.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    }
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from(text),
    )
        .into_response()
}

#[cfg(test)]
mod tests;
