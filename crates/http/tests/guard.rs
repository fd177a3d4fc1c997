//! The guard of `korvus serve`: token, cookie exchange, CSRF, `Host` and
//! `Origin`. A refused request writes nothing.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use korvus_http::guard::{Guard, COOKIE, CSRF_HEADER};
use korvus_store::StoreExt as _;
use serde_json::json;

use crate::support::{call, writing, Answer, Env};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const HOST: &str = "127.0.0.1:8787";

fn guarded(env: &Env) -> Router {
    let guard = Guard::new(TOKEN, [HOST.to_owned(), "localhost:8787".to_owned()]).unwrap();
    guard.protect(env.router())
}

struct Req {
    method: Method,
    uri: String,
    headers: Vec<(String, String)>,
    body: Option<serde_json::Value>,
}

impl Req {
    fn new(method: Method, uri: &str) -> Self {
        Self {
            method,
            uri: uri.to_owned(),
            headers: vec![("host".into(), HOST.into())],
            body: None,
        }
    }
    fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.retain(|(n, _)| n != name);
        self.headers.push((name.into(), value.into()));
        self
    }
    fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| n != name);
        self
    }
    fn bearer(self) -> Self {
        self.header("authorization", &format!("Bearer {TOKEN}"))
    }
    fn json(mut self, v: serde_json::Value) -> Self {
        self.body = Some(v);
        self
    }
    async fn send(self, app: &Router) -> Answer {
        let mut b = Request::builder().method(self.method).uri(self.uri);
        for (n, v) in &self.headers {
            b = b.header(n, v);
        }
        let req = match self.body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Body::from(v.to_string()))
                .unwrap(),
            None => b.body(Body::empty()).unwrap(),
        };
        call(app, req).await
    }
}

#[tokio::test]
async fn every_refusal_has_its_status_and_code_and_writes_nothing() {
    let env = Env::new(writing(&[], 0)).await;
    let app = guarded(&env);
    let create = || Req::new(Method::POST, "/api/incidents").json(json!({"title": "x"}));

    create()
        .send(&app)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "token_required");
    let wrong = create()
        .header("authorization", "Bearer nope")
        .send(&app)
        .await;
    wrong.assert_error(StatusCode::UNAUTHORIZED, "token_invalid");
    assert_eq!(wrong.header("www-authenticate"), "Bearer");
    create()
        .bearer()
        .header("host", "evil.example:8787")
        .send(&app)
        .await
        .assert_error(StatusCode::FORBIDDEN, "host_not_allowed");
    create()
        .bearer()
        .without("host")
        .send(&app)
        .await
        .assert_error(StatusCode::FORBIDDEN, "host_not_allowed");
    for origin in ["https://evil.example", "null", "http://127.0.0.1:9999"] {
        create()
            .bearer()
            .header("origin", origin)
            .send(&app)
            .await
            .assert_error(StatusCode::FORBIDDEN, "origin_not_allowed");
    }
    // The static view is public on an allowed host, never on another.
    let page = Req::new(Method::GET, "/").send(&app).await;
    assert_eq!(page.status, StatusCode::OK);
    Req::new(Method::GET, "/assets/app.js")
        .header("host", "rebound.example")
        .send(&app)
        .await
        .assert_error(StatusCode::FORBIDDEN, "host_not_allowed");
    assert_eq!(
        env.store.all_incidents().await.unwrap().len(),
        1,
        "nothing written"
    );

    let ok = create()
        .bearer()
        .header("origin", "http://127.0.0.1:8787")
        .send(&app)
        .await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.text());
    env.manager.stop().await;
}

