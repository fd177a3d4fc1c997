//! The OpenAPI document against the API it describes: every JSON answer of
//! a walk through every JSON route — successes and errors — is validated
//! against the document's schema for that operation and status, strictly
//! (a field the schema does not name fails, so a field added to a row
//! without its description fails here).

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{call, get, post, request, settled, writing, Answer, Env};

/// The document as served.
async fn served(env: &Env) -> Value {
    let answer = get(&env.router(), "/api/openapi.json").await;
    assert_eq!(answer.status, StatusCode::OK);
    let doc = answer.json();
    assert_eq!(&doc, korvus_http::openapi::document());
    assert_eq!(doc["openapi"], korvus_http::openapi::OPENAPI_VERSION);
    doc
}

/// The document's path template that `path` (under `/api`, no query)
/// matches.
fn template<'a>(doc: &'a Value, path: &str) -> &'a str {
    let segments: Vec<&str> = path.split('/').collect();
    doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .find(|t| {
            let ts: Vec<&str> = t.split('/').collect();
            ts.len() == segments.len()
                && ts
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t.starts_with('{') || t == s)
        })
        .unwrap_or_else(|| panic!("{path} is not in the document"))
}

/// Asserts `answer` to `method path` is documented and its JSON body
/// matches the documented schema.
#[track_caller]
fn conforms(doc: &Value, method: &Method, path: &str, answer: &Answer) {
    let path = path.split('?').next().unwrap();
    let t = template(doc, path);
    let op = &doc["paths"][t][method.as_str().to_ascii_lowercase()];
    assert!(op.is_object(), "{method} {t} is not documented");
    let response = &op["responses"][answer.status.as_str()];
    assert!(
        response.is_object(),
        "{method} {t} answered {} which is not documented: {}",
        answer.status,
        answer.text()
    );
    let media = answer
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(schema) = response["content"]["application/json"].get("schema") {
        assert!(
            media.starts_with("application/json"),
            "{method} {t}: {media}"
        );
        let mut problems = Vec::new();
        validate(doc, schema, &answer.json(), "$", &mut problems);
        assert!(
            problems.is_empty(),
            "{method} {t} {}: {problems:#?}",
            answer.status
        );
    } else {
        let documented: Vec<&String> = response["content"].as_object().unwrap().keys().collect();
        assert!(
            documented
                .iter()
                .any(|d| d.as_str() == "*/*" || media.starts_with(d.as_str())),
            "{method} {t}: {media} is not one of {documented:?}"
        );
    }
}

/// A strict validator of the JSON Schema subset the document uses.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        let target = &doc["components"]["schemas"][name];
        assert!(target.is_object(), "{r} is not defined");
        return validate(doc, target, value, at, problems);
    }
    if let Some(any) = schema["anyOf"].as_array() {
        let fits = any.iter().any(|s| {
            let mut p = Vec::new();
            validate(doc, s, value, at, &mut p);
            p.is_empty()
        });
        if !fits {
            problems.push(format!("{at}: {value} matches none of {schema}"));
        }
        return;
    }
    if let Some(members) = schema["oneOf"].as_array() {
        let fitting = members
            .iter()
            .filter(|s| {
                let mut p = Vec::new();
                validate(doc, s, value, at, &mut p);
                p.is_empty()
            })
            .count();
        if fitting != 1 {
            problems.push(format!(
                "{at}: {value} matches {fitting} members of a oneOf, not one"
            ));
        }
        return;
    }
    if let Some(constant) = schema.get("const") {
        if constant != value {
            problems.push(format!("{at}: {value} is not {constant}"));
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            problems.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    let fits_type = match schema["type"].as_str() {
        None => true,
        Some("null") => value.is_null(),
        Some("string") => value.is_string(),
        Some("boolean") => value.is_boolean(),
        Some("integer") => value.is_u64() || value.is_i64(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        Some(other) => panic!("type {other} is not used"),
    };
    if !fits_type {
        problems.push(format!("{at}: {value} is not of type {}", schema["type"]));
        return;
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_i64(), value.as_i64()) {
        if n < min {
            problems.push(format!("{at}: {n} < {min}"));
        }
    }
    if schema["format"] == "uuid"
        && value
            .as_str()
            .is_some_and(|s| uuid::Uuid::parse_str(s).is_err())
    {
        problems.push(format!("{at}: {value} is not a UUID"));
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            validate(doc, &schema["items"], item, &format!("{at}[{i}]"), problems);
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema["properties"].as_object();
        for (key, v) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(s) => validate(doc, s, v, &format!("{at}.{key}"), problems),
                None if schema["additionalProperties"] == false => {
                    problems.push(format!("{at}.{key} is not in the schema"));
                }
                None => {}
            }
        }
        for required in schema["required"].as_array().into_iter().flatten() {
            if !object.contains_key(required.as_str().unwrap()) {
                problems.push(format!("{at}.{required} is required but missing"));
            }
        }
    }
}

