//! The stub's own tests: each API, each mode, streaming or not, TLS.

use super::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The body of a raw HTTP/1.1 answer.
fn body_of(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

/// The JSON values of a `data:`-only event stream, `[DONE]` left out.
fn data_chunks(answer: &str) -> Vec<Value> {
    body_of(answer)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

async fn post(stub: &StubServer, path: &str, body: &Value) -> String {
    let s = tokio::net::TcpStream::connect(stub.addr()).await.unwrap();
    exchange(s, path, body).await.unwrap()
}

/// One request on `s`, the whole answer back.
async fn exchange(
    mut s: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    path: &str,
    body: &Value,
) -> std::io::Result<String> {
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

/// A request over TLS, trusting `ca` (or no authority at all).
async fn post_tls(
    stub: &StubServer,
    ca: Option<&TestCa>,
    path: &str,
    body: &Value,
) -> std::io::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        roots.add(ca.ca_der().clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(stub.addr()).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await?;
    exchange(tls, path, body).await
}

#[tokio::test]
async fn a_responses_turn_asks_for_the_command_then_replies() {
    let stub = StubServer::start(Script::default()).await.unwrap();
    let first = post(
        &stub,
        "/v1/responses",
        &json!({"input": [{"type": "message", "role": "user", "content": "go"}]}),
    )
    .await;
    assert!(first.contains("exec_command"), "{first}");
    assert!(first.contains("report.md"), "{first}");
    let second = post(
        &stub,
        "/v1/responses",
        &json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "written"}]}),
    )
    .await;
    assert!(second.contains(REPLY), "{second}");
    assert!(second.contains("\"input_tokens\":100"), "{second}");
    assert_eq!(stub.requests().len(), 2);
    assert!(stub.requests()[0].mentions("go"));
}

#[tokio::test]
async fn a_messages_turn_asks_for_bash_then_replies() {
    let stub = StubServer::start(Script::default()).await.unwrap();
    let tools = json!([{"name": "Bash"}]);
    let first = post(
        &stub,
        "/v1/messages?beta=true",
        &json!({"tools": tools, "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}]}),
    )
    .await;
    assert!(first.contains("\"name\":\"Bash\""), "{first}");
    let second = post(
        &stub,
        "/v1/messages",
        &json!({"tools": tools, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]}),
    )
    .await;
    assert!(second.contains(REPLY), "{second}");
}

#[tokio::test]
async fn a_failing_stub_answers_500() {
    let stub = StubServer::start(Script {
        mode: Mode::ServerError,
        ..Script::default()
    })
    .await
    .unwrap();
    let out = post(&stub, "/v1/responses", &json!({"input": []})).await;
    assert!(out.starts_with("HTTP/1.1 500"), "{out}");
}

#[tokio::test]
async fn each_api_streams_only_when_asked_and_reports_the_scripts_usage() {
    let stub = StubServer::start(Script::default()).await.unwrap();
    let user = json!([{"type": "message", "role": "user", "content": "go"}]);
    let streamed = post(
        &stub,
        "/v1/responses",
        &json!({"stream": true, "input": user}),
    )
    .await;
    assert!(streamed.contains("event: response.completed"), "{streamed}");
    let whole = post(&stub, "/v1/responses", &json!({"input": user})).await;
    let whole: Value = serde_json::from_str(body_of(&whole)).unwrap();
    assert_eq!(whole["usage"]["input_tokens"], 100);
    assert_eq!(whole["usage"]["output_tokens"], 10);
    assert_eq!(whole["output"][0]["name"], "exec_command");

    let tools = json!([{"name": "Bash"}]);
    let asked = json!([{"role": "user", "content": [{"type": "text", "text": "go"}]}]);
    let whole = post(
        &stub,
        "/v1/messages",
        &json!({"tools": tools, "messages": asked}),
    )
    .await;
    let whole: Value = serde_json::from_str(body_of(&whole)).unwrap();
    assert_eq!(
        whole["usage"],
        json!({"input_tokens": 100, "output_tokens": 10})
    );
    assert_eq!(whole["content"][0]["input"]["command"], REPORT_COMMAND);
    assert_eq!(whole["stop_reason"], "tool_use");
    let streamed = post(
        &stub,
        "/v1/messages",
        &json!({"stream": true, "tools": tools, "messages": asked}),
    )
    .await;
    assert!(streamed.contains("event: message_stop"), "{streamed}");
}

#[tokio::test]
async fn chat_completions_call_the_tool_then_reply_with_usage_as_asked() {
    let stub = StubServer::start(Script::default()).await.unwrap();
    let tools = json!([{"type": "function", "function": {"name": "exec_command"}}]);
    let asked = json!([{"role": "user", "content": "go"}]);
    let first = post(
        &stub,
        "/v1/chat/completions",
        &json!({"tools": tools, "messages": asked}),
    )
    .await;
    let first: Value = serde_json::from_str(body_of(&first)).unwrap();
    assert_eq!(first["choices"][0]["finish_reason"], "tool_calls");
    let call = &first["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "exec_command");
    assert_eq!(
        first["usage"],
        json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110})
    );

    let answered = json!([{"role": "user", "content": "go"},
                          {"role": "tool", "tool_call_id": "call_1", "content": "written"}]);
    let plain = json!({"stream": true, "tools": tools, "messages": answered});
    let chunks = data_chunks(&post(&stub, "/v1/chat/completions", &plain).await);
    assert_eq!(chunks[0]["choices"][0]["delta"]["content"], REPLY);
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "{chunks:?}"
    );

    let mut metered = plain.clone();
    metered["stream_options"] = json!({"include_usage": true});
    let answer = post(&stub, "/v1/chat/completions", &metered).await;
    assert!(body_of(&answer).ends_with("data: [DONE]\n\n"), "{answer}");
    let chunks = data_chunks(&answer);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 110);
    assert_eq!(stub.requests().len(), 3);
    assert_eq!(stub.requests()[2].api, Api::ChatCompletions);
}

#[tokio::test]
async fn over_tls_a_client_trusting_the_test_ca_is_answered_and_others_are_refused() {
    let ca = TestCa::new().unwrap();
    assert!(ca.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    let stub = StubServer::start_tls(Script::default(), &ca).await.unwrap();
    assert!(
        stub.base_url().starts_with("https://127.0.0.1:"),
        "{}",
        stub.base_url()
    );
    let user = json!({"input": [{"type": "message", "role": "user", "content": "go"}]});
    let answer = post_tls(&stub, Some(&ca), "/v1/responses", &user)
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("exec_command"), "{answer}");
    let refused = post_tls(&stub, None, "/v1/responses", &user).await;
    assert!(
        refused.is_err(),
        "an untrusted certificate is refused: {refused:?}"
    );
    let other = TestCa::new().unwrap();
    let refused = post_tls(&stub, Some(&other), "/v1/responses", &user).await;
    assert!(refused.is_err(), "another authority's trust is not enough");
    assert_eq!(stub.requests().len(), 1);
}
