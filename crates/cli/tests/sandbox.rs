//! The CLI's confinement of agents: the filesystem sandbox with the data
//! dir's own files private, the unprivileged agent user under root, and
//! what an agent can read of the `korvus` process itself.

use crate::support::{korvus, ok, script, session_id};

/// Prints `name=ok` or `name=denied` per probe, then writes the report.
const PROBES: &str = r#"
try() { if sh -c "$2" >/dev/null 2>&1; then echo "probe $1=ok"; else echo "probe $1=denied"; fi; }
try up_write 'echo x > ../../x'
try db_write 'echo x >> ../../../korvus.db'
try db_read 'cat ../../../korvus.db'
try blobs_list 'ls ../../../blobs'
try scratch 'echo x > here && cat here'
try home 'echo x > "$HOME/h"'
try tmp 'f=$(mktemp) && echo x > "$f"'
try dns 'getent hosts localhost && cat /etc/resolv.conf'
try git 'git init -q repo && cd repo && echo a > a && git add a && git -c user.name=a -c user.email=a@b commit -q -m one'
try python3 'python3 -c "print(1)"'
echo "probe uid=$(id -u)"
echo '# R' > report.md
"#;

fn probe(data: &std::path::Path, extra: &[&str]) -> String {
    // A first session, so the database and the blob dir hold something.
    let first = script(data, "first.sh", "echo '# first' > report.md\n");
    ok(korvus(data)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&first)
        .arg("seed"));
    let agent = script(data, "probes.sh", PROBES);
    let run = ok(korvus(data)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .args(extra)
        .arg("probe"));
    let id = session_id(&run);
    ok(korvus(data).args(["export", &id]))
}

fn says(log: &str, probe: &str, outcome: &str) -> bool {
    log.contains(&format!("probe {probe}={outcome}"))
}

#[test]
fn under_the_default_cli_an_agent_cannot_touch_the_data_dir() {
    let data = tempfile::tempdir().expect("temp dir");
    let log = probe(data.path(), &[]);
    for denied in ["up_write", "db_write", "db_read", "blobs_list"] {
        assert!(says(&log, denied, "denied"), "{denied}:\n{log}");
    }
    for allowed in ["scratch", "home", "tmp", "dns", "git", "python3"] {
        assert!(says(&log, allowed, "ok"), "{allowed}:\n{log}");
    }
    assert!(!data.path().join("scratch/x").exists());
    if nix::unistd::geteuid().is_root() {
        assert!(
            says(&log, "uid", "65534"),
            "root's agents run as nobody:\n{log}"
        );
    }
    // The database is intact: korvus still reads both sessions.
    let ls = ok(korvus(data.path()).args(["ls"]));
    assert_eq!(ls.matches(" initial completed ").count(), 2, "{ls}");
}

#[test]
fn no_sandbox_and_agent_user_opt_out() {
    let data = tempfile::tempdir().expect("temp dir");
    let log = probe(data.path(), &["--no-sandbox", "--agent-user", "root"]);
    assert!(says(&log, "up_write", "ok"), "{log}");
    assert!(says(&log, "db_read", "ok"), "{log}");
    assert!(data.path().join("scratch/x").exists());
}

#[test]
fn an_unknown_agent_user_is_refused_before_anything_runs() {
    let data = tempfile::tempdir().expect("temp dir");
    let out = crate::support::output(korvus(data.path()).args([
        "run",
        "--agent",
        "true",
        "--agent-user",
        "korvus-no-such-user",
        "x",
    ]));
    assert!(!out.status.success());
    let err = crate::support::stderr(&out);
    assert!(err.contains("korvus-no-such-user"), "{err}");
    assert!(!crate::support::stdout(&out).contains("started"));
}

/// Prints what the agent can read of its parent, the `korvus` process.
const PARENT: &str = r#"
echo "environ: $(tr '\0' ' ' < /proc/$PPID/environ 2>&1)"
echo "cmdline: $(tr '\0' ' ' < /proc/$PPID/cmdline 2>&1)"
env | sed 's/^/env: /'
echo '# R' > report.md
"#;

#[test]
fn the_parents_environ_and_cmdline_hold_no_secret_the_agent_can_read() {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(data.path(), "parent.sh", PARENT);
    let run = ok(korvus(data.path())
        .env("GITHUB_TOKEN", "ghp_leak")
        .env("AWS_SECRET_ACCESS_KEY", "aws_leak")
        .env("DATABASE_URL", "postgres://u:pw_leak@h/db")
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("look at your parent"));
    let log = ok(korvus(data.path()).args(["export", &session_id(&run)]));
    assert!(log.contains("cmdline: "), "{log}");
    assert!(
        log.contains("/environ: Permission denied"),
        "the agent could read korvus's environment:\n{log}"
    );
    assert!(!log.contains("leak"), "a secret reached the agent:\n{log}");
}
