//! The protocol: stdin, environment, manifest, stdout lines, stderr notes.

use korvus_log::{EventKind, Role};
use korvus_store::StoreExt as _;
use korvus_store::{SessionStatus, Store};

use crate::support::{harness, harness_with, sh};

#[tokio::test]
async fn prompt_on_stdin_and_session_facts_in_the_environment() {
    let h = harness(sh(r#"
        read -r prompt
        echo "prompt=$prompt"
        echo "session=$KORVUS_SESSION_ID incident=$KORVUS_INCIDENT_ID revision=$KORVUS_REVISION resume=$KORVUS_RESUME"
        echo "cwd_is_workspace=$([ "$(pwd -P)" = "$(cd "$KORVUS_WORKSPACE" && pwd -P)" ] && echo yes)"
        echo "manifest=$(cat "$KORVUS_MANIFEST" | tr -d ' \n')"
        echo '# Findings' > report.md
    "#))
    .await;
    let row = h.run("why is the disk full?").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(
        texts.contains(&"prompt=why is the disk full?".to_owned()),
        "{texts:?}"
    );
    let facts = format!(
        "session={} incident={} revision=1 resume=0",
        row.id, row.incident_id
    );
    assert!(texts.contains(&facts), "{texts:?}");
    assert!(
        texts.contains(&"cwd_is_workspace=yes".to_owned()),
        "{texts:?}"
    );
    let manifest = texts
        .iter()
        .find_map(|t| t.strip_prefix("manifest="))
        .expect("manifest line");
    let manifest: serde_json::Value = serde_json::from_str(manifest).expect("manifest is JSON");
    assert_eq!(manifest["protocol"], 1);
    assert_eq!(manifest["session_id"], row.id.to_string());
    assert_eq!(manifest["resume"], false);
    assert_eq!(manifest["context"], serde_json::json!([]));
    assert_eq!(manifest["skills"], serde_json::json!([]));
    h.stop().await;
}

#[tokio::test]
async fn the_report_template_is_named_in_the_environment_only_when_configured() {
    let script = r#"
        echo "template=${KORVUS_REPORT_TEMPLATE:-unset}"
        [ -n "$KORVUS_REPORT_TEMPLATE" ] && echo "says=$(head -n 1 "$KORVUS_REPORT_TEMPLATE")"
        echo '# Findings' > report.md
    "#;
    let plain = harness(sh(script)).await;
    let row = plain.run("no template").await;
    assert!(plain
        .texts(row.id)
        .await
        .contains(&"template=unset".to_owned()));
    plain.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("template.md");
    std::fs::write(&template, "# Incident report\n").unwrap();
    let with = harness_with(sh(script), |b| b.report_template(&template)).await;
    let row = with.run("with a template").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = with.texts(row.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("template=/") && t.ends_with("/.korvus/report-template.md")),
        "{texts:?}"
    );
    assert!(
        texts.contains(&"says=# Incident report".to_owned()),
        "{texts:?}"
    );
    with.stop().await;
}

#[tokio::test]
async fn json_lines_become_events_and_other_lines_messages() {
    let h = harness(sh(r#"
        echo '{"type":"turn_start","turn":1}'
        echo '{"type":"tool_call","call_id":"c1","tool":"df","input":{"path":"/"}}'
        echo '{"type":"tool_result","call_id":"c1","ok":true,"output":"91%"}'
        echo '{"type":"usage","input_tokens":120,"output_tokens":30}'
        echo 'plain words'
        echo '{"not":"an event"}'
        echo ''
        echo '{"type":"turn_end","turn":1}'
        echo '{"type":"from_the_future","n":1}'
        printf 'no newline at the end'
        echo '# r' > report.md
    "#))
    .await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(row.counters.turns, 1);
    assert_eq!(row.counters.tool_calls, 1);
    assert_eq!(row.counters.input_tokens, 120);
    assert_eq!(row.counters.output_tokens, 30);
    let events = h.events(row.id).await;
    assert!(
        events.iter().all(|e| e.at.is_some()),
        "every event is stamped"
    );
    let kinds: Vec<EventKind> = events.into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds[0], EventKind::TurnStart { turn: 1 });
    assert!(matches!(&kinds[1], EventKind::ToolCall { tool, .. } if tool == "df"));
    assert!(matches!(&kinds[2], EventKind::ToolResult { ok: true, .. }));
    // The usage line is logged, so the log's usage events sum to the
    // counters.
    assert_eq!(
        kinds[3],
        EventKind::Usage {
            input_tokens: 120,
            output_tokens: 30
        }
    );
    assert_eq!(
        kinds[4],
        EventKind::Message {
            role: Role::Assistant,
            text: "plain words".into()
        }
    );
    assert_eq!(
        kinds[5],
        EventKind::Message {
            role: Role::Assistant,
            text: r#"{"not":"an event"}"#.into()
        }
    );
    assert_eq!(
        kinds[6],
        EventKind::TurnEnd {
            turn: 1,
            interrupted: false
        }
    );
    // A type korvus does not know is the agent's text, kept whole.
    assert_eq!(
        kinds[7],
        EventKind::Message {
            role: Role::Assistant,
            text: r#"{"type":"from_the_future","n":1}"#.into()
        }
    );
    assert_eq!(
        kinds[8],
        EventKind::Message {
            role: Role::Assistant,
            text: "no newline at the end".into()
        }
    );
    assert!(
        matches!(&kinds[9], EventKind::Note { text } if text.contains("exit reason completed"))
    );
    assert_eq!(kinds.len(), 10, "{kinds:?}");
    h.stop().await;
}

#[tokio::test]
async fn stderr_is_kept_bounded_as_notes() {
    let runner = sh(r#"
        i=0
        while [ $i -lt 100 ]; do echo "err $i" >&2; i=$((i+1)); done
        echo '# r' > report.md
    "#)
    .stderr_lines(5);
    let h = harness(runner).await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Completed);
    let texts = h.texts(row.id).await;
    let stderr: Vec<&String> = texts.iter().filter(|t| t.starts_with("stderr: ")).collect();
    assert_eq!(stderr.len(), 6, "{stderr:?}");
    assert_eq!(stderr[0], "stderr: 95 earlier line(s) not kept");
    assert_eq!(stderr[1], "stderr: err 95");
    assert_eq!(stderr[5], "stderr: err 99");
    h.stop().await;
}

#[tokio::test]
async fn long_lines_are_cut() {
    let h = harness(
        sh(r#"head -c 5000 /dev/zero | tr '\0' 'x'; echo; echo '# r' > report.md"#)
            .max_line_bytes(100),
    )
    .await;
    let row = h.run("go").await;
    let texts = h.texts(row.id).await;
    assert_eq!(texts[0], format!("{} [line truncated]", "x".repeat(100)));
    h.stop().await;
}

#[tokio::test]
async fn the_report_lands_and_resume_gets_the_message() {
    let h = harness(sh(r##"
        read -r input
        if [ "$KORVUS_RESUME" = 1 ]; then
            chmod u+w report.md 2>/dev/null
            echo "answer to: $input" >> report.md
            echo "resumed with: $input"
        else
            echo "# Findings" > report.md
        fi
    "##))
    .await;
    let row = h.run("first").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let reports = h.store.all_reports(row.id).await.expect("reports");
    assert_eq!(reports.len(), 1);
    assert!(reports[0].markdown_key.is_some());

    h.manager.reopen(row.id, "and now?").await.expect("reopen");
    let row = h.settled(row.id).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(
        texts.contains(&"resumed with: and now?".to_owned()),
        "{texts:?}"
    );
    let reports = h.store.all_reports(row.id).await.expect("reports");
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[1].revision, 2);
    h.stop().await;
}

#[tokio::test]
async fn a_resume_that_exits_zero_without_touching_the_report_authored_nothing() {
    let h = harness(sh(r##"
        if [ "$KORVUS_RESUME" = 0 ]; then echo "# Findings" > report.md; fi
    "##))
    .await;
    let row = h.run("first").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    h.manager.reopen(row.id, "and now?").await.expect("reopen");
    let row = h.settled(row.id).await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert_eq!(row.exit_reason.as_deref(), Some("report_author_failed"));
    let r2 = h.store.get_report(row.id, 2).await.expect("revision 2");
    assert_eq!(r2.markdown_key, None, "the old document is not adopted");
    h.stop().await;
}

#[tokio::test]
async fn a_run_without_a_scratch_dir_fails_clearly() {
    let store = std::sync::Arc::new(korvus_store::MemoryStore::new());
    let manager =
        korvus_session::Manager::builder(store.clone(), std::sync::Arc::new(sh("echo never")))
            .build();
    let incident = store
        .create_incident(korvus_store::NewIncident {
            title: "t".into(),
            workspace: None,
        })
        .await
        .expect("incident");
    let s = manager
        .create(korvus_session::CreateSession::new(incident.id, "go"))
        .await
        .expect("create");
    let row = manager
        .await_settled(s.id, std::time::Duration::from_secs(30))
        .await
        .expect("settled");
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(
        row.exit_reason.as_deref(),
        Some(korvus_runner::exit::RUNNER_FAILED)
    );
    manager.stop().await;
}

#[tokio::test]
async fn long_stderr_lines_are_cut_at_four_kib() {
    let h = harness(sh(
        r#"head -c 10000 /dev/zero | tr '\0' 'e' >&2; echo >&2; echo '# r' > report.md"#,
    ))
    .await;
    let row = h.run("go").await;
    let texts = h.texts(row.id).await;
    let line = texts
        .iter()
        .find(|t| t.starts_with("stderr: e"))
        .expect("the stderr line");
    assert_eq!(
        *line,
        format!(
            "stderr: {} [line truncated]",
            "e".repeat(korvus_command::STDERR_LINE_BYTES)
        )
    );
    h.stop().await;
}

#[tokio::test]
async fn the_agent_sees_no_secret_of_the_embedding_process() {
    let parent = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("LANG", "C.UTF-8".to_owned()),
        ("GITHUB_TOKEN", "ghp_leak".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "aws_leak".to_owned()),
        ("AWS_ACCESS_KEY_ID", "akid_leak".to_owned()),
        (
            "KORVUS_DATABASE_URL",
            "postgres://u:pw_leak@h/db".to_owned(),
        ),
        ("DATABASE_URL", "postgres://u:pw_leak@h/db".to_owned()),
        ("MY_API_KEY", "needed".to_owned()),
        ("EDITOR", "vi".to_owned()),
    ]
    .map(|(k, v)| (k.into(), v.into()));
    let script = r#"env | sort | sed 's/^/env: /'; echo '# R' > report.md"#;
    let h = harness(
        sh(script)
            .env_source(parent.clone())
            .env_pass("MY_API_KEY")
            .env("SET_BY_EMBEDDER", "yes"),
    )
    .await;
    let row = h.run("print your environment").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    let env: Vec<&str> = texts
        .iter()
        .filter_map(|t| t.strip_prefix("env: "))
        .collect();
    let all = env.join("\n");
    assert!(!all.contains("leak"), "a secret reached the agent:\n{all}");
    assert!(!all.contains("EDITOR="), "not a core variable:\n{all}");
    for expected in ["LANG=C.UTF-8", "MY_API_KEY=needed", "SET_BY_EMBEDDER=yes"] {
        assert!(env.contains(&expected), "{expected} missing:\n{all}");
    }
    let home = env
        .iter()
        .find_map(|l| l.strip_prefix("HOME="))
        .expect("HOME");
    let tmp = env
        .iter()
        .find_map(|l| l.strip_prefix("TMPDIR="))
        .expect("TMPDIR");
    assert!(home.ends_with("/.korvus/home"), "{home}");
    assert!(tmp.ends_with("/.korvus/tmp"), "{tmp}");
    assert!(env.iter().any(|l| l.starts_with("KORVUS_SESSION_ID=")));
    h.stop().await;
}

#[tokio::test]
async fn output_past_the_cap_is_dropped_with_one_note_and_the_run_lands() {
    let h = harness(sh(
        "yes 'line of output' | head -n 1000000; echo '# R' > report.md",
    ))
    .await;
    let row = h.run("flood").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let events = h.events(row.id).await;
    let messages = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Message { .. }))
        .count();
    assert_eq!(messages, 100_000, "the default cap of stored events");
    let notes: Vec<&String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Note { text } if text.starts_with("dropped: output cap reached") => {
                Some(text)
            }
            _ => None,
        })
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("900000 more event(s)"), "{notes:?}");
    h.stop().await;
}
