//! A newcomer's path through the CLI: closed pipes end quietly, an empty
//! store says what to do, usage errors exit 2, an agent that cannot run is
//! refused before any row, `show` adds counters up and says why a run
//! failed, and a waiting session is answered with `korvus reply`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use crate::support::{korvus, ok, output, script, session_id, stderr};

/// Runs `args` with stdout closed before korvus writes anything.
fn with_stdout_closed(data: &Path, args: &[&str]) -> std::process::Output {
    let mut child = korvus(data)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("korvus starts");
    drop(child.stdout.take());
    child.wait_with_output().expect("korvus exits")
}

#[test]
fn a_closed_stdout_ends_every_reading_command_quietly() {
    let data = tempfile::tempdir().unwrap();
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '# r' > report.md\necho hi > out.txt\n",
    );
    let run = ok(korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("go"));
    let id = session_id(&run);
    for args in [
        vec!["show", id.as_str()],
        vec!["ls"],
        vec!["export", id.as_str()],
        vec!["cat", id.as_str()],
    ] {
        let out = with_stdout_closed(data.path(), &args);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn an_empty_store_names_the_demo_and_a_malformed_id_is_a_usage_error() {
    let data = tempfile::tempdir().unwrap();
    let ls = ok(korvus(data.path()).arg("ls"));
    assert!(
        ls.contains("no incidents yet") && ls.contains("korvus demo"),
        "{ls}"
    );
    let bad = output(korvus(data.path()).args(["show", "not-an-id"]));
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("is not a valid session id"),
        "{}",
        stderr(&bad)
    );
    let unknown =
        output(korvus(data.path()).args(["show", "01a23532-6107-724f-9279-b17a22b680c2"]));
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("korvus.db"),
        "names the store: {}",
        stderr(&unknown)
    );
}

