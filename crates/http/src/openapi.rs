//! The API described as OpenAPI 3.1, served at `GET /api/openapi.json`.
//!
//! The document is built from a table of operations
//! (`openapi/operations.rs`), one entry per method and path the router
//! answers, and the body schemas of `openapi/schemas.rs`. The router records
//! every route it adds ([`routes`](crate::routes())), and [`check`] compares
//! the two: a route added without its entry here (or an entry without a
//! route, a path parameter left undescribed) is a failing test. The
//! routes tests then validate every JSON body the API answers against the
//! document, strictly, so a field missing from a schema fails too; tools
//! we did not write (a generated Python client, a property-based tester)
//! exercise it under `cargo xtask test`.

mod operations;
mod schemas;

/// The query parameters the operation `method path` (under `/api`, as the
/// router spells it) takes, as documented: none when it is not listed.
pub(crate) fn query_params(method: &Method, path: &str) -> Vec<&'static str> {
    operations::OPERATIONS
        .iter()
        .find(|op| op.method == *method && op.path == path)
        .map(|op| op.query.iter().map(|p| p.name).collect())
        .unwrap_or_default()
}

use std::sync::OnceLock;

use axum::http::Method;
use serde_json::{json, Map, Value};

pub(crate) use self::operations::{Operation, OPERATIONS};

/// The OpenAPI version of the document.
pub const OPENAPI_VERSION: &str = "3.1.0";

/// The document, built once.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| build(OPERATIONS))
}

fn build(operations: &[Operation]) -> Value {
    let mut paths = Map::new();
    for op in operations {
        let item = paths
            .entry(format!("/api{}", op.path))
            .or_insert_with(|| json!({}));
        item[op.method.as_str().to_ascii_lowercase()] = operation(op);
    }
    json!({
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "korvus",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Incidents, the agent sessions that run in them, their reports, \
                artifacts and turn logs. `korvus serve` puts these routes behind a bearer \
                token (401 without it, 403 for a foreign Host or Origin); an embedder \
                mounts them behind its own authentication.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas::all(),
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer"},
            },
        },
        "security": [{"token": []}],
    })
}

