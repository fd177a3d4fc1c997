//! The JSON routes: a whole lifecycle, and every refusal with its status,
//! code, and nothing written.

use korvus_store::StoreExt as _;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use korvus_runner::testing::ScriptRunner;
use korvus_runner::{exit, ExitReason, RunOutcome};
use korvus_store::Counters;
use serde_json::json;

use crate::support::{call, get, post, request, settled, writing, Env};

const REPORT: &[(&str, &str)] = &[("report.md", "# Findings\n\nWAL.\n"), ("notes/a.txt", "a")];

#[tokio::test]
async fn a_session_is_created_followed_to_its_report_and_reopened() {
    let env = Env::new(writing(REPORT, 2)).await;
    let app = env.router();

    let created = post(&app, "/api/incidents", json!({"title": "api incident"})).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    let incident = created.json();
    let iid = incident["id"].as_str().unwrap().to_owned();
    assert_eq!(incident["status"], "open");
    let listed = get(&app, "/api/incidents").await.json()["items"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(
        get(&app, &format!("/api/incidents/{iid}")).await.json()["title"],
        "api incident"
    );

    let s = post(
        &app,
        &format!("/api/incidents/{iid}/sessions"),
        json!({"prompt": "why?"}),
    )
    .await;
    assert_eq!(s.status, StatusCode::CREATED, "{}", s.text());
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(s.json()["status"], "running");
    assert_eq!(settled(&env, &sid).await["status"], "completed");
    assert_eq!(
        get(&app, &format!("/api/sessions/{sid}")).await.json()["status"],
        "completed"
    );
    let sessions = get(&app, &format!("/api/incidents/{iid}/sessions"))
        .await
        .json()["items"]
        .clone();
    assert_eq!(sessions[0]["id"], sid.as_str());

    let reports = get(&app, &format!("/api/sessions/{sid}/reports"))
        .await
        .json()["items"]
        .clone();
    assert_eq!(reports.as_array().unwrap().len(), 1);
    let md = get(&app, &format!("/api/sessions/{sid}/reports/1")).await;
    assert_eq!(md.status, StatusCode::OK);
    assert_eq!(md.text(), "# Findings\n\nWAL.\n");
    let artifacts = get(&app, &format!("/api/sessions/{sid}/artifacts"))
        .await
        .json()["items"]
        .clone();
    let note = artifacts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["path"] == "notes/a.txt")
        .expect("notes/a.txt harvested");
    let aid = note["id"].as_str().unwrap();
    assert_eq!(
        get(&app, &format!("/api/artifacts/{aid}")).await.json()["path"],
        "notes/a.txt"
    );
    assert_eq!(
        get(&app, &format!("/api/artifacts/{aid}/content"))
            .await
            .text(),
        "a"
    );
    let log = get(&app, &format!("/api/sessions/{sid}/log")).await;
    assert_eq!(log.status, StatusCode::OK);
    assert!(log.text().contains("message 1"), "{}", log.text());

    let reopened = post(
        &app,
        &format!("/api/sessions/{sid}/reopen"),
        json!({"message": "more"}),
    )
    .await;
    assert_eq!(reopened.status, StatusCode::OK, "{}", reopened.text());
    assert_eq!(reopened.json()["status"], "running");
    assert_eq!(settled(&env, &sid).await["revision"], 2);
    let reports = get(&app, &format!("/api/sessions/{sid}/reports"))
        .await
        .json()["items"]
        .clone();
    assert_eq!(reports.as_array().unwrap().len(), 2);

    let closed = post(&app, &format!("/api/incidents/{iid}/close"), json!({})).await;
    assert_eq!(closed.json()["status"], "closed");
    post(
        &app,
        &format!("/api/incidents/{iid}/sessions"),
        json!({"prompt": "again"}),
    )
    .await
    .assert_error(StatusCode::CONFLICT, "incident_closed");
    env.manager.stop().await;
}