#[tokio::test]
async fn the_browser_exchanges_the_token_for_a_cookie_and_sends_a_csrf_token() {
    let env = Env::new(writing(&[], 0)).await;
    let app = guarded(&env);
    Req::new(Method::POST, "/api/login")
        .header("authorization", "Bearer nope")
        .send(&app)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "token_invalid");
    let login = Req::new(Method::POST, "/api/login")
        .bearer()
        .send(&app)
        .await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.text());
    let set = login.header("set-cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(
        set.contains("Max-Age=86400") && !set.contains("Path="),
        "{set}"
    );
    let sid = set.split(';').next().unwrap().to_owned();
    assert!(sid.starts_with(&format!("{COOKIE}=")));
    let csrf = login.json()["csrf"].as_str().unwrap().to_owned();

    // Reads with the cookie alone; the CSRF token can be fetched again.
    let list = Req::new(Method::GET, "/api/incidents")
        .header("cookie", &sid)
        .send(&app)
        .await;
    assert_eq!(list.status, StatusCode::OK);
    let again = Req::new(Method::GET, "/api/csrf")
        .header("cookie", &sid)
        .send(&app)
        .await;
    assert_eq!(again.json()["csrf"], csrf.as_str());

    // Writes with the cookie need the CSRF header.
    let create = || {
        Req::new(Method::POST, "/api/incidents")
            .header("cookie", &sid)
            .json(json!({"title": "from the view"}))
    };
    create()
        .send(&app)
        .await
        .assert_error(StatusCode::FORBIDDEN, "csrf_failed");
    create()
        .header(CSRF_HEADER, "wrong")
        .send(&app)
        .await
        .assert_error(StatusCode::FORBIDDEN, "csrf_failed");
    assert_eq!(
        env.store.all_incidents().await.unwrap().len(),
        1,
        "nothing written"
    );
    let ok = create().header(CSRF_HEADER, &csrf).send(&app).await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.text());

    Req::new(Method::GET, "/api/incidents")
        .header("cookie", &format!("{COOKIE}=forged"))
        .send(&app)
        .await
        .assert_error(StatusCode::UNAUTHORIZED, "token_invalid");
    env.manager.stop().await;
}

#[test]
fn short_tokens_are_refused() {
    let err = Guard::new("short", ["h".to_owned()]).unwrap_err();
    assert_eq!(err.len, 5);
    let token = Guard::generate_token().unwrap();
    assert_eq!(token.len(), 64);
    assert_ne!(token, Guard::generate_token().unwrap());
}

/// HTTP/2 has no `Host` header: the authority comes as `:authority`, which
/// hyper puts in the request's URI. The guard applies the same rules to it.
#[tokio::test]
async fn an_http2_authority_stands_for_host_by_the_same_rules() {
    use axum::http::Version;
    let env = Env::new(writing(&[], 0)).await;
    let app = guarded(&env);
    let h2 = |uri: &str| {
        Request::builder()
            .version(Version::HTTP_2)
            .uri(uri)
            .header("authorization", format!("Bearer {TOKEN}"))
    };
    let send = |b: axum::http::request::Builder| call(&app, b.body(Body::empty()).unwrap());

    let ok = send(h2("http://127.0.0.1:8787/api/incidents")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text());
    let ok = send(h2("https://LOCALHOST:8787/api/incidents")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text());
    send(h2("http://evil.example:8787/api/incidents"))
        .await
        .assert_error(StatusCode::FORBIDDEN, "host_not_allowed");
    send(h2("http://127.0.0.1:8787/api/incidents").header("origin", "https://evil.example"))
        .await
        .assert_error(StatusCode::FORBIDDEN, "origin_not_allowed");
    // Both present: they must name the same host.
    send(h2("http://127.0.0.1:8787/api/incidents").header("host", "localhost:8787"))
        .await
        .assert_error(StatusCode::FORBIDDEN, "host_not_allowed");
    let same = send(h2("http://127.0.0.1:8787/api/incidents").header("host", HOST)).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.text());
    // An allowed Host does not launder a foreign authority either.
    send(h2("http://evil.example:8787/api/incidents").header("host", HOST))
        .await
        .assert_error(StatusCode::FORBIDDEN, "host_not_allowed");
    env.manager.stop().await;
}

/// `mount` hands `<prefix>/` to the guarded router as its root; an HTTP/2
/// request keeps its authority through that, as through `nest`.
#[tokio::test]
async fn a_mounted_guard_sees_the_http2_authority_at_the_prefix_root() {
    use axum::http::Version;
    let env = Env::new(writing(&[], 0)).await;
    let app = korvus_http::mount(Router::new(), "/korvus", guarded(&env));
    for path in ["/korvus/", "/korvus/api/incidents"] {
        let request = Request::builder()
            .version(Version::HTTP_2)
            .uri(format!("http://127.0.0.1:8787{path}"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap();
        let answer = call(&app, request).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.text());
    }
    env.manager.stop().await;
}
