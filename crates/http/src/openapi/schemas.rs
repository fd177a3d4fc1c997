//! The JSON Schemas of the bodies (`components.schemas`), written against
//! the serde shapes of the store's rows and this crate's request types.
//! The routes tests validate every JSON body the API answers against
//! them, strictly (a field the schema does not name fails), so a field
//! added to a row without its description here fails a test.

use serde_json::{json, Value};

use crate::error::CODES;

fn uuid() -> Value {
    json!({"type": "string", "format": "uuid"})
}

fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn nullable(schema: Value) -> Value {
    json!({"anyOf": [schema, {"type": "null"}]})
}

fn count() -> Value {
    json!({"type": "integer", "format": "int64", "minimum": 0})
}

fn text() -> Value {
    json!({"type": "string"})
}

/// An object with these properties, all required, nothing else.
fn object(properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A request body: `required` are the properties that must be sent.
fn request(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// One page of `item`: `{"items": […], "next": cursor | null}`.
pub(crate) fn page(item: &str) -> Value {
    object(json!({
        "items": {"type": "array", "items": reference(item)},
        "next": nullable(json!({"type": "string", "description": "the cursor of the next page (`?after=`)"})),
    }))
}

fn counters() -> Value {
    object(json!({
        "turns": count(),
        "tool_calls": count(),
        "input_tokens": count(),
        "output_tokens": count(),
    }))
}

fn workspace() -> Value {
    object(json!({
        "repo": {"type": "string", "description": "a git repository on the server's disk"},
        "commit": {"type": "string", "description": "the pinned commit"},
    }))
}

fn incident() -> Value {
    object(json!({
        "id": uuid(),
        "title": text(),
        "status": {"type": "string", "enum": ["open", "closed"]},
        "workspace": nullable(reference("WorkspaceRef")),
        "created_at": time(),
    }))
}

fn session() -> Value {
    object(session_properties())
}

/// One session as `GET /api/sessions/{id}` and the event stream's `end`
/// answer it: the row, with its counters read live from the turn log
/// while it runs, why it failed, and where it waits in line.
fn session_detail() -> Value {
    let mut properties = session_properties();
    properties["cause"] = nullable(json!({
        "type": "string",
        "description": "why a failed or cancelled session ended so: its report's detail, else \
            the last note korvus wrote in its log",
    }));
    properties["budget"] = reference("Budgets");
    properties["queue_position"] = nullable(json!({
        "type": "integer", "minimum": 1,
        "description": "for a session waiting in its pool's line (queued, or its resume \
            pending), an estimate of its place (1: next); claims are not a fixed line \
            (per-key caps, priorities, backoffs)",
    }));
    object(properties)
}

fn session_properties() -> Value {
    json!({
        "id": uuid(),
        "incident_id": uuid(),
        "seq": {"type": "integer", "minimum": 1},
        "kind": {"type": "string", "enum": ["initial", "follow_up"]},
        "status": {"type": "string", "enum": ["running", "completed", "failed", "cancelled"]},
        "prompt": text(),
        "workspace_ref": nullable(reference("WorkspaceRef")),
        "exit_reason": nullable(text()),
        "counters": reference("Counters"),
        "revision": {"type": "integer", "minimum": 1},
        "fence": {"type": "integer", "format": "int64", "minimum": 1},
        "cancel_requested": {"type": "boolean"},
        "owner": nullable(uuid()),
        "lease_expires_at": nullable(time()),
        "created_at": time(),
        "ended_at": nullable(time()),
        "started_at": nullable(time()),
        "attempt": {"type": "integer", "minimum": 1},
        "resume_pending": {"type": "boolean"},
        "resume_after": nullable(time()),
        "admission": reference("Admission"),
    })
}

fn admission() -> Value {
    object(json!({
        "pool": text(),
        "priority": {"type": "integer", "minimum": 1, "maximum": 9},
        "queue_key": nullable(text()),
        "idempotency_key": nullable(text()),
    }))
}

fn report() -> Value {
    object(json!({
        "session_id": uuid(),
        "incident_id": uuid(),
        "revision": {"type": "integer", "minimum": 1},
        "markdown_key": nullable(text()),
        "manifest_key": nullable(text()),
        "markdown_bytes": count(),
        "exit_reason": text(),
        "counters": reference("Counters"),
        "detail": nullable(text()),
        "salvaged_from": nullable(text()),
        "fence": {"type": "integer", "format": "int64", "minimum": 1},
        "created_at": time(),
    }))
}

fn artifact() -> Value {
    object(json!({
        "id": uuid(),
        "incident_id": uuid(),
        "session_id": uuid(),
        "kind": {"type": "string", "enum": ["report", "agent_output", "workspace_archive", "upload"]},
        "path": text(),
        "blob_key": text(),
        "content_type": text(),
        "size_bytes": count(),
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "revision": {"type": "integer", "minimum": 1},
        "fence": {"type": "integer", "format": "int64", "minimum": 1},
        "created_at": time(),
    }))
}

/// One kind of turn-log event: its `type`, the fields of that kind, and
/// the fields every event may carry.
fn event_kind(kind: &str, description: &str, fields: Value, required: &[&str]) -> Value {
    let mut properties = json!({
        "type": {"const": kind, "type": "string"},
        "at": {"type": "string", "format": "date-time", "description": "when it happened"},
        "epoch": {"type": "integer", "format": "int64", "minimum": 0,
                  "description": "the epoch (fence) of the run that appended it"},
        "by": {"type": "string", "enum": ["korvus", "agent"],
               "description": "who wrote it; absent in logs written before it was recorded"},
    });
    for (k, v) in fields.as_object().into_iter().flatten() {
        properties[k] = v.clone();
    }
    let mut all_required = vec!["type"];
    all_required.extend_from_slice(required);
    // Titled `…Event`: a generated client names its models by title, and
    // `message` would clash with the `Message` request body.
    let title: String = kind
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<String>()
        + "Event";
    json!({
        "type": "object",
        "title": title,
        "description": description,
        "properties": properties,
        "required": all_required,
        "additionalProperties": false,
    })
}

/// A turn-log event, as the event stream and the log export send it: one
/// `oneOf` member per kind, told apart by `type`.
fn event() -> Value {
    let turn = json!({"type": "integer", "format": "int64", "minimum": 0});
    json!({
        "oneOf": [
            event_kind("turn_start", "a turn began", json!({"turn": turn}), &["turn"]),
            event_kind("turn_end", "a turn ended (`interrupted`: closed by repair, not finished)",
                json!({"turn": turn, "interrupted": {"type": "boolean"}}), &["turn"]),
            event_kind("message", "a message of the user, the agent or the system",
                json!({"role": {"type": "string", "enum": ["user", "assistant", "system"]}, "text": text()}),
                &["role", "text"]),
            event_kind("tool_call", "the agent called a tool",
                json!({"call_id": text(), "tool": text(), "input": {"description": "the arguments, any JSON"}}),
                &["call_id", "tool", "input"]),
            event_kind("tool_result", "a tool call's result",
                json!({"call_id": text(), "ok": {"type": "boolean"}, "output": {"description": "output or error detail, any JSON"}}),
                &["call_id", "ok", "output"]),
            event_kind("note", "progress, stderr, diagnostics; korvus's own when `by` is `korvus`",
                json!({"text": text()}), &["text"]),
            event_kind("usage", "tokens the model used, as reported",
                json!({"input_tokens": count(), "output_tokens": count()}),
                &["input_tokens", "output_tokens"]),
            event_kind("metered_usage", "tokens one model call used, as korvus's model gateway measured them on the wire; counters use these when a run has any",
                json!({"input_tokens": count(), "output_tokens": count(), "model": text(), "unmetered": {"type": "boolean", "description": "the call could not be metered whole: its figures are a lower bound"}}),
                &["input_tokens", "output_tokens"]),
        ],
    })
}

fn budget() -> Value {
    object(json!({
        "limits": reference("BudgetLimits"),
        "spent": reference("Spend"),
        "remaining_tokens": nullable(count()),
        "reached": nullable(json!({
            "type": "string",
            "enum": ["input_tokens", "output_tokens", "tokens", "cost", "wall_time"],
            "description": "the limit reached, if any: the session pauses at it",
        })),
    }))
}

fn error() -> Value {
    object(json!({
        "error": {"type": "string", "description": "what went wrong, for a human"},
        "code": {"type": "string", "enum": CODES, "description": "what went wrong, for a program"},
    }))
}

/// Every schema, by name.
pub(crate) fn all() -> Value {
    json!({
        "Incident": incident(),
        "IncidentPage": page("Incident"),
        "Session": session(),
        "SessionDetail": session_detail(),
        "Event": event(),
        "SessionPage": page("Session"),
        "Report": report(),
        "ReportPage": page("Report"),
        "Artifact": artifact(),
        "ArtifactPage": page("Artifact"),
        "WorkspaceRef": workspace(),
        "Counters": counters(),
        "Admission": admission(),
        "Error": error(),
        "NewIncident": request(json!({
            "title": {"type": "string", "minLength": 1, "description": "must not be blank"},
            "workspace": nullable(reference("WorkspaceRef")),
        }), &["title"]),
        "NewSession": request(json!({
            "prompt": {"type": "string", "minLength": 1, "description": "must not be blank"},
            "context": {"type": "array", "items": reference("ContextRef")},
            "priority": {"type": "integer", "minimum": 1, "maximum": 9, "default": 5},
            "queue_key": nullable(text()),
            "budget": reference("NewBudget"),
        }), &["prompt"]),
        "ContextRef": request(json!({
            "artifact_id": uuid(),
            "role": text(),
        }), &["artifact_id"]),
        "Budgets": object(json!({
            "session": nullable(reference("Budget")),
            "incident": nullable(reference("Budget")),
        })),
        "Budget": budget(),
        "IncidentBudget": object(json!({
            "incident": nullable(reference("Budget")),
        })),
        "BudgetLimits": object(json!({
            "input_tokens": nullable(count()),
            "output_tokens": nullable(count()),
            "tokens": nullable(count()),
            "cost_micros": nullable(count()),
            "wall_ms": nullable(count()),
        })),
        "Spend": object(json!({
            "input_tokens": count(),
            "output_tokens": count(),
            "cost_micros": count(),
            "wall_ms": count(),
        })),
        "NewBudget": request(json!({
            "tokens": count(),
            "input_tokens": count(),
            "output_tokens": count(),
            "cost_micros": {"type": "integer", "format": "int64", "minimum": 0,
                "description": "millionths of the embedder's price table's currency"},
            "wall_ms": count(),
        }), &[]),
        "Message": request(json!({
            "message": {"type": "string", "minLength": 1, "description": "must not be blank"},
        }), &["message"]),
    })
}
