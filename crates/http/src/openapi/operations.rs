//! One entry per method and path the API answers: what it takes, what it
//! answers, and with which error statuses.

use axum::http::Method;
use serde_json::{json, Value};

/// A query or header parameter.
#[derive(Debug)]
pub(crate) struct Param {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    /// `true`: a positive integer; `false`: a string.
    pub(crate) integer: bool,
}

impl Param {
    pub(crate) fn schema(&self) -> Value {
        if self.integer {
            json!({"type": "integer", "minimum": 1})
        } else {
            json!({"type": "string"})
        }
    }
}

/// What a successful answer carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Content {
    /// A JSON body of this schema.
    Json(&'static str),
    /// Any JSON object (the document itself).
    AnyJson,
    /// Markdown.
    Markdown,
    /// The artifact's bytes, with its stored content type.
    Bytes,
    /// JSON lines: the log's header, then one event per line.
    Ndjson,
    /// Server-Sent Events, one per log event.
    EventStream,
}

impl Content {
    pub(crate) fn response(self) -> Value {
        let (description, media, schema) = match self {
            Content::Json(name) => (
                "OK",
                "application/json",
                json!({"$ref": format!("#/components/schemas/{name}")}),
            ),
            Content::AnyJson => (
                "the OpenAPI document",
                "application/json",
                json!({"type": "object"}),
            ),
            Content::Markdown => (
                "the report's markdown, as an attachment",
                "text/markdown",
                json!({"type": "string"}),
            ),
            Content::Bytes => (
                "the artifact's bytes, as an attachment with its stored content type",
                "*/*",
                json!({"type": "string", "format": "binary"}),
            ),
            Content::Ndjson => (
                "the turn log as JSON lines: its header, then one event per line",
                "application/x-ndjson",
                json!({"type": "string"}),
            ),
            Content::EventStream => (
                "each event of the turn log as an SSE `message` whose id is the event's \
                 index and whose data is the event's JSON; live until the session's run \
                 settles (then `end`), resumable with `Last-Event-ID` or `?after=`",
                "text/event-stream",
                json!({"type": "string"}),
            ),
        };
        let mut response = json!({
            "description": description,
            "content": {media: {"schema": schema}},
        });
        if matches!(self, Content::EventStream) {
            // What each SSE event's `data` holds, by event name: a schema
            // a client can type the stream with (OpenAPI 3.1 has no
            // field for it; 3.2's `itemSchema` describes whole frames).
            response["content"][media]["x-sse-data"] = json!({
                "message": {"$ref": "#/components/schemas/Event"},
                "end": {"$ref": "#/components/schemas/SessionDetail"},
                "failure": {"$ref": "#/components/schemas/Error"},
            });
        }
        if matches!(self, Content::Json(name) if name.ends_with("Page")) {
            response["headers"] = json!({
                "Link": {
                    "description": "`<…?limit=&after=>; rel=\"next\"` while there is a next page",
                    "schema": {"type": "string"},
                },
            });
        }
        response
    }
}

/// One documented operation.
#[derive(Debug)]
pub(crate) struct Operation {
    pub(crate) method: Method,
    /// Under `/api`, as the router spells it.
    pub(crate) path: &'static str,
    pub(crate) id: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) tag: &'static str,
    pub(crate) query: &'static [Param],
    pub(crate) headers: &'static [Param],
    /// The request body's schema.
    pub(crate) body: Option<&'static str>,
    pub(crate) status: u16,
    pub(crate) content: Content,
    /// Error statuses beyond those every operation has.
    pub(crate) conflicts: &'static [u16],
}

/// The error statuses of every operation: bad input, the guard, not
/// found, server failure, unavailable.
const COMMON_ERRORS: [u16; 6] = [400, 401, 403, 404, 500, 503];

impl Operation {
    /// Every error status this operation may answer with, sorted.
    pub(crate) fn errors(&self) -> Vec<u16> {
        let mut all: Vec<u16> = COMMON_ERRORS.to_vec();
        if self.body.is_some() {
            all.extend([413, 415]);
        }
        all.extend(self.conflicts);
        all.sort_unstable();
        all.dedup();
        all
    }
}

const PAGE: &[Param] = &[
    Param {
        name: "limit",
        description:
            "rows per page (default 100; a larger value, however large, is clamped to 1000)",
        integer: true,
    },
    Param {
        name: "after",
        description: "the `next` cursor of the previous page",
        integer: false,
    },
];

const IDEMPOTENCY: &[Param] = &[Param {
    name: "Idempotency-Key",
    description: "at most one session per key in an incident: a repeat answers the first",
    integer: false,
}];

const EVENTS_AFTER: &[Param] = &[Param {
    name: "after",
    description: "resume after the event with this index (what `Last-Event-ID` says)",
    integer: false,
}];

const LAST_EVENT_ID: &[Param] = &[Param {
    name: "Last-Event-ID",
    description: "resume after the event with this index",
    integer: false,
}];

macro_rules! op {
    ($method:ident $path:literal, $id:literal, $tag:literal, $summary:literal,
     query: $query:expr, headers: $headers:expr, body: $body:expr,
     $status:literal $content:expr, conflicts: $conflicts:expr) => {
        Operation {
            method: Method::$method,
            path: $path,
            id: $id,
            summary: $summary,
            tag: $tag,
            query: $query,
            headers: $headers,
            body: $body,
            status: $status,
            content: $content,
            conflicts: $conflicts,
        }
    };
}

