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
    object(json!({
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
    }))
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
        }), &["prompt"]),
        "ContextRef": request(json!({
            "artifact_id": uuid(),
            "role": text(),
        }), &["artifact_id"]),
        "Message": request(json!({
            "message": {"type": "string", "minLength": 1, "description": "must not be blank"},
        }), &["message"]),
    })
}
