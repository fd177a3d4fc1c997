//! `korvus run --budget-tokens` and `korvus budget`: a session on a model
//! that spends 2,000 tokens a call pauses `budget_reached` at its third
//! call with its files stored; raising the budget continues it with the
//! agent it ran, to completion.

use crate::support::{korvus, ok, output, script, session_id, stdout};

/// A model server on the host's loopback answering every call with 1,500
/// input and 500 output tokens of usage; runs until the test ends.
fn model_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let body = r#"{"model":"m","usage":{"input_tokens":1500,"output_tokens":500}}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    port
}

#[test]
fn a_session_paused_at_its_budget_continues_once_raised() {
    let data = tempfile::tempdir().expect("temp dir");
    let port = model_server();
    // Four calls on the first run; one (its calls.txt is back) on the next.
    let agent = script(
        data.path(),
        "spend.sh",
        r#"
echo '# R' > report.md
n=4
[ -f calls.txt ] && n=1
i=0
while [ $i -lt $n ]; do
    i=$((i + 1))
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 -H "Authorization: Bearer $KORVUS_MODEL_TOKEN" \
        -d '{"input":"hi"}' "$KORVUS_MODEL_URL/v1/responses")
    echo "call $i: $code" >> calls.txt
done
"#,
    );
    let out = output(
        korvus(data.path())
            .args(["run", "--network", "host", "--budget-tokens", "5000"])
            .args(["--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(["--model-endpoint", &format!("http://127.0.0.1:{port}")])
            .args(["--model-key-var", "KORVUS_BUDGET_TEST_KEY"])
            .arg("spend")
            .env("KORVUS_BUDGET_TEST_KEY", "sk-budget-cli"),
    );
    let said = stdout(&out);
    // Paused, like a session waiting for the user (exit code 5).
    assert_eq!(out.status.code(), Some(5), "{said}");
    let id = session_id(&said);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("budget_reached"), "{show}");
    assert!(
        show.contains(&format!("budget     session {id}: tokens 4000 of 5000")),
        "{show}"
    );
    let calls = ok(korvus(data.path()).args(["cat", &id, "calls.txt"]));
    assert!(calls.starts_with("call 1: 200\ncall 2: 200\n"), "{calls}");
    assert!(!calls.contains("call 4"), "{calls}");
    let standing = ok(korvus(data.path()).args(["budget", &id]));
    assert!(
        standing.contains("tokens 4000 of 5000") && standing.contains("1000 tokens left"),
        "{standing}"
    );

    // A limit no store column holds is refused, naming it; nothing moves.
    let refused =
        output(korvus(data.path()).args(["budget", &id, "--tokens", "9223372036854775808"]));
    let said = format!("{}{}", stdout(&refused), crate::support::stderr(&refused));
    assert_ne!(refused.status.code(), Some(0), "{said}");
    assert!(said.contains("budget.tokens"), "{said}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("budget_reached"), "still paused:\n{show}");

    let raised = output(
        korvus(data.path())
            .args(["budget", &id, "--tokens", "10000"])
            .env("KORVUS_BUDGET_TEST_KEY", "sk-budget-cli"),
    );
    let said = format!("{}{}", stdout(&raised), crate::support::stderr(&raised));
    assert_eq!(raised.status.code(), Some(0), "{said}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("completed"), "{show}");
    let standing = ok(korvus(data.path()).args(["budget", &id]));
    assert!(standing.contains("tokens 6000 of 10000"), "{standing}");
}