#[tokio::test]
async fn every_json_answer_of_every_route_matches_the_document() {
    let env = Env::new(writing(&[("report.md", "# Done\n"), ("notes.txt", "n")], 2)).await;
    let doc = served(&env).await;
    let router = env.router();
    let check = |method: Method, path: String, answer: Answer| {
        conforms(&doc, &method, &path, &answer);
        answer
    };

    let made = post(&router, "/api/incidents", json!({"title": "disk full"})).await;
    let incident = check(Method::POST, "/api/incidents".into(), made).json();
    let inc = incident["id"].as_str().unwrap().to_owned();
    for path in ["/api/incidents".to_owned(), format!("/api/incidents/{inc}")] {
        let answer = get(&router, &path).await;
        assert_eq!(answer.status, StatusCode::OK);
        check(Method::GET, path, answer);
    }
    // The incident's budget: none yet, then set.
    let path = format!("/api/incidents/{inc}/budget");
    check(Method::GET, path.clone(), get(&router, &path).await);
    let set = post(&router, &path, json!({"tokens": 90000, "cost_micros": 5})).await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text());
    check(Method::POST, path.clone(), set);
    check(Method::GET, path.clone(), get(&router, &path).await);

    let path = format!("/api/incidents/{inc}/sessions");
    let created = post(&router, &path, json!({"prompt": "look", "priority": 7})).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let session = check(Method::POST, path.clone(), created).json();
    let id = session["id"].as_str().unwrap().to_owned();
    let row = settled(&env, &id).await;
    let mut problems = Vec::new();
    validate(
        &doc,
        &json!({"$ref": "#/components/schemas/Session"}),
        &row,
        "$",
        &mut problems,
    );
    assert!(problems.is_empty(), "{problems:#?}");
    check(
        Method::GET,
        path.clone(),
        get(&router, &format!("{path}?limit=1")).await,
    );

    for path in [
        format!("/api/sessions/{id}"),
        format!("/api/sessions/{id}/reports"),
        format!("/api/sessions/{id}/artifacts"),
        format!("/api/sessions/{id}/reports/1"),
        format!("/api/sessions/{id}/log"),
    ] {
        let answer = get(&router, &path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.text());
        check(Method::GET, path, answer);
    }
    // Budgets: set (a finished session: only set), read, and in the detail.
    let path = format!("/api/sessions/{id}/budget");
    let set = post(&router, &path, json!({"tokens": 5000, "wall_ms": 60000})).await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text());
    check(Method::POST, path.clone(), set);
    for path in [path, format!("/api/sessions/{id}")] {
        let answer = get(&router, &path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.text());
        check(Method::GET, path, answer);
    }
    let artifacts = get(&router, &format!("/api/sessions/{id}/artifacts"))
        .await
        .json();
    let artifact = artifacts["items"][0]["id"].as_str().unwrap().to_owned();
    for path in [
        format!("/api/artifacts/{artifact}"),
        format!("/api/artifacts/{artifact}/content"),
    ] {
        let answer = get(&router, &path).await;
        assert_eq!(answer.status, StatusCode::OK);
        check(Method::GET, path, answer);
    }

    // Errors, each validated as the document's `Error`.
    let unknown = uuid::Uuid::now_v7();
    let errors: Vec<(Method, String, Option<Value>, StatusCode)> = vec![
        (
            Method::GET,
            format!("/api/sessions/{unknown}"),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "/api/sessions/not-a-uuid".into(),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            format!("/api/sessions/{id}/reports/0"),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/api/incidents?limit=0".into(),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/api/incidents".into(),
            Some(json!({"title": "  "})),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/api/incidents".into(),
            Some(json!({"nope": 1})),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            format!("/api/sessions/{id}/messages"),
            Some(json!({"message": "hi"})),
            StatusCode::CONFLICT,
        ),
        (
            Method::POST,
            format!("/api/sessions/{id}/budget"),
            Some(json!({"tokens": -1})),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            format!("/api/sessions/{id}/cancel"),
            None,
            StatusCode::CONFLICT,
        ),
    ];
    for (method, path, body, status) in errors {
        let answer = call(&router, request(method.clone(), &path, body)).await;
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.text());
        check(method, path, answer);
    }

    let path = format!("/api/sessions/{id}/reopen");
    let reopened = post(&router, &path, json!({"message": "again"})).await;
    assert_eq!(reopened.status, StatusCode::OK, "{}", reopened.text());
    check(Method::POST, path, reopened);
    settled(&env, &id).await;
    let path = format!("/api/incidents/{inc}/close");
    let closed = call(&router, request(Method::POST, &path, None)).await;
    check(Method::POST, path.clone(), closed);
    let refused = post(
        &router,
        &format!("/api/incidents/{inc}/sessions"),
        json!({"prompt": "x"}),
    )
    .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    check(
        Method::POST,
        format!("/api/incidents/{inc}/sessions"),
        refused,
    );
}

