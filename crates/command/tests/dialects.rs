//! Agent dialects through a real `CommandRunner` and `Manager`: scripted
//! agents print what Codex and Claude Code print (the real binaries are
//! driven in the e2e tests).

use korvus_command::Dialect;
use korvus_log::{EventKind, Role};
use korvus_runner::exit;
use korvus_store::SessionStatus;
use korvus_store::StoreExt as _;

use crate::support::{harness, sh};

/// An agent printing `codex exec --json` lines: one command that writes
/// the report, a message, and the thread's running usage total (200/20
/// after the first run, 300/30 after the second).
const CODEX: &str = r#"
    read -r prompt
    if [ "$KORVUS_RESUME" = 0 ]; then total_in=200; total_out=20; else total_in=300; total_out=30; fi
    echo '{"type":"thread.started","thread_id":"th-1"}'
    echo '{"type":"turn.started"}'
    echo '{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"echo # F > report.md","aggregated_output":"","exit_code":null,"status":"in_progress"}}'
    echo '# Findings' > report.md
    echo '{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"echo # F > report.md","aggregated_output":"","exit_code":0,"status":"completed"}}'
    echo "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"type\":\"agent_message\",\"text\":\"answered: $prompt\"}}"
    echo "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":$total_in,\"output_tokens\":$total_out}}"
"#;

#[tokio::test]
async fn codex_lines_become_turns_calls_messages_and_usage_across_a_reopen() {
    let h = harness(sh(CODEX).dialect(Dialect::Codex)).await;
    let row = h.run("why?").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(
        (row.counters.turns, row.counters.tool_calls),
        (1, 1),
        "{row:?}"
    );
    assert_eq!(
        (row.counters.input_tokens, row.counters.output_tokens),
        (200, 20)
    );
    h.manager.reopen(row.id, "and now?").await.expect("reopen");
    let row = h.settled(row.id).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let events = h.events(row.id).await;
    let turns: Vec<u64> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TurnStart { turn } => Some(turn),
            _ => None,
        })
        .collect();
    assert_eq!(turns, vec![1, 2], "turn numbers do not repeat");
    let calls: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult {
                call_id, ok: true, ..
            } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(calls, vec!["t1-item_0", "t2-item_0"], "call ids are unique");
    assert!(events.iter().any(|e| e.kind
        == EventKind::Message {
            role: Role::Assistant,
            text: "answered: and now?".into()
        }));
    // Without a kept thread total (native resume keeps one with the
    // revision) a run counts the running total from zero: 300/30.
    let reports = h.store.all_reports(row.id).await.expect("reports");
    assert_eq!(reports.len(), 2);
    assert_eq!(
        (
            reports[1].counters.input_tokens,
            reports[1].counters.output_tokens
        ),
        (300, 30)
    );
    h.stop().await;
}

#[tokio::test]
async fn a_failed_codex_turn_ends_agent_error_with_the_agents_message() {
    let h = harness(
        sh(r#"
            echo '{"type":"turn.started"}'
            echo '{"type":"error","message":"Reconnecting... 1/5"}'
            echo '{"type":"turn.failed","error":{"message":"stub failure"}}'
            exit 1
        "#)
        .dialect(Dialect::Codex),
    )
    .await;
    let row = h.run("x").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert_eq!(row.exit_reason.as_deref(), Some(exit::AGENT_ERROR));
    let texts = h.texts(row.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("agent failed: stub failure (exit code 1)")),
        "{texts:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn claude_code_lines_become_one_turn_per_invocation() {
    let h = harness(
        sh(r#"
            echo '{"type":"system","subtype":"init","session_id":"s-1","model":"m"}'
            echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo"}}]}}'
            echo '# Findings' > report.md
            echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok","is_error":false}]}}'
            echo '{"type":"assistant","message":{"content":[{"type":"text","text":"done"}]}}'
            echo 'not json at all'
            echo '{"type":"result","subtype":"success","is_error":false,"usage":{"input_tokens":7,"output_tokens":3}}'
        "#)
        .dialect(Dialect::ClaudeCode),
    )
    .await;
    let row = h.run("x").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(
        (
            row.counters.turns,
            row.counters.tool_calls,
            row.counters.input_tokens,
            row.counters.output_tokens
        ),
        (1, 1, 7, 3)
    );
    let texts = h.texts(row.id).await;
    assert!(
        texts.contains(&"claude-code: not json at all".to_owned()),
        "unknown lines are kept: {texts:?}"
    );
    h.stop().await;
}
