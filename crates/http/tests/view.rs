//! The web view's files: compiled in, served under a policy that runs no
//! script but their own.

use axum::http::StatusCode;

use crate::support::{get, writing, Env};

#[tokio::test]
async fn the_view_is_served_under_a_strict_content_security_policy() {
    let env = Env::new(writing(&[], 0)).await;
    let app = env.router();
    let page = get(&app, "/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.header("content-type").starts_with("text/html"));
    let csp = page.header("content-security-policy");
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(page.header("x-content-type-options"), "nosniff");
    let html = page.text();
    // No inline script: the only scripts are the view's own files.
    let scripts = ["markdown.js", "app.js", "session.js"];
    assert_eq!(html.matches("<script").count(), scripts.len());
    for script in scripts {
        assert!(html.contains(&format!(r#"<script src="assets/{script}" defer></script>"#)));
    }
    assert!(!html.contains("onclick=") && !html.contains("onload="));
    // Without JavaScript the page points at the CLI and the API.
    assert!(html.contains("<noscript>") && html.contains("korvus show"));

    for script in scripts {
        let js = get(&app, &format!("/assets/{script}")).await;
        assert!(js.header("content-type").starts_with("text/javascript"));
        // Agent text reaches the page as text nodes only.
        let text = js.text();
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "eval(",
            "document.write",
        ] {
            assert!(!text.contains(sink), "{script} uses {sink}");
        }
    }
    let css = get(&app, "/assets/app.css").await;
    assert!(css.header("content-type").starts_with("text/css"));
    get(&app, "/assets/other.js")
        .await
        .assert_error(StatusCode::NOT_FOUND, "no_route");

    let api_only = korvus_http::Api::default()
        .view(false)
        .router(env.manager.clone());
    get(&api_only, "/")
        .await
        .assert_error(StatusCode::NOT_FOUND, "no_route");
    env.manager.stop().await;
}

/// Mounted under a prefix, as `docs/embedding.md` shows: `/korvus`
/// redirects to `/korvus/`, which serves the page; its assets and API
/// calls resolve under the prefix.
#[tokio::test]
async fn the_view_works_mounted_under_a_prefix() {
    let env = Env::new(writing(&[], 0)).await;
    let app = korvus_http::mount(axum::Router::new(), "/korvus", env.router());
    let bare = get(&app, "/korvus").await;
    assert_eq!(
        bare.status,
        StatusCode::PERMANENT_REDIRECT,
        "{}",
        bare.text()
    );
    assert_eq!(bare.header("location"), "korvus/");
    let page = get(&app, "/korvus/").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    assert!(page.header("content-type").starts_with("text/html"));
    for asset in [
        "/korvus/assets/app.js",
        "/korvus/assets/markdown.js",
        "/korvus/assets/session.js",
        "/korvus/assets/app.css",
    ] {
        assert_eq!(get(&app, asset).await.status, StatusCode::OK, "{asset}");
    }
    let incidents = get(&app, "/korvus/api/incidents").await;
    assert_eq!(incidents.status, StatusCode::OK, "{}", incidents.text());
    // Unnested, the root serves the page as before.
    assert_eq!(get(&env.router(), "/").await.status, StatusCode::OK);
    env.manager.stop().await;
}
