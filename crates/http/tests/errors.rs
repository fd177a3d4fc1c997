//! Every error status has the JSON error body, wherever it is made: by a
//! route, by the router's fallbacks, or by the server for a request head
//! it cannot read (a URI or head over its limits, a malformed head).

use std::time::Duration;

use axum::http::{Method, StatusCode};
use korvus_http::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{call, request, writing, Env};

#[tokio::test]
async fn the_routers_fallbacks_answer_json() {
    let env = Env::new(writing(&[], 0)).await;
    let app = env.router();
    let mounted = korvus_http::mount(axum::Router::new(), "/korvus", env.router());
    for (app, method, uri) in [
        (&app, Method::POST, "/"),
        (&app, Method::DELETE, "/assets/app.js"),
        (&app, Method::PUT, "/api/incidents"),
        (&mounted, Method::POST, "/korvus/"),
        (&mounted, Method::POST, "/korvus/assets/app.css"),
    ] {
        let answer = call(app, request(method.clone(), uri, None)).await;
        assert_eq!(
            answer.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {uri}"
        );
        assert_eq!(
            answer.json()["code"],
            "method_not_allowed",
            "{method} {uri}"
        );
    }
    env.manager.stop().await;
}

/// Raw bytes to a `Server` serving the korvus router; everything it
/// answered until it closed the connection.
async fn exchange(env: &Env, bytes: &[u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(Server::default().run(listener, env.router(), async move {
        let _ = stopped.await;
    }));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before it has read everything.
    let _ = stream.write_all(bytes).await;
    let mut got = Vec::new();
    let read = stream.read_to_end(&mut got);
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    let _ = stop.send(());
    server.await.unwrap();
    String::from_utf8_lossy(&got).into_owned()
}

/// The last response of an exchange: status, head (lowercase), body.
fn last_answer(text: &str) -> (u16, String, String) {
    let at = text
        .rfind("HTTP/1.1 ")
        .unwrap_or_else(|| panic!("{text:?}"));
    let (head, body) = text[at..].split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn heads_the_server_cannot_read_are_answered_with_json() {
    let env = Env::new(writing(&[], 0)).await;
    let uri = |n: usize| {
        format!(
            "GET /api/incidents?x={} HTTP/1.1\r\nHost: h\r\n\r\n",
            "a".repeat(n)
        )
    };
    let long_head = format!(
        "GET /api/incidents HTTP/1.1\r\nHost: h\r\nX-Big: {}\r\n\r\n",
        "a".repeat(500_000)
    );
    let many: String = (0..101).map(|i| format!("X-{i}: y\r\n")).collect();
    let many = format!("GET /api/incidents HTTP/1.1\r\n{many}\r\n");
    let bad_length = "POST /api/incidents HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n";
    for (head, status, code) in [
        (uri(70_000), 414, "uri_too_long"),
        (uri(10_000), 414, "uri_too_long"),
        (long_head, 431, "headers_too_large"),
        (many, 431, "headers_too_large"),
        (
            "GET /api/incidents HTTP/1.1\r\nBad Header: x\r\n\r\n".into(),
            400,
            "malformed_request",
        ),
        (
            "GET /api/incidents HTTP/9.9\r\nHost: h\r\n\r\n".into(),
            400,
            "malformed_request",
        ),
        (bad_length.into(), 400, "malformed_request"),
    ] {
        let text = exchange(&env, head.as_bytes()).await;
        let (got, head, body) = last_answer(&text);
        assert_eq!(got, status, "{head}\n{body}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(head.contains("connection: close"), "{head}");
        let json: serde_json::Value = serde_json::from_str(&body).expect(&body);
        assert_eq!(json["code"], code, "{body}");
        assert!(
            json["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
        assert!(korvus_http::ERROR_CODES.contains(&code));
    }
    env.manager.stop().await;
}

/// Pipelined on one connection: requests with and without bodies are
/// framed right and answered in order; a refused head is answered after
/// the responses before it, then the connection closes.
#[tokio::test]
async fn a_refused_head_after_good_requests_is_answered_after_theirs() {
    let env = Env::new(writing(&[], 0)).await;
    let body = r#"{"title":"pipelined"}"#;
    let pipelined = format!(
        "\r\nPOST /api/incidents HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}\
         GET /api/incidents HTTP/1.1\r\nHost: h\r\n\r\n\
         GET /{} HTTP/1.1\r\nHost: h\r\n\r\n\
         GET /api/incidents HTTP/1.1\r\nHost: h\r\n\r\n",
        body.len(),
        "a".repeat(9_000)
    );
    let text = exchange(&env, pipelined.as_bytes()).await;
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.1 ")
        .map(|(at, _)| &text[at + 9..at + 12])
        .collect();
    assert_eq!(statuses, ["201", "200", "414"], "{text}");
    assert!(text.contains("pipelined"), "{text}");
    let (_, _, body) = last_answer(&text);
    assert!(body.contains("uri_too_long"), "{body}");
    env.manager.stop().await;
}

/// A chunked request body is not framed by the gate; the request is
/// served, and so is the next one on the connection.
#[tokio::test]
async fn a_chunked_request_passes() {
    let env = Env::new(writing(&[], 0)).await;
    let body = r#"{"title":"chunked"}"#;
    let request = format!(
        "POST /api/incidents HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n\
         GET /api/incidents HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let text = exchange(&env, request.as_bytes()).await;
    assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    assert!(text.contains("HTTP/1.1 200"), "{text}");
    env.manager.stop().await;
}