fn operation(op: &Operation) -> Value {
    let mut parameters: Vec<Value> = path_params(op.path)
        .into_iter()
        .map(|name| {
            let schema = if name == "revision" {
                json!({"type": "integer", "minimum": 1, "maximum": u32::MAX})
            } else {
                json!({"type": "string", "format": "uuid"})
            };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    for p in op.query {
        parameters.push(json!({
            "name": p.name, "in": "query", "required": false,
            "description": p.description, "schema": p.schema(),
        }));
    }
    for p in op.headers {
        parameters.push(json!({
            "name": p.name, "in": "header", "required": false,
            "description": p.description, "schema": p.schema(),
        }));
    }
    let mut responses = Map::new();
    responses.insert(op.status.to_string(), op.content.response());
    for status in op.errors() {
        responses.insert(
            status.to_string(),
            json!({
                "description": error_description(status),
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }),
        );
    }
    let mut out = json!({
        "operationId": op.id,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": parameters,
        "responses": responses,
    });
    if let Some(body) = op.body {
        out["requestBody"] = json!({
            "required": true,
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{body}")}}},
        });
    }
    out
}

fn error_description(status: u16) -> &'static str {
    match status {
        400 => "malformed input (an id, a body, a parameter)",
        401 => "no token, or a wrong one (behind `korvus serve`'s guard)",
        403 => "a foreign Host or Origin, or a failed CSRF check (behind the guard)",
        404 => "no such row, or no document",
        409 => "the session or incident is not in a state that allows this",
        413 => "the body is over the limit",
        415 => "the body is not JSON",
        429 => "the queue is full; `Retry-After` says when to try again",
        500 => "the server failed",
        _ => "the service is shutting down or its store is unavailable; try again",
    }
}

/// The `{name}` segments of a path, in order.
fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

/// What is wrong between the routes the router answers (`routes`, method
/// and path under `/api`) and the operations documented: each problem in
/// words, none when they agree.
pub fn check(routes: &[(Method, &str)]) -> Vec<String> {
    check_against(routes, OPERATIONS)
}

fn check_against(routes: &[(Method, &str)], operations: &[Operation]) -> Vec<String> {
    let mut problems = Vec::new();
    for (method, path) in routes {
        if !operations
            .iter()
            .any(|op| op.method == *method && op.path == *path)
        {
            problems.push(format!("{method} /api{path} is routed but not documented"));
        }
    }
    for op in operations {
        if !routes.iter().any(|(m, p)| *m == op.method && *p == op.path) {
            problems.push(format!(
                "{} /api{} is documented but not routed",
                op.method, op.path
            ));
        }
        if op.summary.trim().is_empty() || op.id.trim().is_empty() {
            problems.push(format!(
                "{} /api{} has no summary or operation id",
                op.method, op.path
            ));
        }
    }
    let mut ids: Vec<&str> = operations.iter().map(|op| op.id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != operations.len() {
        problems.push("two operations share an operation id".to_owned());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::{check, check_against, OPERATIONS};
    use axum::http::Method;

    #[test]
    fn every_route_is_documented_and_every_operation_routed() {
        let routes = crate::routes();
        assert_eq!(check(&routes), Vec::<String>::new());
        assert_eq!(routes.len(), OPERATIONS.len());
    }

    /// What a contributor sees who adds a route and forgets its
    /// description: the check names it.
    #[test]
    fn a_route_added_without_its_description_fails_the_check() {
        let mut routes = crate::routes();
        routes.push((Method::DELETE, "/sessions/{id}"));
        assert_eq!(
            check(&routes),
            vec!["DELETE /api/sessions/{id} is routed but not documented".to_owned()]
        );
        let without_last = &OPERATIONS[..OPERATIONS.len() - 1];
        let last = &OPERATIONS[OPERATIONS.len() - 1];
        assert_eq!(
            check_against(&crate::routes(), without_last),
            vec![format!(
                "{} /api{} is routed but not documented",
                last.method, last.path
            )]
        );
    }

    /// Every code a route answers with is in [`crate::error::CODES`]: the
    /// literals passed where an `ApiError` is made, read from the source.
    #[test]
    fn every_error_code_in_the_source_is_documented() {
        let sources = [
            include_str!("error.rs"),
            include_str!("routes.rs"),
            include_str!("download.rs"),
            include_str!("events.rs"),
            include_str!("guard.rs"),
            include_str!("lib.rs"),
            include_str!("pages.rs"),
        ];
        let calls = [
            "bad_request(",
            "internal(",
            "conflict(",
            "forbidden(",
            "unauthorized(",
            "ApiError::new(",
            "Self::new(",
            "=> ",
        ];
        let mut found = Vec::new();
        for source in sources {
            for call in calls {
                for (at, _) in source.match_indices(call) {
                    let rest = &source[at + call.len()..];
                    let rest = rest.trim_start();
                    // `ApiError::new(StatusCode::X, "code"` and `S::CONFLICT, "code"`.
                    let rest = match rest.split_once(',') {
                        Some((first, after))
                            if first.contains("StatusCode") || first.starts_with("S::") =>
                        {
                            after.trim_start()
                        }
                        _ => rest,
                    };
                    if let Some(lit) = rest.strip_prefix('"') {
                        let code = &lit[..lit.find('"').unwrap_or(0)];
                        if !code.is_empty()
                            && code.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                        {
                            found.push(code.to_owned());
                        }
                    }
                }
            }
        }
        found.sort();
        found.dedup();
        assert!(found.len() > 20, "the scan finds the codes: {found:?}");
        let missing: Vec<&String> = found
            .iter()
            .filter(|c| !crate::error::CODES.contains(&c.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "codes used but not documented: {missing:?}"
        );
    }
}
