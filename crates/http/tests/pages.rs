//! Paginated lists: `?limit=&after=`, the next cursor in the body and in an
//! RFC 8288 `Link` header, every row once over a walk, and typed refusals
//! of a bad limit or cursor.

use std::collections::HashSet;

use axum::http::StatusCode;
use korvus_store::NewIncident;
use serde_json::{json, Value};

use crate::support::{get, post, writing, Env};

/// Follows `Link: <…>; rel="next"` from `first`; returns every page's body.
async fn follow(app: &axum::Router, first: &str) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut uri = first.to_owned();
    loop {
        let answer = get(app, &uri).await;
        assert_eq!(answer.status, StatusCode::OK, "{uri}: {}", answer.text());
        let body = answer.json();
        let link = answer
            .headers
            .get("link")
            .map(|v| v.to_str().unwrap().to_owned());
        match (&body["next"], link) {
            (Value::Null, None) => {
                pages.push(body);
                return pages;
            }
            (Value::String(next), Some(link)) => {
                let (target, rel) = link.split_once("; ").expect("a link");
                assert_eq!(rel, "rel=\"next\"");
                let target = target.trim_start_matches('<').trim_end_matches('>');
                assert!(target.ends_with(&format!("after={next}")), "{target}");
                uri = target.to_owned();
                pages.push(body);
            }
            (next, link) => panic!("body next {next} and Link {link:?} disagree"),
        }
    }
}

#[tokio::test]
async fn every_list_route_pages_with_a_cursor_and_a_link() {
    let env = Env::new(writing(&[("report.md", "# R\n")], 1)).await;
    let app = env.router();
    for i in 0..4 {
        env.store
            .create_incident(NewIncident {
                title: format!("paged {i}"),
                workspace: None,
            })
            .await
            .unwrap();
    }
    let pages = follow(&app, "/api/incidents?limit=2").await;
    let sizes: Vec<usize> = pages
        .iter()
        .map(|p| p["items"].as_array().unwrap().len())
        .collect();
    // The Env's own incident and the four above: 2, 2, 1.
    assert_eq!(sizes, [2, 2, 1]);
    let ids: HashSet<String> = pages
        .iter()
        .flat_map(|p| p["items"].as_array().unwrap().iter())
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 5, "every incident once");

    let iid = env.incident.id.to_string();
    let sessions = format!("/api/incidents/{iid}/sessions");
    for i in 0..3 {
        let created = post(&app, &sessions, json!({"prompt": format!("p{i}")})).await;
        assert_eq!(created.status, StatusCode::CREATED);
    }
    let pages = follow(&app, &format!("{sessions}?limit=2")).await;
    let seqs: Vec<u64> = pages
        .iter()
        .flat_map(|p| p["items"].as_array().unwrap().iter())
        .map(|s| s["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    // Without a limit: the default page holds them all, and no Link.
    let whole = get(&app, &sessions).await;
    assert!(whole.headers.get("link").is_none());
    assert_eq!(whole.json()["items"].as_array().unwrap().len(), 3);
    assert_eq!(whole.json()["next"], Value::Null);
}

#[tokio::test]
async fn a_bad_limit_or_cursor_is_a_typed_400() {
    let env = Env::new(writing(&[("report.md", "# R\n")], 1)).await;
    let app = env.router();
    let iid = env.incident.id.to_string();
    for uri in [
        "/api/incidents?limit=0".to_owned(),
        "/api/incidents?limit=ten".to_owned(),
        "/api/incidents?after=not%20a%20cursor".to_owned(),
        // A seq where an id is expected, and the reverse.
        "/api/incidents?after=3".to_owned(),
        format!("/api/incidents/{iid}/sessions?after={iid}"),
    ] {
        get(&app, &uri)
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_input");
    }
    // Past the maximum is clamped, not refused, however large.
    for limit in ["100000", "99999999999", "100000000000000000000000000000"] {
        let page = get(&app, &format!("/api/incidents?limit={limit}")).await;
        assert_eq!(page.status, StatusCode::OK, "{limit}: {}", page.text());
    }
    env.manager.stop().await;
}

/// `docs/http.md`: a query parameter a route does not take is
/// `400 invalid_input`, naming it — on every route, with a query or not.
#[tokio::test]
async fn an_unknown_query_parameter_is_a_typed_400_naming_it() {
    let env = Env::new(writing(&[("report.md", "# R\n")], 1)).await;
    let app = env.router();
    let iid = env.incident.id.to_string();
    for uri in [
        "/api/incidents?limt=5".to_owned(),
        "/api/incidents?limit=5&limt=5".to_owned(),
        format!("/api/incidents/{iid}?limt=5"),
        format!("/api/incidents/{iid}/sessions?limt=5"),
        "/api/openapi.json?limt".to_owned(),
        format!("/api/sessions/{iid}/events?limt=1"),
    ] {
        let answer = get(&app, &uri).await;
        answer.assert_error(StatusCode::BAD_REQUEST, "invalid_input");
        assert!(
            answer.json()["error"].as_str().unwrap().contains("`limt`"),
            "{uri}: {}",
            answer.text()
        );
    }
    let created = crate::support::post(
        &app,
        "/api/incidents?x=1",
        serde_json::json!({"title": "t"}),
    )
    .await;
    created.assert_error(StatusCode::BAD_REQUEST, "invalid_input");
    // The parameters a route takes still pass, percent-encoded too.
    let page = get(&app, "/api/incidents?li%6Dit=5").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    env.manager.stop().await;
}
