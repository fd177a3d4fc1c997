//! `run --context <artifact>`: an artifact of an earlier session is handed
//! to a new one, read-only under `context/`, and named in its manifest.

use crate::support::{korvus, ok, script, session_id};

const AGENT: &str = r#"
read -r input
if [ "$input" = "first" ]; then
    printf 'db-1 WAL grows since 02:10\n' > notes.md
    echo '# First' > report.md
else
    path=$(sed -n 's/^ *"path": "\(context\/[^"]*\)",*$/\1/p' "$KORVUS_MANIFEST")
    role=$(sed -n 's/^ *"role": "\([^"]*\)",*$/\1/p' "$KORVUS_MANIFEST")
    echo "context file $path ($role): $(cat "$path")"
    if [ -w "$path" ]; then echo "context is writable"; fi
    echo '# Second' > report.md
fi
"#;

#[test]
fn an_artifact_is_handed_to_a_later_session_as_context() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(data.path(), "agent.sh", AGENT);
    let incident = ok(korvus(data.path()).args(["incident", "new", "db-1"]));
    let incident = incident.trim();
    let first = ok(korvus(data.path())
        .args([
            "run",
            "--incident",
            incident,
            "--agent",
            "sh",
            "--agent-arg",
        ])
        .arg(&agent)
        .arg("first"));
    let show = ok(korvus(data.path()).args(["show", &session_id(&first)]));
    let artifact = show
        .lines()
        .find(|l| l.contains(" notes.md "))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("notes.md with its id in:\n{show}"))
        .to_owned();

    let second = ok(korvus(data.path())
        .args(["run", "--incident", incident, "--context", &artifact])
        .args(["--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("second"));
    assert!(
        second
            .contains("context file context/1-notes.md (prior_output): db-1 WAL grows since 02:10"),
        "{second}"
    );
    // The inherited file is read-only; even under a korvus running as
    // root, whose agents run as `nobody` by default (root would ignore
    // mode bits).
    assert!(!second.contains("context is writable"), "{second}");
}
