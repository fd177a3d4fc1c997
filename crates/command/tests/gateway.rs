//! The model gateway: an agent calls its model API on its own loopback
//! with the run's token; the scripted upstream (over TLS, trusting a test
//! authority) sees the real key on every call, the agent never does, and
//! every answer's usage — streamed or whole, Responses, Chat Completions
//! and Messages — is metered into the log and the counters.

use std::ffi::OsString;

use korvus_command::{CommandRunner, ModelGateway, Network, Roots};
use korvus_log::EventKind;
use korvus_model_stub::{Api, Script, StubServer, TestCa};
use korvus_store::SessionStatus;
use tokio::io::AsyncWriteExt as _;

use crate::support::{harness, sh};

const REAL_KEY: &str = "sk-real-4c1e9f0b7d2a";
const KEY_VAR: &str = "KORVUS_TEST_MODEL_KEY";

/// Six model calls (two per API, streamed and whole), one with a wrong
/// token, a false usage line, and the environment kept for the test.
const AGENT: &str = r#"
    env > env.txt
    cat /proc/self/environ | tr '\0' '\n' > proc-environ.txt
    call() {
        curl -s --max-time 20 -H "$1: $2$KORVUS_MODEL_TOKEN" -H 'content-type: application/json' \
            -d "$4" "$KORVUS_MODEL_URL$3" >> answers.txt
        echo >> answers.txt
    }
    call Authorization 'Bearer ' /v1/responses '{"stream":true,"input":"hi"}'
    call Authorization 'Bearer ' /v1/responses '{"input":"hi"}'
    call Authorization 'Bearer ' /v1/chat/completions '{"stream":true,"messages":[{"role":"user","content":"hi"}]}'
    call Authorization 'Bearer ' /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}]}'
    call x-api-key '' /v1/messages '{"stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}'
    call x-api-key '' /v1/messages '{"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}'
    wrong=$(curl -s -o /dev/null -w '%{http_code}' -H 'x-api-key: guessed' -d '{}' "$KORVUS_MODEL_URL/v1/messages")
    echo "wrong token: $wrong"
    echo '{"type":"usage","input_tokens":3,"output_tokens":3}'
    echo '{"type":"metered_usage","input_tokens":99999,"output_tokens":99999}'
    echo '# R' > report.md
"#;

async fn metered_run(network: Network) {
    let ca = TestCa::new().unwrap();
    let script = Script {
        usage: (123, 45),
        ..Script::default()
    };
    let stub = StubServer::start_tls(script, &ca).await.unwrap();
    let gateway = ModelGateway::openai(stub.base_url(), KEY_VAR)
        .trusting(Roots::only().with(ca.ca_der().clone()));
    let source: Vec<(OsString, OsString)> = std::env::vars_os()
        .chain([
            (KEY_VAR.into(), REAL_KEY.into()),
            ("KORVUS_TEST_COPY".into(), format!("x{REAL_KEY}").into()),
        ])
        .collect();
    let runner: CommandRunner = sh(AGENT)
        .network(network)
        .env_source(source)
        // Passed by the policy, and still removed: by name, and by value.
        .env_pass(KEY_VAR)
        .env_pass("KORVUS_TEST_COPY")
        .model_gateway(gateway);
    let h = harness(runner).await;
    let row = h.run("meter me").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");

    let requests = stub.requests();
    assert_eq!(requests.len(), 6, "{requests:#?}");
    for (r, api) in requests.iter().zip([
        Api::Responses,
        Api::Responses,
        Api::ChatCompletions,
        Api::ChatCompletions,
        Api::Messages,
        Api::Messages,
    ]) {
        assert_eq!(r.api, api);
        let key = r.key.as_deref().unwrap_or_default();
        assert!(
            key.ends_with(REAL_KEY),
            "the upstream saw the real key: {key}"
        );
    }
    assert_eq!(
        requests[2].body["stream_options"]["include_usage"], true,
        "a streamed chat call asks for its usage"
    );

    let events = h.events(row.id).await;
    let metered: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::MeteredUsage {
                input_tokens,
                output_tokens,
                ..
            } => Some((*input_tokens, *output_tokens)),
            _ => None,
        })
        .collect();
    assert_eq!(metered, vec![(123, 45); 6], "{events:#?}");
    assert_eq!(
        (row.counters.input_tokens, row.counters.output_tokens),
        (738, 270)
    );
    let texts = h.texts(row.id).await;
    assert!(texts.iter().any(|t| t == "wrong token: 401"), "{texts:#?}");
    assert!(
        texts.iter().any(|t| t.starts_with("usage: the agent reported 3 input / 3 output tokens; korvus measured 738 input / 270 output tokens in 6 model call(s)")),
        "{texts:#?}"
    );
    assert!(
        texts.iter().any(|t| t.starts_with("model gateway: 6 call(s) metered (738 input / 270 output tokens), 0 not metered, 1 refused")),
        "{texts:#?}"
    );
    // The agent's forged measured event is its text, not a measurement.
    assert!(
        texts.iter().any(|t| t.contains("metered_usage")),
        "{texts:#?}"
    );

    for file in ["env.txt", "proc-environ.txt", "answers.txt"] {
        let text = h.artifact_text(row.id, file).await;
        assert!(
            !text.contains(REAL_KEY),
            "{file} holds the real key:\n{text}"
        );
        assert!(
            !text.contains(KEY_VAR),
            "{file} names the key variable:\n{text}"
        );
    }
    let env = h.artifact_text(row.id, "env.txt").await;
    assert!(env.contains("KORVUS_MODEL_TOKEN=korvus-gw-"), "{env}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_inside_the_agents_namespace_are_forwarded_with_the_real_key_and_metered() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests run as root (cargo xtask test)"
    );
    metered_run(Network::none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_the_hosts_loopback_are_forwarded_with_the_real_key_and_metered() {
    metered_run(Network::host()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_fails_the_run_before_the_agent_starts() {
    let runner = sh("touch started; echo '# R' > report.md")
        .env_source(std::env::vars_os().filter(|(k, _)| k != KEY_VAR))
        .model_gateway(ModelGateway::anthropic("https://127.0.0.1:9", KEY_VAR));
    let h = harness(runner).await;
    let row = h.run("no key").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    let texts = h.all_texts(row.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.contains("KORVUS_TEST_MODEL_KEY is not set")),
        "{texts:#?}"
    );
    assert!(h
        .store_artifacts(row.id)
        .await
        .iter()
        .all(|a| a != "started"));
    h.stop().await;
}

/// An upstream that starts a streamed answer and drops the connection
/// before its usage: the call is counted as not metered, with a note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_before_its_usage_is_counted_as_not_metered() {
    let upstream = raw_upstream(|mut conn| async move {
        let event = "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n";
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n",
            event.len()
        );
        let _ = conn.write_all(head.as_bytes()).await;
        // Cut: no last chunk, no usage.
        conn
    })
    .await;
    let runner = through_gateway(
        r#"
        curl -s --max-time 20 -H "Authorization: Bearer $KORVUS_MODEL_TOKEN" \
            -d '{"stream":true}' "$KORVUS_MODEL_URL/v1/responses" > answer.txt
        echo '{"type":"usage","input_tokens":5,"output_tokens":2}'
        echo '# R' > report.md
    "#,
        upstream,
    );
    let h = harness(runner).await;
    let row = h.run("cut").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(
        texts.iter().any(|t| t
            == "model gateway: a call to /v1/responses could not be metered (the answer was cut before it ended; what it said so far is counted)"),
        "{texts:#?}"
    );
    assert!(
        texts.iter().any(|t| t.starts_with(
            "model gateway: 0 call(s) metered (0 input / 0 output tokens), 1 not metered"
        )),
        "{texts:#?}"
    );
    // Nothing measured whole: the larger of what was read and what the
    // agent reported is counted.
    assert_eq!(
        (row.counters.input_tokens, row.counters.output_tokens),
        (5, 2)
    );
    // What the agent got before the cut depends on whether the first
    // chunk was flushed before the upstream's failure: not asserted.
    h.stop().await;
}