/// Every operation, in the order of the router.
pub(crate) const OPERATIONS: &[Operation] = &[
    op!(POST "/incidents", "create_incident", "incidents", "Create an open incident",
        query: &[], headers: &[], body: Some("NewIncident"), 201 Content::Json("Incident"), conflicts: &[]),
    op!(GET "/incidents", "list_incidents", "incidents", "One page of the incidents, oldest first",
        query: PAGE, headers: &[], body: None, 200 Content::Json("IncidentPage"), conflicts: &[]),
    op!(GET "/incidents/{id}", "get_incident", "incidents", "One incident",
        query: &[], headers: &[], body: None, 200 Content::Json("Incident"), conflicts: &[]),
    op!(POST "/incidents/{id}/close", "close_incident", "incidents", "Close an incident (idempotent)",
        query: &[], headers: &[], body: None, 200 Content::Json("Incident"), conflicts: &[]),
    op!(POST "/incidents/{id}/sessions", "create_session", "sessions",
        "Create a session: its row is written and returned at once, its agent runs in the background",
        query: &[], headers: IDEMPOTENCY, body: Some("NewSession"), 201 Content::Json("Session"),
        conflicts: &[409, 429]),
    op!(GET "/incidents/{id}/sessions", "list_sessions", "sessions", "One page of an incident's sessions, by seq",
        query: PAGE, headers: &[], body: None, 200 Content::Json("SessionPage"), conflicts: &[]),
    op!(GET "/incidents/{id}/budget", "get_incident_budget", "incidents",
        "Where an incident's budget stands (shared by all its sessions)",
        query: &[], headers: &[], body: None, 200 Content::Json("IncidentBudget"), conflicts: &[409]),
    op!(POST "/incidents/{id}/budget", "set_incident_budget", "incidents",
        "Set an incident's budget (limits replaced, spend kept); it continues no paused session by itself",
        query: &[], headers: &[], body: Some("NewBudget"), 200 Content::Json("IncidentBudget"), conflicts: &[409]),
    op!(GET "/sessions/{id}", "get_session", "sessions",
        "One session, with its live counters, its cause and its estimated place in line",
        query: &[], headers: &[], body: None, 200 Content::Json("SessionDetail"), conflicts: &[]),
    op!(POST "/sessions/{id}/cancel", "cancel_session", "sessions",
        "Cancel a session's run, wherever it runs (a request the owner acts on)",
        query: &[], headers: &[], body: None, 200 Content::Json("Session"), conflicts: &[409]),
    op!(POST "/sessions/{id}/reopen", "reopen_session", "sessions",
        "Reopen a finished session with a new message: the next revision runs",
        query: &[], headers: &[], body: Some("Message"), 200 Content::Json("Session"), conflicts: &[409, 429]),
    op!(POST "/sessions/{id}/messages", "send_message", "sessions",
        "Answer a session that waits for the user",
        query: &[], headers: &[], body: Some("Message"), 200 Content::Json("Session"), conflicts: &[409, 429]),
    op!(GET "/sessions/{id}/budget", "get_budget", "sessions",
        "Where a session's budgets stand: its own and its incident's",
        query: &[], headers: &[], body: None, 200 Content::Json("Budgets"), conflicts: &[409]),
    op!(POST "/sessions/{id}/budget", "set_budget", "sessions",
        "Set a session's budget (limits replaced, spend kept); a session paused at its budget continues once none is reached",
        query: &[], headers: &[], body: Some("NewBudget"), 200 Content::Json("Budgets"), conflicts: &[409, 429]),
    op!(GET "/sessions/{id}/events", "follow_events", "logs",
        "Follow a session's turn log as Server-Sent Events",
        query: EVENTS_AFTER, headers: LAST_EVENT_ID, body: None, 200 Content::EventStream, conflicts: &[]),
    op!(GET "/sessions/{id}/reports", "list_reports", "reports", "One page of a session's reports, by revision",
        query: PAGE, headers: &[], body: None, 200 Content::Json("ReportPage"), conflicts: &[]),
    op!(GET "/sessions/{id}/reports/{revision}", "get_report_markdown", "reports",
        "A report revision's markdown",
        query: &[], headers: &[], body: None, 200 Content::Markdown, conflicts: &[]),
    op!(GET "/sessions/{id}/artifacts", "list_artifacts", "artifacts",
        "One page of a session's artifacts (a page may hold fewer than `limit`: hidden kinds are left out)",
        query: PAGE, headers: &[], body: None, 200 Content::Json("ArtifactPage"), conflicts: &[]),
    op!(GET "/sessions/{id}/log", "export_log", "logs", "A session's whole turn log as JSON lines",
        query: &[], headers: &[], body: None, 200 Content::Ndjson, conflicts: &[]),
    op!(GET "/artifacts/{id}", "get_artifact", "artifacts", "One artifact's row",
        query: &[], headers: &[], body: None, 200 Content::Json("Artifact"), conflicts: &[]),
    op!(GET "/artifacts/{id}/content", "get_artifact_content", "artifacts", "One artifact's bytes",
        query: &[], headers: &[], body: None, 200 Content::Bytes, conflicts: &[]),
    op!(GET "/openapi.json", "get_openapi", "meta", "This document",
        query: &[], headers: &[], body: None, 200 Content::AnyJson, conflicts: &[]),
];