#[tokio::test]
async fn a_session_waiting_for_the_user_takes_a_message() {
    let runner = ScriptRunner::new(|_ctx, message| async move {
        let reason = match message {
            None => ExitReason::AWAITING_USER,
            Some(_) => ExitReason::COMPLETED,
        };
        Ok(RunOutcome::new(reason, Counters::default()))
    });
    let env = Env::new(runner).await;
    let app = env.router();
    let iid = env.incident.id;
    let s = post(
        &app,
        &format!("/api/incidents/{iid}/sessions"),
        json!({"prompt": "ask me"}),
    )
    .await;
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    let row = settled(&env, &sid).await;
    assert_eq!(row["exit_reason"], exit::AWAITING_USER);
    post(
        &app,
        &format!("/api/sessions/{sid}/reopen"),
        json!({"message": "x"}),
    )
    .await
    .assert_error(StatusCode::CONFLICT, "not_finished");
    post(
        &app,
        &format!("/api/sessions/{sid}/messages"),
        json!({"message": "  "}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "message_required");
    let answered = post(
        &app,
        &format!("/api/sessions/{sid}/messages"),
        json!({"message": "yes"}),
    )
    .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text());
    assert_eq!(settled(&env, &sid).await["status"], "completed");
    post(
        &app,
        &format!("/api/sessions/{sid}/messages"),
        json!({"message": "again"}),
    )
    .await
    .assert_error(StatusCode::CONFLICT, "not_awaiting_user");
    env.manager.stop().await;
}