#[test]
fn an_agent_that_cannot_be_executed_is_refused_before_any_row() {
    let data = tempfile::tempdir().unwrap();
    let agent = data.path().join("agent.sh");
    std::fs::write(&agent, "#!/bin/sh\necho '# r' > report.md\n").unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = output(
        korvus(data.path())
            .args(["run", "--agent"])
            .arg(&agent)
            .arg("go"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot be executed"),
        "{}",
        stderr(&out)
    );
    let ls = ok(korvus(data.path()).arg("ls"));
    assert!(ls.contains("no incidents yet"), "nothing was written: {ls}");
}

#[test]
fn show_adds_the_revisions_counters_up_and_says_why_a_run_failed() {
    let data = tempfile::tempdir().unwrap();
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '{\"type\":\"turn_start\",\"turn\":'$KORVUS_REVISION'}'\n\
         echo '{\"type\":\"usage\",\"input_tokens\":100,\"output_tokens\":10}'\n\
         echo '{\"type\":\"turn_end\",\"turn\":'$KORVUS_REVISION'}'\n\
         echo '# r' > report.md\n",
    );
    let run = ok(korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("go"));
    let id = session_id(&run);
    ok(korvus(data.path())
        .args(["reopen", &id, "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("again"));
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(
        show.contains("counters   2 turn(s), 0 tool call(s), 200 input / 20 output tokens in total over 2 report(s)"),
        "{show}"
    );
    assert_eq!(
        show.matches("          1 turn(s), 0 tool call(s), 100 input / 10 output tokens")
            .count(),
        2,
        "{show}"
    );

    // An agent that cannot start: the cause is under the exit reason.
    let broken = data.path().join("broken.sh");
    std::fs::write(&broken, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = output(
        korvus(data.path())
            .args(["run", "--agent"])
            .arg(&broken)
            .arg("go"),
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let id = session_id(&String::from_utf8_lossy(&out.stdout));
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("exit       runner_failed"), "{show}");
    assert!(show.contains("cause      could not start"), "{show}");
}

#[test]
fn a_session_waiting_for_the_user_is_answered_with_reply() {
    let data = tempfile::tempdir().unwrap();
    // Asks on the first iteration (exit 75), answers on the second.
    let agent = script(
        data.path(),
        "agent.sh",
        "if [ \"$KORVUS_REVISION\" = 1 ]; then echo '# which host?' > report.md; exit 75; fi\n\
         echo '# answered' > report.md\n",
    );
    let run = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("go"),
    );
    assert_eq!(run.status.code(), Some(5), "awaiting the user");
    let id = session_id(&String::from_utf8_lossy(&run.stdout));
    let reopen = output(
        korvus(data.path())
            .args(["reopen", &id, "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("db-1"),
    );
    assert_eq!(reopen.status.code(), Some(1));
    assert!(
        stderr(&reopen).contains("korvus reply"),
        "{}",
        stderr(&reopen)
    );
    let replied = ok(korvus(data.path())
        .args(["reply", &id, "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("db-1"));
    assert!(replied.contains("completed"), "{replied}");
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     completed"), "{show}");
    assert!(show.contains("  rev 2   completed"), "{show}");
}

/// As root with the data dir in a `0700` directory (`mktemp -d`) whose
/// `scratch/` an earlier release left holding something (so it stays the
/// scratch root), the agent user cannot reach it: `demo` and `serve`
/// refuse before any row, naming the directory and the fix. (A data dir
/// without one gets a reachable scratch root: `private.rs`.) Not as root,
/// agents run as korvus's own user and the demo completes both revisions.
#[test]
fn an_unreachable_scratch_root_is_refused_before_any_row() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let data = tmp.path();
    std::fs::create_dir_all(data.join("scratch/an-old-kept-dir")).unwrap();
    let demo = output(korvus(data).arg("demo"));
    if !nix::unistd::geteuid().is_root() {
        assert_eq!(demo.status.code(), Some(0), "{}", stderr(&demo));
        return;
    }
    assert_eq!(demo.status.code(), Some(1), "{}", stderr(&demo));
    let err = stderr(&demo);
    assert!(err.contains("cannot reach the scratch root"), "{err}");
    assert!(
        err.contains(&format!("chmod o+x {}", data.display())),
        "{err}"
    );
    let serve = output(
        korvus(data)
            .env("KORVUS_TOKEN", "a-token-of-at-least-16-bytes")
            .args(["serve", "--listen", "127.0.0.1:0"]),
    );
    assert_eq!(serve.status.code(), Some(1), "{}", stderr(&serve));
    assert!(
        stderr(&serve).contains("cannot reach the scratch root"),
        "{}",
        stderr(&serve)
    );
    let ls = ok(korvus(data).arg("ls"));
    assert!(ls.contains("no incidents yet"), "nothing was written: {ls}");
    // Made reachable, the demo completes both revisions.
    std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o711)).unwrap();
    let demo = output(korvus(data).arg("demo"));
    assert_eq!(demo.status.code(), Some(0), "{}", stderr(&demo));
    let out = String::from_utf8_lossy(&demo.stdout);
    assert!(out.contains("revision 2"), "{out}");
}

#[test]
fn show_during_a_run_counts_the_turns_so_far() {
    let data = tempfile::tempdir().unwrap();
    let agent = script(
        data.path(),
        "agent.sh",
        "echo '{\"type\":\"turn_start\",\"turn\":1}'\n\
         echo '{\"type\":\"tool_call\",\"call_id\":\"c1\",\"tool\":\"df\",\"input\":{}}'\n\
         echo 'agent is working'\nsleep 600 & wait\n",
    );
    let mut run = korvus(data.path())
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let seen = crate::support::read_until(&mut run, "agent is working");
    let id = session_id(&seen);
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(
        show.contains("running    revision 1 so far: 1 turn(s), 1 tool call(s)"),
        "{show}"
    );
    ok(korvus(data.path()).args(["cancel", &id]));
    assert_eq!(run.wait().unwrap().code(), Some(4));
}

/// The `n`th command between backticks (from 0) of the line holding
/// `marker`, split into its words after `korvus` (`<…>` placeholders
/// replaced by `fill`).
fn hinted(out: &str, marker: &str, n: usize, fill: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no {marker:?} in {out}"));
    let command = line
        .split('`')
        .nth(2 * n + 1)
        .unwrap_or_else(|| panic!("{line}"));
    command
        .split_whitespace()
        .skip(1)
        .map(|w| {
            if w.starts_with('<') {
                fill.to_owned()
            } else {
                w.to_owned()
            }
        })
        .collect()
}

#[test]
fn the_hints_of_ls_and_of_a_prune_dry_run_run_as_printed() {
    let data = tempfile::tempdir().unwrap();
    let ls = ok(korvus(data.path()).arg("ls"));
    let new = hinted(&ls, "no incidents yet", 1, "db-1");
    assert_eq!(new[..2], ["incident", "new"], "{ls}");
    ok(korvus(data.path()).args(&new));
    assert!(ok(korvus(data.path()).arg("ls")).contains("db-1"));

    let dry = ok(korvus(data.path()).args(["prune", "--finished-before", "30d"]));
    let apply = hinted(&dry, "dry run", 0, "");
    assert!(apply.contains(&"--apply".to_owned()), "{dry}");
    let applied = ok(korvus(data.path()).args(&apply));
    assert!(applied.contains("session(s) pruned"), "{applied}");
}

/// `KORVUS_LOG` takes `RUST_LOG`-style targets, and logs to a stderr that
/// is not a terminal carry no colour codes.
#[test]
fn korvus_log_filters_by_target_without_colours_on_a_pipe() {
    let data = tempfile::tempdir().unwrap();
    let out = output(
        korvus(data.path())
            .env("KORVUS_LOG", "korvus_session=info")
            .env("KORVUS_DEMO_PAUSE", "0")
            .arg("demo"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("korvus_session"), "the target's lines: {err}");
    assert!(!err.contains('\u{1b}'), "no ANSI codes on a pipe: {err:?}");
    let bad = output(
        korvus(data.path())
            .env("KORVUS_LOG", "korvus_session=loud")
            .arg("ls"),
    );
    assert!(bad.status.success());
    assert!(
        stderr(&bad).contains("KORVUS_LOG=\"korvus_session=loud\" is not a log filter"),
        "{}",
        stderr(&bad)
    );
}

/// `korvus completions <shell>` prints a script the shell loads, naming
/// the subcommands, and touches no data dir.
#[test]
fn completions_print_a_script_bash_loads() {
    let data = tempfile::tempdir().unwrap();
    let script = ok(korvus(data.path()).args(["completions", "bash"]));
    assert!(
        script.contains("reopen") && script.contains("serve"),
        "{script}"
    );
    let file = data.path().join("korvus.bash");
    std::fs::write(&file, &script).unwrap();
    let loaded = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p korvus", file.display()))
        .output()
        .expect("bash runs");
    assert!(
        String::from_utf8_lossy(&loaded.stdout).contains("korvus"),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    assert!(
        !data.path().join("korvus.db").exists(),
        "no store was opened"
    );
    for shell in ["zsh", "fish"] {
        assert!(!ok(korvus(data.path()).args(["completions", shell])).is_empty());
    }
}

/// `--json` on `show`, `ls` and `incident ls` prints the HTTP API's
/// objects, parseable, with the cause of a failed session.
#[test]
fn show_ls_and_incident_ls_print_json() {
    let data = tempfile::tempdir().unwrap();
    let agent =
        crate::support::script(data.path(), "fails.sh", "echo 'disk on fire' >&2\nexit 3\n");
    let out = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("why"),
    );
    assert_eq!(out.status.code(), Some(3), "failed: {}", stderr(&out));
    let id = crate::support::session_id(&String::from_utf8_lossy(&out.stdout));
    let parse = |args: &[&str]| -> serde_json::Value {
        let text = ok(korvus(data.path()).args(args));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    };
    let show = parse(&["show", &id, "--json"]);
    assert_eq!(show["session"]["id"], id.as_str(), "{show}");
    assert_eq!(show["session"]["status"], "failed", "{show}");
    assert_eq!(show["reports"][0]["revision"], 1, "{show}");
    assert!(
        show["cause"].as_str().is_some_and(|c| !c.is_empty()),
        "{show}"
    );
    assert!(show["artifacts"].is_array() && show["incident"]["title"].is_string());
    let ls = parse(&["ls", "--json"]);
    assert_eq!(ls["incidents"][0]["sessions"][0]["id"], id.as_str(), "{ls}");
    assert!(ls["next"].is_null(), "{ls}");
    let incidents = parse(&["incident", "ls", "--json"]);
    assert_eq!(incidents.as_array().map(Vec::len), Some(1), "{incidents}");
}

/// A run that ends waiting (exit 5) says how to answer, and `korvus
/// reply` works without `--agent`: the session remembered its agent, given
/// as a path relative to the directory `run` ran in, from anywhere.
#[test]
fn reply_needs_no_agent_after_a_run_that_ended_waiting() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let agent = data.path().join("asks.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\nif [ \"$KORVUS_REVISION\" = 1 ]; then echo '# which host?' > report.md; exit 75; fi\n\
         echo \"# answered with $(head -c 20)\" > report.md\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = output(
        korvus(data.path())
            .current_dir(data.path())
            .args(["run", "--agent", "./asks.sh", "--timeout", "600"])
            .arg("go"),
    );
    assert_eq!(run.status.code(), Some(5), "{}", stderr(&run));
    let said = String::from_utf8_lossy(&run.stdout).into_owned();
    let id = crate::support::session_id(&said);
    assert!(
        said.contains(&format!("korvus reply {id} \"<answer>\"")),
        "{said}"
    );
    // From elsewhere, with no agent options at all.
    let elsewhere = tempfile::tempdir().unwrap();
    let replied = ok(korvus(data.path())
        .current_dir(elsewhere.path())
        .args(["reply", &id, "db-1"]));
    assert!(replied.contains("completed"), "{replied}");
    let report = ok(korvus(data.path()).args(["cat", &id]));
    assert!(report.contains("# answered with db-1"), "{report}");
}

/// Agent options too long to remember do not stop the run: it is said,
/// and the session simply remembers none.
#[test]
fn agent_options_too_long_to_remember_still_run() {
    let data = tempfile::tempdir().unwrap();
    let agent = crate::support::script(data.path(), "ok.sh", "echo '# ok' > report.md\n");
    let long = "x".repeat(5000);
    let out = output(
        korvus(data.path())
            .args(["run", "--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .args(["--agent-arg", &long, "go"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sessions will not remember them"),
        "{}",
        stderr(&out)
    );
}
