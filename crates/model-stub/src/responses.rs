//! The OpenAI Responses API (`POST /v1/responses`, Codex's `wire_api =
//! "responses"`): streamed when the request asks (`"stream": true`), one
//! JSON body otherwise.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::{admit, sse, streamed, Api, Shared};

/// A `function_call` of `exec_command` when the input ends with the user,
/// else the reply.
pub(crate) async fn responses(
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
    let usage = json!({
        "input_tokens": input, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output});
    if !streamed(&request) {
        return axum::Json(
            json!({"id": id, "object": "response", "status": "completed",
            "output": [item], "usage": usage}),
        )
        .into_response();
    }
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
            json!({"type": "response.completed", "response": {"id": id, "usage": usage}}),
        ),
    ])
}