#[tokio::test]
async fn bad_requests_get_a_typed_error_and_write_nothing() {
    let env = Env::new(writing(REPORT, 0)).await;
    let app = env.router();
    let iid = env.incident.id;
    let sessions = format!("/api/incidents/{iid}/sessions");

    post(&app, &sessions, json!({"prompt": " "}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "prompt_required");
    let huge = "x".repeat(korvus_http::DEFAULT_BODY_LIMIT + 1);
    post(&app, &sessions, json!({ "prompt": huge }))
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    post(&app, &sessions, json!({"prompt": "x", "admin": true}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_body");
    let mut plain = request(Method::POST, &sessions, None);
    *plain.body_mut() = axum::body::Body::from("prompt=x");
    call(&app, plain)
        .await
        .assert_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    post(
        &app,
        &sessions,
        json!({"prompt": "x", "context": [{"artifact_id": "nope"}]}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_id");
    post(&app, "/api/incidents", json!({"title": ""}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_input");
    let nothing = env.store.all_sessions(iid).await.unwrap();
    assert!(nothing.is_empty(), "a refused request wrote {nothing:?}");
    assert_eq!(env.store.all_incidents().await.unwrap().len(), 1);

    let unknown = uuid_like();
    for uri in [
        format!("/api/sessions/{unknown}"),
        format!("/api/incidents/{unknown}"),
        format!("/api/incidents/{unknown}/sessions"),
        format!("/api/sessions/{unknown}/reports"),
        format!("/api/sessions/{unknown}/reports/1"),
        format!("/api/sessions/{unknown}/artifacts"),
        format!("/api/sessions/{unknown}/events"),
        format!("/api/sessions/{unknown}/log"),
        format!("/api/artifacts/{unknown}"),
        format!("/api/artifacts/{unknown}/content"),
    ] {
        get(&app, &uri)
            .await
            .assert_error(StatusCode::NOT_FOUND, "not_found");
    }
    post(&app, &format!("/api/sessions/{unknown}/cancel"), json!({}))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    for uri in [
        "/api/sessions/not-a-uuid",
        "/api/incidents/1/sessions",
        "/api/artifacts/%3Cscript%3E/content",
        "/api/sessions/x/events",
    ] {
        get(&app, uri)
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_id");
    }
    let s = env
        .manager
        .create(korvus_session::CreateSession::new(iid, "p"));
    let sid = s.await.unwrap().id;
    settled(&env, &sid.to_string()).await;
    get(&app, &format!("/api/sessions/{sid}/reports/0"))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_revision");
    get(&app, &format!("/api/sessions/{sid}/reports/7"))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    post(&app, &format!("/api/sessions/{sid}/cancel"), json!({}))
        .await
        .assert_error(StatusCode::CONFLICT, "already_ended");
    get(&app, "/api/nothing")
        .await
        .assert_error(StatusCode::NOT_FOUND, "no_route");
    call(&app, request(Method::DELETE, "/api/incidents", None))
        .await
        .assert_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    env.manager.stop().await;
}

fn uuid_like() -> String {
    korvus_store::SessionId::new().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_with_one_idempotency_key_answer_one_session() {
    let env = Env::new(writing(REPORT, 1)).await;
    let app = env.router();
    let uri = format!("/api/incidents/{}/sessions", env.incident.id);
    let keyed = |prompt: &str| {
        let mut r = request(
            Method::POST,
            &uri,
            Some(json!({ "prompt": prompt, "priority": 7 })),
        );
        r.headers_mut()
            .insert("idempotency-key", "deploy-42".parse().unwrap());
        r
    };
    let answers =
        futures::future::join_all((0..50).map(|_| call(&app, keyed("investigate")))).await;
    let ids: Vec<String> = answers
        .iter()
        .map(|a| {
            assert_eq!(a.status, StatusCode::CREATED, "{}", a.text());
            a.json()["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let row = answers[0].json();
    assert_eq!(row["admission"]["priority"], 7);
    assert_eq!(row["admission"]["idempotency_key"], "deploy-42");
    let listed = get(&app, &uri).await.json()["items"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1);

    call(&app, keyed("something else"))
        .await
        .assert_error(StatusCode::CONFLICT, "idempotency_conflict");
    settled(&env, &ids[0]).await;
}

/// Past the manager's bound on the queue a create answers 429
/// `queue_full` with `Retry-After`, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_past_the_queue_bound_is_429_with_retry_after_and_writes_nothing() {
    let held = ScriptRunner::new(|ctx, _| async move {
        ctx.cancel.cancelled().await;
        Ok(RunOutcome::completed(Counters::default()))
    });
    let env = Env::with(held, |b| b.max_running(1).max_queued(1)).await;
    let app = env.router();
    let uri = format!("/api/incidents/{}/sessions", env.incident.id);
    let create = |prompt: &str| request(Method::POST, &uri, Some(json!({ "prompt": prompt })));
    let running = call(&app, create("runs")).await;
    assert_eq!(running.status, StatusCode::CREATED, "{}", running.text());
    // Started (the create may have met the manager's own claim probe and
    // been queued for a moment): its slot is the only one.
    let id: korvus_store::SessionId = running.json()["id"].as_str().unwrap().parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while env
        .store
        .get_session(id)
        .await
        .unwrap()
        .started_at
        .is_none()
    {
        assert!(std::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let queued = call(&app, create("waits")).await;
    assert_eq!(queued.status, StatusCode::CREATED, "{}", queued.text());
    assert!(queued.json()["id"].is_string());
    let before = env.store.all_sessions(env.incident.id).await.unwrap().len();
    let full = call(&app, create("one too many")).await;
    full.assert_error(StatusCode::TOO_MANY_REQUESTS, "queue_full");
    assert_eq!(full.headers[axum::http::header::RETRY_AFTER], "5");
    assert_eq!(
        env.store.all_sessions(env.incident.id).await.unwrap().len(),
        before,
        "nothing written"
    );
    env.manager.stop().await;
}

/// A real agent's kept state (`agent_state`, its thread for a reopen) is
/// stored but never listed or served.
#[tokio::test]
async fn an_agents_kept_state_is_neither_listed_nor_served() {
    const FILES: &[(&str, &str)] = &[
        ("report.md", "# Findings\n"),
        (".korvus/agent/state.json", "{\"thread\":\"t\"}"),
    ];
    let env = Env::new(writing(FILES, 1)).await;
    let app = env.router();
    let iid = env.incident.id;
    let s = post(
        &app,
        &format!("/api/incidents/{iid}/sessions"),
        json!({"prompt": "why?"}),
    )
    .await;
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(settled(&env, &sid).await["status"], "completed");
    let stored = env
        .store
        .all_session_artifacts(sid.parse().unwrap())
        .await
        .unwrap();
    let state = stored
        .iter()
        .find(|a| a.kind == korvus_store::ArtifactKind::AgentState)
        .expect("the kept state is stored");
    assert_eq!(state.path, ".korvus/agent/state.json");
    let listed = get(&app, &format!("/api/sessions/{sid}/artifacts"))
        .await
        .json()["items"]
        .clone();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["kind"] != "agent_state"),
        "{listed}"
    );
    for path in [
        format!("/api/artifacts/{}", state.id),
        format!("/api/artifacts/{}/content", state.id),
    ] {
        let r = get(&app, &path).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}: {}", r.text());
    }
}

/// A session paused at its budget (its runner returned `budget_reached`,
/// as the command runner does past a cap): its budget is read, shown in
/// its detail, and raised through the API, which continues it; bad
/// limits are refused and change nothing.
#[tokio::test]
async fn a_session_paused_at_its_budget_continues_once_raised_through_the_api() {
    let runner = korvus_runner::testing::ScriptRunner::new(|_ctx, message| async move {
        let reason = match message {
            None => ExitReason::BUDGET_REACHED,
            Some(_) => ExitReason::COMPLETED,
        };
        Ok(RunOutcome::new(reason, Counters::default()))
    });
    let env = Env::new(runner).await;
    let app = env.router();
    let iid = env.incident.id;
    let s = post(
        &app,
        &format!("/api/incidents/{iid}/sessions"),
        json!({"prompt": "spend"}),
    )
    .await;
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    let uri = format!("/api/sessions/{sid}/budget");
    assert_eq!(
        settled(&env, &sid).await["exit_reason"],
        exit::BUDGET_REACHED
    );
    let none = get(&app, &uri).await;
    assert_eq!(none.status, StatusCode::OK, "{}", none.text());
    assert_eq!(none.json(), json!({"session": null, "incident": null}));

    // A limit of nothing: reached at once, it stays paused.
    let set = post(&app, &uri, json!({"tokens": 0})).await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text());
    let id = sid.parse().unwrap();
    env.budgets
        .spend(id, iid, korvus_store::Spend::tokens(80, 20))
        .await
        .unwrap();
    let detail = get(&app, &format!("/api/sessions/{sid}")).await.json();
    assert_eq!(detail["budget"]["session"]["reached"], "tokens", "{detail}");
    assert_eq!(detail["budget"]["session"]["remaining_tokens"], 0);
    assert_eq!(detail["budget"]["session"]["spent"]["input_tokens"], 80);

    for (body, status, code) in [
        (
            json!({"tokens": -1}),
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
        (json!({"token": 5}), StatusCode::BAD_REQUEST, "invalid_body"),
        (
            json!({"tokens": 9_223_372_036_854_775_808_u64}),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
    ] {
        post(&app, &uri, body).await.assert_error(status, code);
    }
    let unknown = format!("/api/sessions/{}/budget", korvus_store::SessionId::new());
    post(&app, &unknown, json!({"tokens": 1}))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(
        settled(&env, &sid).await["exit_reason"],
        exit::BUDGET_REACHED
    );

    let raised = post(&app, &uri, json!({"tokens": 1000})).await;
    assert_eq!(raised.status, StatusCode::OK, "{}", raised.text());
    assert_eq!(raised.json()["session"]["limits"]["tokens"], 1000);
    assert_eq!(raised.json()["session"]["remaining_tokens"], 900);
    let mut row = settled(&env, &sid).await;
    for _ in 0..100 {
        if row["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        row = settled(&env, &sid).await;
    }
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["revision"], 2);
    env.manager.stop().await;
}

/// An incident's budget is read and set over the API, shows in its
/// sessions' details, and refuses bad limits and unknown incidents with
/// nothing written.
#[tokio::test]
async fn an_incidents_budget_is_read_and_set_through_the_api() {
    let env = Env::new(writing(&[("report.md", "# Done\n")], 1)).await;
    let app = env.router();
    let iid = env.incident.id;
    let uri = format!("/api/incidents/{iid}/budget");
    let none = get(&app, &uri).await;
    assert_eq!(none.status, StatusCode::OK, "{}", none.text());
    assert_eq!(none.json(), json!({"incident": null}));

    let set = post(&app, &uri, json!({"tokens": 4000, "wall_ms": 60000})).await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text());
    let s = post(
        &app,
        &format!("/api/incidents/{iid}/sessions"),
        json!({"prompt": "look"}),
    )
    .await;
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    settled(&env, &sid).await;
    env.budgets
        .spend(
            sid.parse().unwrap(),
            iid,
            korvus_store::Spend::tokens(300, 200),
        )
        .await
        .unwrap();
    let read = get(&app, &uri).await.json();
    assert_eq!(read["incident"]["limits"]["tokens"], 4000, "{read}");
    assert_eq!(read["incident"]["limits"]["wall_ms"], 60000);
    assert_eq!(read["incident"]["spent"]["output_tokens"], 200);
    assert_eq!(read["incident"]["remaining_tokens"], 3500);
    let detail = get(&app, &format!("/api/sessions/{sid}")).await.json();
    assert_eq!(detail["budget"]["incident"], read["incident"], "{detail}");
    assert_eq!(detail["budget"]["session"], serde_json::Value::Null);

    for (body, status, code) in [
        (
            json!({"tokens": -1}),
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
        (json!({"token": 5}), StatusCode::BAD_REQUEST, "invalid_body"),
        (
            json!({"tokens": 9_223_372_036_854_775_808_u64}),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
    ] {
        post(&app, &uri, body).await.assert_error(status, code);
    }
    let unknown = format!("/api/incidents/{}/budget", korvus_store::IncidentId::new());
    for answer in [
        get(&app, &unknown).await,
        post(&app, &unknown, json!({"tokens": 1})).await,
    ] {
        answer.assert_error(StatusCode::NOT_FOUND, "not_found");
    }
    get(&app, "/api/incidents/nope/budget")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_id");
    assert_eq!(get(&app, &uri).await.json(), read, "nothing written");
    env.manager.stop().await;
}
