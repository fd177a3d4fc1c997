//! Agent dialects through a real `CommandRunner` and `Manager`: scripted
//! agents print what Codex and Claude Code print (the real binaries are
//! driven in the e2e tests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_blob::{BlobKey, BlobStore as _, MemoryBlobStore};
use korvus_command::Dialect;
use korvus_log::{EventKind, Role};
use korvus_runner::exit;
use korvus_store::StoreExt as _;
use korvus_store::{ArtifactKind, SessionStatus};

use crate::support::{harness, harness_with, sh};

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

/// A Codex that records each model call's token count in its thread file
/// (its rollout, as the real one does: `event_msg` / `token_count`, the
/// thread's running total) and prints the total only at `turn.completed`.
/// The first run makes one model call (100/10), starts a command and is
/// cancelled in the middle of that turn; the resumed run makes two more
/// calls (200/20 more: 300/30 in all) and completes.
const CODEX_CANCELLED_MID_TURN: &str = r#"
    read -r prompt
    dir="$HOME/.codex/sessions/2026/12/05"
    file="$dir/rollout-2026-12-05T09-00-00-th-9.jsonl"
    count() {
        echo "{\"timestamp\":\"2026-12-05T09:00:0$3Z\",\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\",\"info\":{\"total_token_usage\":{\"input_tokens\":$1,\"cached_input_tokens\":0,\"output_tokens\":$2,\"reasoning_output_tokens\":0,\"total_tokens\":0},\"last_token_usage\":{\"input_tokens\":0,\"output_tokens\":0}},\"rate_limits\":null}}" >> "$file"
    }
    echo '{"type":"thread.started","thread_id":"th-9"}'
    echo '{"type":"turn.started"}'
    if [ "$KORVUS_RESUME" = 0 ]; then
        mkdir -p "$dir"
        echo '{"timestamp":"2026-12-05T09:00:00Z","type":"session_meta","payload":{"id":"th-9"}}' > "$file"
        echo '{"timestamp":"2026-12-05T09:00:00Z","type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":null}}' >> "$file"
        count 100 10 1
        echo '# Partial' > report.md
        echo '{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"sleep","aggregated_output":"","exit_code":null,"status":"in_progress"}}'
        exec sleep SLEEP
    fi
    [ -f "$file" ] || { echo 'the thread was not resumed' >&2; exit 9; }
    count 200 20 2
    count 300 30 3
    echo '# Findings' > report.md
    echo "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"type\":\"agent_message\",\"text\":\"answered: $prompt\"}}"
    echo '{"type":"turn.completed","usage":{"input_tokens":300,"cached_input_tokens":0,"output_tokens":30}}'
"#;

/// Starts a session of the mid-turn Codex agent (sleeping `sleep`) and
/// waits until it sleeps in the middle of its turn; returns the session
/// and the pattern its sleep runs under.
async fn mid_turn(h: &crate::support::Harness, sleep: &str) -> (korvus_store::Session, String) {
    let s = h.start("why?").await;
    let pattern = format!("sleep {sleep}");
    crate::support::eventually("the agent is mid-turn", || {
        crate::support::running(&pattern)
    })
    .await;
    (s, pattern)
}

