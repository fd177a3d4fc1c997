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
        .json()["items"]
        .clone();
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

#[tokio::test]
async fn a_large_artifact_is_streamed_with_its_length() {
    const SIZE: usize = 6 * 1024 * 1024;
    let runner = korvus_runner::testing::ScriptRunner::new(|ctx, _| async move {
        let dir = ctx.scratch.clone().expect("scratch dir");
        let bytes: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("dump.bin"), bytes).unwrap();
        std::fs::write(dir.join("report.md"), "# big\n").unwrap();
        Ok(korvus_runner::RunOutcome::completed(Default::default()))
    });
    let env = Env::new(runner).await;
    let app = env.router();
    let s = post(
        &app,
        &format!("/api/incidents/{}/sessions", env.incident.id),
        serde_json::json!({"prompt": "dump"}),
    )
    .await;
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    settled(&env, &sid).await;
    let artifacts = get(&app, &format!("/api/sessions/{sid}/artifacts"))
        .await
        .json()["items"]
        .clone();
    let dump = artifacts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["path"] == "dump.bin")
        .expect("dump.bin harvested");
    let content = get(
        &app,
        &format!("/api/artifacts/{}/content", dump["id"].as_str().unwrap()),
    )
    .await;
    assert_inert(&content);
    assert_eq!(content.header("content-length"), SIZE.to_string());
    assert_eq!(content.body.len(), SIZE);
    assert!(content
        .body
        .iter()
        .enumerate()
        .all(|(i, b)| *b == (i % 251) as u8));
    env.manager.stop().await;
}

/// The log download streams: a log of several export chunks (3,000 events)
/// comes without a `Content-Length`, and its bytes are the whole export.
#[tokio::test]
async fn a_long_log_is_streamed_and_equals_the_whole_export() {
    let runner = crate::support::writing(&[("report.md", "# R\n")], 3_000);
    let env = Env::new(runner).await;
    let app = env.router();
    let iid = env.incident.id;
    let s = post(
        &app,
        &format!("/api/incidents/{iid}/sessions"),
        serde_json::json!({"prompt": "long"}),
    )
    .await;
    let sid = s.json()["id"].as_str().unwrap().to_owned();
    settled(&env, &sid).await;
    let log = get(&app, &format!("/api/sessions/{sid}/log")).await;
    assert_eq!(log.status, StatusCode::OK);
    assert!(log.headers.get("content-length").is_none(), "streamed");
    let handle = env
        .manager
        .turn_log()
        .open(
            korvus_log::LogId::from_uuid(sid.parse::<korvus_store::SessionId>().unwrap().as_uuid()),
            korvus_log::Access::Read,
        )
        .await
        .unwrap();
    let whole = korvus_log::export_jsonl(&handle).await.unwrap();
    assert!(whole.iter().filter(|b| **b == b'\n').count() > 3_000);
    assert_eq!(log.text().into_bytes(), whole);
    env.manager.stop().await;
}
