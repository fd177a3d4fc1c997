//! `--agent-dialect`: an agent that prints Codex's JSON lines runs as a
//! korvus session with its turns, calls and usage.

use crate::support::{korvus, ok, output, script, session_id, stderr};

const CODEX: &str = r#"
echo '{"type":"thread.started","thread_id":"th-1"}'
echo '{"type":"turn.started"}'
echo '{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"true","aggregated_output":"","exit_code":0,"status":"completed"}}'
echo '# Findings' > report.md
echo '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"Report written."}}'
echo '{"type":"turn.completed","usage":{"input_tokens":200,"output_tokens":20}}'
"#;

#[test]
fn korvus_run_reads_an_agent_dialect() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(data.path(), "codex.sh", CODEX);
    let out = ok(korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .args(["--agent-dialect", "codex", "why?"]));
    assert!(out.contains("Report written."), "{out}");
    let id = session_id(&out);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(
        show.contains("1 turn(s), 1 tool call(s), 200 input / 20 output tokens"),
        "{show}"
    );
    let bad =
        output(korvus(data.path()).args(["run", "--agent", "sh", "--agent-dialect", "gpt", "x"]));
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("codex"), "{}", stderr(&bad));
}

/// `korvus demo --agent codex`: the real Codex (installed by `cargo xtask
/// test`) against the bundled scripted model server, both revisions.
#[test]
fn demo_with_the_real_codex_runs_both_revisions_against_the_bundled_stub() {
    let Some(codex) = std::env::var_os("KORVUS_CODEX_BIN") else {
        assert!(
            std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "KORVUS_CODEX_BIN is not set: `cargo xtask test` installs Codex"
        );
        eprintln!("SKIPPED: KORVUS_CODEX_BIN is not set (run `cargo xtask test`)");
        return;
    };
    let data = tempfile::tempdir().expect("temp dir");
    let out = ok(korvus(data.path())
        .args(["demo", "--agent", "codex", "--agent-program"])
        .arg(&codex));
    assert!(
        out.contains("scripted model server at http://127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("report.md, revision 2:"), "{out}");
    assert!(
        out.contains("1 turn(s), 1 tool call(s), 200 input / 20 output tokens"),
        "{out}"
    );
    assert!(out.contains("── turn 2 started"), "{out}");
}
