//! The OpenAI Chat Completions API (`POST /v1/chat/completions`):
//! streamed as `data:` chunks ending `data: [DONE]` when the request asks
//! (`"stream": true`; usage in a last chunk with no choices only when
//! `stream_options.include_usage` is true, as the real API does), one JSON
//! body with usage otherwise.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::{admit, streamed, Api, Shared};

/// A tool call of `exec_command` when the last message is the user's words
/// (and tools are offered), else the reply.
pub(crate) async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (request, n) = match admit(&shared, Api::ChatCompletions, &headers, &body).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let script = &shared.script;
    let last_role = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str);
    let offers_tools = request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let call = json!({"index": 0, "id": format!("call_{n}"), "type": "function", "function": {
        "name": "exec_command", "arguments": json!({"cmd": script.command}).to_string()}});
    let (message, finish) = if last_role == Some("tool") || !offers_tools {
        (
            json!({"role": "assistant", "content": script.reply}),
            "stop",
        )
    } else {
        (
            json!({"role": "assistant", "content": null, "tool_calls": [call]}),
            "tool_calls",
        )
    };
    let (input, output) = script.usage;
    let usage = json!({"prompt_tokens": input, "completion_tokens": output,
                       "total_tokens": input + output});
    let id = format!("chatcmpl_{n}");
    let model = request.get("model").cloned().unwrap_or(Value::Null);
    if !streamed(&request) {
        return axum::Json(
            json!({"id": id, "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage}),
        )
        .into_response();
    }
    let chunk = |choices: Value| json!({"id": id, "object": "chat.completion.chunk", "model": model, "choices": choices});
    let mut chunks = vec![
        chunk(json!([{"index": 0, "delta": message, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": finish}])),
    ];
    let include_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage;
        chunks.push(last);
    }
    let mut text = String::new();
    for c in chunks {
        text.push_str(&format!("data: {c}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from(text),
    )
        .into_response()
}