/// Cancelled in the middle of a turn, a Codex run reported no usage on
/// stdout; it is charged what its thread file records (100/10), as a
/// usage event its counters agree with, and the reopened revision, whose
/// `turn.completed` reports the thread's whole total (300/30), is charged
/// only its own calls (200/20).
#[tokio::test]
async fn a_codex_run_cancelled_mid_turn_is_charged_its_own_tokens_and_the_reopen_its_own() {
    let sleep = crate::support::unique_sleep();
    let h = harness(sh(&CODEX_CANCELLED_MID_TURN.replace("SLEEP", &sleep)).dialect(Dialect::Codex))
        .await;
    let (s, _) = mid_turn(&h, &sleep).await;
    h.manager.cancel(s.id).await.expect("cancel");
    let row = h.settled(s.id).await;
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    let tokens = |c: &korvus_store::Counters| (c.input_tokens, c.output_tokens);
    assert_eq!(tokens(&row.counters), (100, 10), "{row:?}");
    assert_eq!((row.counters.turns, row.counters.tool_calls), (1, 1));
    let usage = |events: &[korvus_log::Event]| {
        events.iter().fold((0, 0), |(i, o), e| match e.kind {
            EventKind::Usage {
                input_tokens,
                output_tokens,
            } => (i + input_tokens, o + output_tokens),
            _ => (i, o),
        })
    };
    assert_eq!(usage(&h.events(s.id).await), (100, 10));

    h.manager.reopen(s.id, "and now?").await.expect("reopen");
    let row = h.settled(s.id).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(s.id).await;
    assert!(
        texts.iter().any(|t| t == "resuming codex thread th-9"),
        "{texts:?}"
    );
    assert_eq!(tokens(&row.counters), (200, 20), "{row:?}");
    let reports = h.store.all_reports(s.id).await.expect("reports");
    let charged: Vec<_> = reports.iter().map(|r| tokens(&r.counters)).collect();
    assert_eq!(charged, vec![(100, 10), (200, 20)], "each revision its own");
    // The log's usage events sum to what the revisions were charged.
    assert_eq!(usage(&h.events(s.id).await), (300, 30));
    h.stop().await;
}

/// A checkpoint taken while a Codex run is in the middle of a turn holds
/// the agent's thread — the rollout as far as the agent wrote it, and
/// `state.json` naming the thread and where its file goes — so another
/// replica can resume it; the landing then keeps them as agent state and
/// leaves no checkpoint row.
#[tokio::test]
async fn a_checkpoint_of_a_codex_run_taken_mid_turn_holds_state_json_and_the_thread_file() {
    let sleep = crate::support::unique_sleep();
    let blobs = Arc::new(MemoryBlobStore::new());
    let runner = sh(&CODEX_CANCELLED_MID_TURN.replace("SLEEP", &sleep)).dialect(Dialect::Codex);
    let h = harness_with(runner, |b| {
        b.blob_store(blobs.clone())
            .checkpoint_interval(Duration::from_secs(1))
    })
    .await;
    let (s, pattern) = mid_turn(&h, &sleep).await;
    let wanted = [".korvus/agent/thread.jsonl", ".korvus/agent/state.json"];
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = loop {
        let rows = h.store.all_session_artifacts(s.id).await.expect("rows");
        let held: Vec<_> = wanted
            .iter()
            .filter_map(|p| {
                rows.iter()
                    .find(|a| a.kind == ArtifactKind::Checkpoint && a.path == *p)
                    .cloned()
            })
            .collect();
        if held.len() == wanted.len() {
            break held;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of the thread: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(crate::support::running(&pattern), "taken mid-turn");
    let read = |key: String| {
        let blobs = Arc::clone(&blobs);
        async move {
            let key = BlobKey::new(key).expect("key");
            String::from_utf8(blobs.get(&key).await.expect("blob").bytes.to_vec()).expect("utf-8")
        }
    };
    let thread = read(held[0].blob_key.clone()).await;
    assert!(thread.contains(r#""payload":{"id":"th-9"}"#), "{thread}");
    assert!(thread.contains(r#""input_tokens":100"#), "{thread}");
    assert!(thread.ends_with('\n'), "whole lines only: {thread}");
    let state: serde_json::Value =
        serde_json::from_str(&read(held[1].blob_key.clone()).await).expect("state.json");
    assert_eq!(state["dialect"], "codex", "{state}");
    assert_eq!(state["thread"], "th-9", "{state}");
    let file = state["file"].as_str().expect("file");
    assert!(
        file.starts_with(".codex/sessions/") && file.ends_with("-th-9.jsonl"),
        "{state}"
    );

    h.manager.cancel(s.id).await.expect("cancel");
    let row = h.settled(s.id).await;
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    let rows = h.store.all_session_artifacts(s.id).await.expect("rows");
    assert!(
        rows.iter().all(|a| a.kind != ArtifactKind::Checkpoint),
        "{rows:?}"
    );
    for path in wanted {
        assert!(
            rows.iter()
                .any(|a| a.kind == ArtifactKind::AgentState && a.path == path),
            "{path} landed as agent state: {rows:?}"
        );
    }
    h.stop().await;
}
