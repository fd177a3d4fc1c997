//! The agent's environment under the CLI: the embedding process's secrets
//! never reach it; `--agent-env-pass` and `--agent-env` add what it needs.

use crate::support::{korvus, ok, script, session_id};

const AGENT: &str = "env | sort | sed 's/^/env: /'\necho '# R' > report.md\n";

fn shown_env(data: &std::path::Path, extra: &[&str]) -> String {
    let agent = script(data, "agent.sh", AGENT);
    let mut cmd = korvus(data);
    cmd.env("GITHUB_TOKEN", "ghp_leak")
        .env("AWS_SECRET_ACCESS_KEY", "aws_leak")
        .env("DATABASE_URL", "postgres://u:pw_leak@h/db")
        .env("MY_API_KEY", "needed")
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .args(extra)
        .arg("print your environment");
    let run = ok(&mut cmd);
    let id = session_id(&run);
    ok(korvus(data).args(["export", &id]))
}

#[test]
fn secrets_of_the_cli_process_never_reach_the_agent() {
    let data = tempfile::tempdir().expect("temp dir");
    let log = shown_env(data.path(), &[]);
    assert!(log.contains("env: PATH="), "{log}");
    assert!(!log.contains("leak"), "a secret reached the agent:\n{log}");
    assert!(!log.contains("MY_API_KEY"), "{log}");
    assert!(log.contains("/.korvus/home"), "private HOME:\n{log}");
}

#[test]
fn pass_and_set_add_what_the_agent_needs() {
    let data = tempfile::tempdir().expect("temp dir");
    let log = shown_env(
        data.path(),
        &[
            "--agent-env-pass",
            "MY_API_KEY",
            "--agent-env",
            "MODEL=small",
            "--agent-env-inherit",
            "none",
        ],
    );
    assert!(log.contains("env: MY_API_KEY=needed"), "{log}");
    assert!(log.contains("env: MODEL=small"), "{log}");
    assert!(!log.contains("env: PATH="), "inherit none:\n{log}");
    assert!(!log.contains("leak"), "{log}");
}
