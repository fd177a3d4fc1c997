//! The filesystem sandbox (Landlock) and the agent user: what an agent may
//! write and read, how a missing sandbox is announced, and what an agent
//! running under its own uid can see of the embedding process.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use korvus_command::{AgentUser, CommandRunner, Sandbox};
use korvus_store::SessionStatus;

use crate::support::{harness, sh, Harness};

/// Tries each probe in a shell of its own and prints `name=ok` or
/// `name=denied`, then writes the report.
const PROBES: &str = r#"
    try() { if sh -c "$2" >/dev/null 2>&1; then echo "$1=ok"; else echo "$1=denied"; fi; }
    try up 'echo x > ../../outside'
    try private_write 'echo x > "$PRIVATE/secret.db"'
    try private_read 'cat "$PRIVATE/secret.db"'
    try private_list 'ls "$PRIVATE"'
    try extra_write 'echo x > "$EXTRA/w"'
    try scratch 'echo x > in_scratch && cat in_scratch'
    try home 'echo x > "$HOME/h" && mkdir -p "$HOME/.cache/a"'
    try tmp 'f=$(mktemp) && echo x > "$f"'
    try devnull 'echo x > /dev/null'
    try etc 'cat /etc/passwd /etc/resolv.conf'
    try dns 'getent hosts localhost && python3 -c "import socket; socket.getaddrinfo(\"localhost\", 80)"'
    try git 'git init -q repo && cd repo && echo a > a && git add a && git -c user.name=a -c user.email=a@b commit -q -m one'
    try python 'python3 -c "open(\"py.txt\", \"w\").write(\"x\")"'
    echo '# R' > report.md
"#;

struct Dirs {
    private: tempfile::TempDir,
    extra: tempfile::TempDir,
}

fn dirs() -> Dirs {
    let private = tempfile::tempdir().expect("temp dir");
    std::fs::write(private.path().join("secret.db"), "rows").expect("secret");
    Dirs {
        private,
        extra: tempfile::tempdir().expect("temp dir"),
    }
}

fn probes(dirs: &Dirs, sandbox: Sandbox) -> CommandRunner {
    sh(PROBES)
        .env("PRIVATE", dirs.private.path())
        .env("EXTRA", dirs.extra.path())
        .sandbox(sandbox)
}

async fn results(h: &Harness, id: korvus_store::SessionId) -> Vec<String> {
    h.texts(id)
        .await
        .into_iter()
        .filter(|t| t.ends_with("=ok") || t.ends_with("=denied"))
        .collect()
}

fn says(results: &[String], probe: &str, outcome: &str) -> bool {
    results.contains(&format!("{probe}={outcome}"))
}

#[tokio::test]
async fn the_default_sandbox_confines_writes_and_hides_private_paths() {
    let dirs = dirs();
    let h = harness(probes(&dirs, Sandbox::new().private(dirs.private.path()))).await;
    let row = h.run("probe").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let got = results(&h, row.id).await;
    for denied in [
        "up",
        "private_write",
        "private_read",
        "private_list",
        "extra_write",
    ] {
        assert!(says(&got, denied, "denied"), "{denied}: {got:?}");
    }
    for allowed in [
        "scratch", "home", "tmp", "devnull", "etc", "dns", "git", "python",
    ] {
        assert!(says(&got, allowed, "ok"), "{allowed}: {got:?}");
    }
    assert_eq!(
        std::fs::read_to_string(dirs.private.path().join("secret.db")).unwrap(),
        "rows"
    );
    // Only the agent's thread was restricted, never the embedding process.
    std::fs::write(dirs.extra.path().join("by_the_test"), "x").expect("the test still writes");
    h.stop().await;
}