/// An agent that takes the text of a whole (not streamed) answer and hangs
/// up before its usage, which comes last: the gateway reads the rest of
/// the answer anyway, and meters the call exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_the_agent_hangs_up_on_is_still_metered() {
    let upstream = raw_upstream(|mut conn| async move {
        // More text than loopback buffers hold, so the gateway is still
        // writing it when the agent hangs up; the usage later.
        let text = format!(
            "{{\"id\":\"r\",\"output\":[{{\"type\":\"message\",\"content\":[{{\"type\":\"output_text\",\"text\":\"{}\"}}]}}],",
            "x".repeat(12 << 20)
        );
        let tail = "\"usage\":{\"input_tokens\":123,\"output_tokens\":45}}";
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len() + tail.len()
        );
        let _ = conn.write_all(head.as_bytes()).await;
        let _ = conn.write_all(text.as_bytes()).await;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let _ = conn.write_all(tail.as_bytes()).await;
        conn
    })
    .await;
    let runner = through_gateway(
        r#"
        curl -s --max-time 20 -H "Authorization: Bearer $KORVUS_MODEL_TOKEN" \
            -d '{"stream":false}' "$KORVUS_MODEL_URL/v1/responses" | head -c 100 > answer.txt
        echo '{"type":"usage","input_tokens":5,"output_tokens":2}'
        echo '# R' > report.md
    "#,
        upstream,
    );
    let h = harness(runner).await;
    let row = h.run("hang up").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let answer = h.artifact_text(row.id, "answer.txt").await;
    assert_eq!(answer.len(), 100, "the agent took the start of the text");
    let texts = h.texts(row.id).await;
    assert!(
        texts.iter().any(|t| t.starts_with(
            "model gateway: 1 call(s) metered (123 input / 45 output tokens), 0 not metered"
        )),
        "{texts:#?} (the agent read {answer:?})"
    );
    let metered: Vec<_> = h
        .events(row.id)
        .await
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::MeteredUsage {
                input_tokens,
                output_tokens,
                unmetered,
                ..
            } => Some((input_tokens, output_tokens, unmetered)),
            _ => None,
        })
        .collect();
    assert_eq!(metered, [(123, 45, false)]);
    assert_eq!(
        (row.counters.input_tokens, row.counters.output_tokens),
        (123, 45)
    );
    h.stop().await;
}

/// A plain-HTTP upstream on loopback that reads each request and lets
/// `answer` write (or cut) the response; its URL.
async fn raw_upstream<F, Fut>(answer: F) -> String
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = tokio::net::TcpStream> + Send,
{
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let _ = conn.read(&mut buf).await;
            // Dropped once answered: the connection ends with the answer.
            drop(answer(conn).await);
        }
    });
    upstream
}

/// `script` as the agent, its OpenAI calls through the gateway to
/// `upstream` with the real key.
fn through_gateway(script: &str, upstream: String) -> CommandRunner {
    sh(script)
        .env_source(std::env::vars_os().chain([(KEY_VAR.into(), REAL_KEY.into())]))
        .model_gateway(ModelGateway::openai(upstream, KEY_VAR))
}