/// A schema that lacks a field the API sends fails the validation: what a
/// contributor sees who adds a field to a row and not to the document.
#[test]
fn a_field_missing_from_the_document_fails_validation() {
    let mut doc = korvus_http::openapi::document().clone();
    doc["components"]["schemas"]["Counters"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("tool_calls");
    let counters = json!({"turns": 1, "tool_calls": 2, "input_tokens": 3, "output_tokens": 4});
    let mut problems = Vec::new();
    validate(
        &doc,
        &json!({"$ref": "#/components/schemas/Counters"}),
        &counters,
        "$",
        &mut problems,
    );
    assert_eq!(
        problems,
        vec!["$.tool_calls is not in the schema".to_owned()]
    );
}

/// A runner that logs one turn with every kind of event, waits for a
/// permit of `gate` on its first run, writes its report and completes — or
/// fails, for a prompt of `fail`, or panics, for `panic`.
fn every_kind(gate: std::sync::Arc<tokio::sync::Semaphore>) -> crate::support::ScriptRunner {
    use korvus_log::{Author, Event, EventKind, Role};
    crate::support::ScriptRunner::new(move |ctx, resume| {
        let gate = std::sync::Arc::clone(&gate);
        async move {
            let events = vec![
                Event::now(EventKind::TurnStart { turn: 1 }),
                Event::now(EventKind::Message {
                    role: Role::Assistant,
                    text: "looking".into(),
                }),
                Event::now(EventKind::ToolCall {
                    call_id: "c1".into(),
                    tool: "shell".into(),
                    input: json!({"cmd": "df -h"}),
                }),
                Event::now(EventKind::ToolResult {
                    call_id: "c1".into(),
                    ok: true,
                    output: json!("95% used"),
                }),
                Event::now(EventKind::Usage {
                    input_tokens: 30,
                    output_tokens: 20,
                }),
                Event::now(EventKind::Note {
                    text: "stderr: warning".into(),
                })
                .by(Author::Agent),
                Event::now(EventKind::TurnEnd {
                    turn: 1,
                    interrupted: false,
                }),
            ];
            ctx.log.append(&events).await.unwrap();
            if ctx.session.prompt == "fail" {
                return Err(korvus_runner::RunError::msg("the model API is down"));
            }
            if ctx.session.prompt == "panic" {
                panic!("a bug in the runner");
            }
            if resume.is_none() {
                gate.acquire().await.unwrap().forget();
            }
            crate::support::write_files(&ctx, &[("report.md", "# Done\n")]);
            Ok(korvus_runner::RunOutcome::completed(
                korvus_store::Counters::default(),
            ))
        }
    })
}

/// A walk through the lifecycle — a run, its live counters, its end, a
/// reopen, a failed session — with every event-stream frame validated
/// against the document: each `message` as an `Event` (one `oneOf`
/// member exactly), each `end` as a `SessionDetail`, strictly.
#[tokio::test]
async fn every_event_of_a_lifecycle_walk_matches_the_event_schema() {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let env = Env::new(every_kind(std::sync::Arc::clone(&gate))).await;
    let doc = served(&env).await;
    let router = env.router();
    let sessions = format!("/api/incidents/{}/sessions", env.incident.id);
    let id = post(&router, &sessions, json!({"prompt": "look"}))
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // While it runs, after its first turn: counters read from the log.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let live = loop {
        let answer = get(&router, &format!("/api/sessions/{id}")).await;
        conforms(&doc, &Method::GET, &format!("/api/sessions/{id}"), &answer);
        let row = answer.json();
        if row["counters"]["turns"] == 1 {
            break row;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no live counters: {row}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(live["status"], "running", "{live}");
    assert_eq!(
        live["counters"],
        json!({"turns": 1, "tool_calls": 1, "input_tokens": 30, "output_tokens": 20})
    );
    assert_eq!(live["cause"], Value::Null);
    gate.add_permits(1);
    settled(&env, &id).await;
    let reopened = post(
        &router,
        &format!("/api/sessions/{id}/reopen"),
        json!({"message": "and now?"}),
    )
    .await;
    assert_eq!(reopened.status, StatusCode::OK, "{}", reopened.text());
    settled(&env, &id).await;

    let failed = post(&router, &sessions, json!({"prompt": "fail"}))
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    settled(&env, &failed).await;
    let row = get(&router, &format!("/api/sessions/{failed}"))
        .await
        .json();
    assert_eq!(row["status"], "failed");
    assert!(
        row["cause"]
            .as_str()
            .is_some_and(|c| c.contains("the model API is down")),
        "{row}"
    );

    // A panic: korvus says so in the log, and the cause says it too.
    let panicked = post(&router, &sessions, json!({"prompt": "panic"}))
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    settled(&env, &panicked).await;
    let row = get(&router, &format!("/api/sessions/{panicked}"))
        .await
        .json();
    assert!(
        row["cause"]
            .as_str()
            .is_some_and(|c| c.contains("the runner panicked")),
        "{row}"
    );

    let mut kinds = std::collections::BTreeSet::new();
    for session in [&id, &failed, &panicked] {
        let mut reader =
            crate::events::Reader::open(&router, &format!("/api/sessions/{session}/events"), None)
                .await;
        for frame in reader.rest().await {
            let (schema, data) = match frame {
                crate::events::Frame::Event { data, .. } => ("Event", data),
                crate::events::Frame::End(data) => ("SessionDetail", data),
            };
            let media = &doc["paths"]["/sessions/{id}/events"]["get"]["responses"]["200"]
                ["content"]["text/event-stream"]["x-sse-data"];
            let name = if schema == "Event" { "message" } else { "end" };
            let mut problems = Vec::new();
            validate(&doc, &media[name], &data, "$", &mut problems);
            assert!(problems.is_empty(), "{data}: {problems:#?}");
            if schema == "Event" {
                kinds.insert((
                    data["type"].as_str().unwrap().to_owned(),
                    data["by"].to_string(),
                ));
            }
        }
    }
    // The walk saw every kind, and korvus's words beside the agent's.
    for kind in [
        "turn_start",
        "turn_end",
        "message",
        "tool_call",
        "tool_result",
        "note",
        "usage",
    ] {
        assert!(kinds.iter().any(|(k, _)| k == kind), "{kind}: {kinds:?}");
    }
    assert!(
        kinds.contains(&("note".to_owned(), "\"korvus\"".to_owned())),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("message".to_owned(), "\"korvus\"".to_owned())),
        "{kinds:?}"
    );
}

/// An event of no documented kind, or with a field its kind does not
/// have, fails the event schema.
#[test]
fn an_event_the_schema_does_not_describe_fails_it() {
    let doc = korvus_http::openapi::document();
    let event = json!({"$ref": "#/components/schemas/Event"});
    let check = |value: Value| {
        let mut problems = Vec::new();
        validate(doc, &event, &value, "$", &mut problems);
        problems
    };
    assert!(check(json!({"type": "turn_start", "turn": 1, "by": "agent"})).is_empty());
    assert!(
        !check(json!({"type": "turn_start"})).is_empty(),
        "turn missing"
    );
    assert!(!check(json!({"type": "budget_reached"})).is_empty());
    assert!(!check(json!({"type": "note", "text": "x", "extra": 1})).is_empty());
    assert!(!check(json!({"type": "note", "text": "x", "by": "someone"})).is_empty());
}
