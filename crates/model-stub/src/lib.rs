//! A scripted model server on loopback, for driving the real Codex and
//! Claude Code binaries without the internet.
//!
//! # Overview
//!
//! [`StubServer`] listens on `127.0.0.1` and answers just enough of two
//! model APIs, streamed as Server-Sent Events:
//!
//! | API | route | used by |
//! |---|---|---|
//! | OpenAI Responses | `POST /v1/responses` | Codex (`wire_api = "responses"`) |
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
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

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
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl StubServer {
    /// Starts a server on `127.0.0.1` (a free port) following `script`.
    pub async fn start(script: Script) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script,
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/responses", post(responses))
            .route("/responses", post(responses))
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` (Claude Code's `ANTHROPIC_BASE_URL`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
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
        Mode::Silent => {
            std::future::pending::<()>().await;
            unreachable!("a pending future never completes")
        }
    }
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

/// The Responses API: a `function_call` of `exec_command` when the input
/// ends with the user, else the reply.
async fn responses(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (request, n) = match admit(&shared, Api::Responses, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let script = &shared.script;
    let id = format!("resp_{n}");
    let answered = request
        .get("input")
        .and_then(Value::as_array)
        .and_then(|items| items.last())
        .and_then(|i| i.get("type"))
        .and_then(Value::as_str)
        == Some("function_call_output");
    let item = if answered {
        json!({"type": "message", "role": "assistant", "id": format!("msg_{n}"),
               "content": [{"type": "output_text", "text": script.reply}]})
    } else {
        json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
               "name": "exec_command",
               "arguments": json!({"cmd": script.command}).to_string()})
    };
    let (input, output) = script.usage;
    sse(&[
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": id}}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": id, "usage": {
                "input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input + output}}}),
        ),
    ])
}

/// The Messages API: a `tool_use` of `Bash` when the last message is the
/// user's words (and tools are offered), else the reply.
async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (request, n) = match admit(&shared, Api::Messages, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let script = &shared.script;
    let answered = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        });
    let offers_tools = request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let (block, delta, stop) = if answered || !offers_tools {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": script.reply}),
            "end_turn",
        )
    } else {
        (
            json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": "Bash", "input": {}}),
            json!({"type": "input_json_delta", "partial_json":
                json!({"command": script.command, "description": "write the report"}).to_string()}),
            "tool_use",
        )
    };
    let (input, output) = script.usage;
    let model = request.get("model").cloned().unwrap_or(Value::Null);
    sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message",
                "role": "assistant", "content": [], "model": model, "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                   "usage": {"output_tokens": output}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

async fn count_tokens() -> Response {
    axum::Json(json!({"input_tokens": 10})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn post(stub: &StubServer, path: &str, body: &Value) -> String {
        let mut s = tokio::net::TcpStream::connect(stub.addr()).await.unwrap();
        let body = body.to_string();
        let req = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_responses_turn_asks_for_the_command_then_replies() {
        let stub = StubServer::start(Script::default()).await.unwrap();
        let first = post(
            &stub,
            "/v1/responses",
            &json!({"input": [{"type": "message", "role": "user", "content": "go"}]}),
        )
        .await;
        assert!(first.contains("exec_command"), "{first}");
        assert!(first.contains("report.md"), "{first}");
        let second = post(
            &stub,
            "/v1/responses",
            &json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "written"}]}),
        )
        .await;
        assert!(second.contains(REPLY), "{second}");
        assert!(second.contains("\"input_tokens\":100"), "{second}");
        assert_eq!(stub.requests().len(), 2);
        assert!(stub.requests()[0].mentions("go"));
    }

    #[tokio::test]
    async fn a_messages_turn_asks_for_bash_then_replies() {
        let stub = StubServer::start(Script::default()).await.unwrap();
        let tools = json!([{"name": "Bash"}]);
        let first = post(
            &stub,
            "/v1/messages?beta=true",
            &json!({"tools": tools, "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}]}),
        )
        .await;
        assert!(first.contains("\"name\":\"Bash\""), "{first}");
        let second = post(
            &stub,
            "/v1/messages",
            &json!({"tools": tools, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]}),
        )
        .await;
        assert!(second.contains(REPLY), "{second}");
    }

    #[tokio::test]
    async fn a_failing_stub_answers_500() {
        let stub = StubServer::start(Script {
            mode: Mode::ServerError,
            ..Script::default()
        })
        .await
        .unwrap();
        let out = post(&stub, "/v1/responses", &json!({"input": []})).await;
        assert!(out.starts_with("HTTP/1.1 500"), "{out}");
    }
}
