//! Errors are one line (`korvus: error: …` with the cause), never a panic,
//! and the exit code is not 0.

use crate::support::{korvus, output, stderr};

fn one_line_error(args: &[&str], expected: &str) {
    one_line_error_with(args, expected, 1);
}

/// As `one_line_error`, exiting `code`.
fn one_line_error_with(args: &[&str], expected: &str, code: i32) {
    let data = tempfile::tempdir().expect("temp dir");
    let out = output(korvus(data.path()).args(args));
    let err = without_warnings(&stderr(&out));
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line:\n{err}");
    assert!(err.starts_with("korvus: error: "), "{err}");
    assert!(
        err.contains(expected),
        "{args:?}: {expected:?} not in {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

/// Stderr without `korvus: warning:` lines (e.g. the one about a password
/// on the command line).
fn without_warnings(err: &str) -> String {
    err.lines()
        .filter(|l| !l.starts_with("korvus: warning: "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn an_unreachable_database_url_is_one_line() {
    // Port 1 on loopback: nothing listens there.
    one_line_error(
        &[
            "--database-url",
            "postgres://korvus:secret@127.0.0.1:1/korvus",
            "ls",
        ],
        "cannot reach PostgreSQL at 127.0.0.1:1",
    );
}

#[test]
fn a_database_url_of_another_kind_is_one_line_without_the_password() {
    let data = tempfile::tempdir().expect("temp dir");
    let out =
        output(korvus(data.path()).args(["--database-url", "mysql://u:hunter2@db/x", "migrate"]));
    let all = stderr(&out);
    assert!(
        all.contains("korvus: warning: --database-url carries a password"),
        "{all}"
    );
    assert!(!all.contains("hunter2"), "the password leaked: {all}");
    let err = without_warnings(&all);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unsupported --database-url"), "{err}");
}

#[test]
fn an_unknown_session_is_one_line() {
    one_line_error(
        &["show", "01a22678-f028-712c-ae44-e8e012316fd7"],
        "no session 01a22678-f028-712c-ae44-e8e012316fd7 in ",
    );
}

#[test]
fn a_malformed_id_is_one_line_and_a_usage_error() {
    one_line_error_with(&["export", "nope"], "\"nope\" is not a valid session id", 2);
}

#[test]
fn a_missing_agent_program_is_one_line() {
    one_line_error(
        &["run", "--agent", "./no/such/agent.sh", "why?"],
        "agent program",
    );
}

#[test]
fn usage_errors_exit_2() {
    let data = tempfile::tempdir().expect("temp dir");
    let out = output(korvus(data.path()).args(["run", "--no-such-flag"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A blob dir that refuses the start-up probe's write is named, in one
/// line, before any row is written. (A plain `chmod` does not stop root,
/// which CI runs as: a file where the probe's directory goes does.)
#[test]
fn a_blob_dir_that_refuses_writes_is_named_before_any_row_is_written() {
    let data = tempfile::tempdir().expect("temp dir");
    let blobs = data.path().join("blobs");
    std::fs::create_dir_all(blobs.join("objects")).unwrap();
    std::fs::write(blobs.join("objects").join("probes"), "in the way").unwrap();
    let agent = crate::support::script(data.path(), "agent.sh", "touch ran\nexit 0\n");
    let out = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(crate::support::NO_CGROUP)
            .arg("is the blob dir writable?"),
    );
    let err = without_warnings(&stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line:\n{err}");
    assert!(err.contains("the blob store"), "{err}");
    assert!(err.contains(&blobs.display().to_string()), "{err}");
    let ls = crate::support::ok(korvus(data.path()).arg("ls"));
    assert!(ls.contains("no incidents yet"), "no row was written: {ls}");
    assert!(
        !data
            .path()
            .join("scratch")
            .read_dir()
            .unwrap()
            .any(|_| true),
        "no run started"
    );
}

/// `--model-key-var` without `--model-endpoint` serves a preset the
/// provider's own API through the gateway; an unset key variable fails
/// the run before the agent starts, naming the variable (never falling
/// back to an agent without a key, nor asking for an endpoint).
#[test]
fn a_model_key_variable_that_is_not_set_fails_the_run_naming_it() {
    let data = tempfile::tempdir().expect("temp dir");
    let out = output(
        korvus(data.path())
            .args(["run", "--agent", "codex", "--agent-program", "/bin/true"])
            .args(["--model-key-var", "KORVUS_NO_SUCH_MODEL_KEY", "hello"])
            .env_remove("KORVUS_NO_SUCH_MODEL_KEY"),
    );
    assert!(!out.status.success(), "{out:?}");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!said.contains("needs --model-endpoint"), "{said}");
    let log = crate::support::ok(korvus(data.path()).args([
        "export",
        &crate::support::session_id(&String::from_utf8_lossy(&out.stdout)),
    ]));
    assert!(
        format!("{said}{log}").contains("KORVUS_NO_SUCH_MODEL_KEY is not set"),
        "{said}\n{log}"
    );
}
