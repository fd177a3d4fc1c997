//! Downloads of agent-written bytes never render on the view's origin.

use axum::http::StatusCode;
use serde_json::Value;

use crate::support::{get, post, settled, writing, Answer, Env};

const HOSTILE: &[(&str, &str)] = &[
    (
        "report.md",
        "# Report\n\n<script>alert(1)</script>\n\n[click](javascript:alert(1))\n",
    ),
    ("x.html", "<html><script>parent.pwned = 1</script></html>"),
    (
        "pic.svg",
        "<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>",
    ),
    ("odd \"name\"; x=y.html", "<script>alert(2)</script>"),
];

#[track_caller]
fn assert_inert(a: &Answer) {
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    assert!(a.header("content-disposition").starts_with("attachment; "));
    assert_eq!(a.header("x-content-type-options"), "nosniff");
    assert!(a.header("content-security-policy").starts_with("sandbox"));
}

#[tokio::test]
async fn agent_files_download_as_sandboxed_attachments() {
    let env = Env::new(writing(HOSTILE, 0)).await;
    let app = env.router();
    let s = post(
        &app,
        &format!("/api/incidents/{}/sessions", env.incident.id),
        serde_json::json!({"prompt": "go"}),
    )
    .await;
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    settled(&env, &sid).await;

    let report = get(&app, &format!("/api/sessions/{sid}/reports/1")).await;
    assert_inert(&report);
    assert!(
        report.text().contains("<script>"),
        "the bytes are served as stored"
    );

    let artifacts = get(&app, &format!("/api/sessions/{sid}/artifacts"))
        .await
        .json();
    let by_path = |p: &str| -> Value {
        artifacts
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["path"] == p)
            .unwrap_or_else(|| panic!("{p} not harvested: {artifacts}"))
            .clone()
    };
    for path in ["x.html", "pic.svg", "odd \"name\"; x=y.html"] {
        let a = by_path(path);
        let content = get(
            &app,
            &format!("/api/artifacts/{}/content", a["id"].as_str().unwrap()),
        )
        .await;
        assert_inert(&content);
        let disposition = content.header("content-disposition");
        assert_eq!(disposition.matches('"').count(), 2, "{disposition}");
    }
    let html = by_path("x.html");
    let content = get(
        &app,
        &format!("/api/artifacts/{}/content", html["id"].as_str().unwrap()),
    )
    .await;
    assert!(content
        .header("content-disposition")
        .contains("filename=\"x.html\""));
    assert_eq!(
        content.text(),
        "<html><script>parent.pwned = 1</script></html>"
    );

    let log = get(&app, &format!("/api/sessions/{sid}/log")).await;
    assert_inert(&log);
    env.manager.stop().await;
}
