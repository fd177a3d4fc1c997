//! The web view: five static files compiled into the binary (no build
//! step, no CDN), served under a policy that lets only those files' own
//! script run.
//!
//! The view follows a session's event stream, renders its report's
//! markdown with DOM text nodes only (never as HTML), and links artifacts
//! as downloads. Should a bug in that renderer ever let agent markup
//! through, the `Content-Security-Policy` below still refuses inline
//! script, `javascript:` URLs and any script from elsewhere.

use axum::extract::OriginalUri;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The policy of the view's page: script and style from the view's own
/// files only, fetches to its own origin only, no frames, no plugins.
pub(crate) const VIEW_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const MARKDOWN_JS: &str = include_str!("../assets/markdown.js");
const SESSION_JS: &str = include_str!("../assets/session.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// The view's routes, stateless.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route(
            "/assets/app.js",
            get(|| async { page(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/markdown.js",
            get(|| async { page(MARKDOWN_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/session.js",
            get(|| async { page(SESSION_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/assets/app.css",
            get(|| async { page(APP_CSS, "text/css; charset=utf-8") }),
        )
}

/// The page, at the router's root — which, nested under a prefix, is both
/// `/prefix` and `/prefix/`. The page names its assets and the API
/// relative to its own address, so it must be served at the address with
/// the trailing slash: the one without redirects there (a relative
/// `Location`, so a proxy that strips a prefix of its own keeps working).
async fn index(OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    if path.ends_with('/') {
        return page(INDEX, "text/html; charset=utf-8");
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    let mut location = format!("{last}/");
    if let Some(query) = uri.query() {
        location.push('?');
        location.push_str(query);
    }
    match HeaderValue::from_str(&location) {
        Ok(location) => (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, location)],
        )
            .into_response(),
        Err(_) => {
            crate::ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such route").into_response()
        }
    }
}

fn page(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(VIEW_CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}