#[tokio::test]
async fn writable_and_readable_paths_extend_the_sandbox() {
    let dirs = dirs();
    let policy = Sandbox::new()
        .private(dirs.private.path())
        .readable(dirs.private.path().join("secret.db"))
        .writable(dirs.extra.path());
    let h = harness(probes(&dirs, policy)).await;
    let row = h.run("probe").await;
    let got = results(&h, row.id).await;
    assert!(says(&got, "private_read", "ok"), "{got:?}");
    assert!(says(&got, "private_write", "denied"), "{got:?}");
    assert!(says(&got, "private_list", "denied"), "{got:?}");
    assert!(says(&got, "extra_write", "ok"), "{got:?}");
    assert!(dirs.extra.path().join("w").is_file());
    h.stop().await;
}

#[tokio::test]
async fn without_landlock_the_run_goes_on_unconfined_and_says_so() {
    let dirs = dirs();
    let h = harness(probes(&dirs, Sandbox::new().landlock_abi(0))).await;
    let row = h.run("probe").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let got = results(&h, row.id).await;
    assert!(says(&got, "extra_write", "ok"), "unconfined: {got:?}");
    let texts = h.texts(row.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("sandbox not in force") && t.contains("Landlock")),
        "the degraded mode is announced in the log: {texts:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_required_sandbox_that_cannot_be_had_fails_the_run_before_it_starts() {
    let marker = tempfile::tempdir().expect("temp dir");
    let script = format!("touch {}/started", marker.path().display());
    let h = harness(sh(&script).sandbox(Sandbox::new().required().landlock_abi(0))).await;
    let row = h.run("probe").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert!(
        !marker.path().join("started").exists(),
        "the agent never ran"
    );
    let texts = h.texts(row.id).await;
    assert!(
        texts.iter().any(|t| t.contains("sandbox is required")),
        "{texts:?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_disabled_sandbox_lets_the_agent_write_anywhere_its_user_may() {
    let dirs = dirs();
    let h = harness(probes(&dirs, Sandbox::disabled())).await;
    let row = h.run("probe").await;
    let got = results(&h, row.id).await;
    assert!(says(&got, "extra_write", "ok"), "{got:?}");
    assert!(says(&got, "private_read", "ok"), "{got:?}");
    h.stop().await;
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Sets the mode of the harness's scratch root.
fn root_mode(h: &Harness, mode: u32) -> &Path {
    let root = h._root.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode)).expect("chmod");
    root
}

const AS_USER: &str = r#"
    echo "uid=$(id -u) user=$USER"
    if cat /proc/$PPID/environ >/dev/null 2>&1; then echo environ=readable; else echo environ=denied; fi
    echo x > "$HOME/h" && echo home=ok
    echo x > own && echo scratch=ok
    echo '# R' > report.md
"#;

#[tokio::test]
async fn an_agent_user_owns_its_scratch_dir_and_cannot_read_the_parents_environment() {
    let nobody = AgentUser::lookup("nobody").expect("the nobody user exists");
    let h = harness(sh(AS_USER).run_as(nobody.clone())).await;
    if !is_root() {
        // Switching users needs root: the run fails to start, loudly.
        let row = h.run("who").await;
        assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
        h.stop().await;
        return;
    }
    root_mode(&h, 0o755);
    let row = h.run("who").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    let line = format!("uid={} user=nobody", nobody.uid());
    for expected in [line.as_str(), "environ=denied", "home=ok", "scratch=ok"] {
        assert!(texts.iter().any(|t| t == expected), "{expected}: {texts:?}");
    }
    h.stop().await;
}

#[tokio::test]
async fn an_agent_user_that_cannot_reach_the_scratch_dir_is_a_typed_failure() {
    let h = harness(sh(AS_USER).run_as(AgentUser::lookup("nobody").expect("nobody"))).await;
    let root = root_mode(&h, 0o700).to_path_buf();
    let row = h.run("who").await;
    let texts = h.texts(row.id).await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?} {texts:?}");
    assert!(
        texts
            .iter()
            .any(|t| t.contains("cannot reach its scratch dir")
                && t.contains(&root.display().to_string())),
        "{texts:?}"
    );
    h.stop().await;
}
