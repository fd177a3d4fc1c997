//! The Anthropic Messages API (`POST /v1/messages`, Claude Code's
//! `ANTHROPIC_BASE_URL`): streamed when the request asks (`"stream":
//! true`), one JSON body otherwise; and `count_tokens`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::{admit, sse, streamed, Api, Shared};

/// A `tool_use` of `Bash` when the last message is the user's words (and
/// tools are offered), else the reply.
pub(crate) async fn messages(
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
    let tool_input = json!({"command": script.command, "description": "write the report"});
    let tool_id = format!("toolu_{n}");
    let (whole, block, delta, stop) = if answered || !offers_tools {
        (
            json!({"type": "text", "text": script.reply}),
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": script.reply}),
            "end_turn",
        )
    } else {
        (
            json!({"type": "tool_use", "id": tool_id, "name": "Bash", "input": tool_input}),
            json!({"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}),
            json!({"type": "input_json_delta", "partial_json": tool_input.to_string()}),
            "tool_use",
        )
    };
    let (input, output) = script.usage;
    let model = request.get("model").cloned().unwrap_or(Value::Null);
    if !streamed(&request) {
        return axum::Json(json!({"id": format!("msg_{n}"), "type": "message",
            "role": "assistant", "content": [whole], "model": model, "stop_reason": stop,
            "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": output}}))
        .into_response();
    }
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

/// `POST /v1/messages/count_tokens`: a fixed count.
pub(crate) async fn count_tokens() -> Response {
    axum::Json(json!({"input_tokens": 10})).into_response()
}
