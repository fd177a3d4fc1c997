//! The host protected from the CLI's agents: `korvus run` and
//! `korvus serve` raise their own open-file limit while agents keep the
//! original one; an ordinary user's agent reads none of that user's
//! credentials (the terminal korvus runs in: `terminal.rs`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support::{korvus, ok, script, session_id, stdout};

/// `cmd` run through `prefix` (a program that ends by executing its
/// arguments, such as `prlimit` or `script`), with `cmd`'s environment.
fn through(prefix: &[&str], cmd: &Command) -> Command {
    let mut wrapped = Command::new(prefix[0]);
    wrapped
        .args(&prefix[1..])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) => wrapped.env(key, v),
            None => wrapped.env_remove(key),
        };
    }
    wrapped
}

/// The open-file limit of process `pid` (`/proc/<pid>/limits`): its soft
/// (`column` 3) or hard (4) value.
fn nofile(pid: &str, column: usize) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(column))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no open-file limit in:\n{limits}"))
}

fn soft_nofile(pid: u32) -> u64 {
    nofile(&pid.to_string(), 3)
}

fn hard_nofile() -> u64 {
    nofile("self", 4)
}

/// Prints the agent's own soft limit, then waits for the file `$1` (while
/// the test reads korvus's limit: korvus is not in the agent's PID
/// namespace, so the agent cannot).
const LIMITS: &str = r#"
echo "agent soft=$(ulimit -Sn)"
echo "agent is working"
while [ ! -e "$1" ]; do sleep 0.05; done
echo '# R' > report.md
"#;

#[test]
fn korvus_run_raises_its_open_file_limit_and_the_agent_keeps_the_original() {
    let data = tempfile::tempdir().expect("temp dir");
    let shared = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(
        shared.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let agent = script(shared.path(), "limits.sh", LIMITS);
    let go = shared.path().join("go");
    let mut run = korvus(data.path());
    run.args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("--agent-arg")
        .arg(&go)
        .arg("limits");
    // `prlimit` executes korvus: the pid is korvus's.
    let (mut child, seen) =
        crate::support::spawn_until_working(&mut through(&["prlimit", "--nofile=512:"], &run));
    let korvus_soft = soft_nofile(child.id());
    std::fs::write(&go, "").expect("go");
    let status = child.wait().expect("korvus ends");
    assert!(status.success(), "{status}\n{seen}");
    assert!(seen.contains("agent soft=512"), "{seen}");
    assert_eq!(
        korvus_soft,
        hard_nofile(),
        "korvus run raised its soft limit to the hard one"
    );
}

#[test]
fn korvus_serve_raises_its_open_file_limit() {
    let data = tempfile::tempdir().expect("temp dir");
    let mut serve = korvus(data.path());
    serve
        .env("KORVUS_TOKEN", crate::serve::TOKEN)
        .args(["serve", "--listen", "127.0.0.1:0"]);
    let mut child = through(&["prlimit", "--nofile=512:"], &serve)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("korvus serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let listening = lines.any(|l| l.is_ok_and(|l| l.starts_with("korvus serve: listening on ")));
    let soft = soft_nofile(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening, "korvus serve never listened");
    assert_eq!(soft, hard_nofile(), "korvus serve's soft limit");
}

/// `cmd` as one shell-quoted line.
pub(crate) fn shell_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether this process may make throwaway users. Under `cargo xtask test`
/// (`KORVUS_REQUIRE_SERVICES=1`) it must: the test fails otherwise.
pub(crate) fn can_make_users() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        assert!(
            std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "this test makes a throwaway user, which needs root; `cargo xtask test` must run as root"
        );
        eprintln!("skipped: making a throwaway user needs root");
    }
    root
}

/// A user made for one test, with a home of its own; deleted on drop.
pub(crate) struct ThrowawayUser {
    pub(crate) name: String,
    home: tempfile::TempDir,
}

impl ThrowawayUser {
    pub(crate) fn make() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let name = format!("kt{}{nanos:x}", std::process::id() % 10_000);
        let home = tempfile::tempdir().expect("temp dir");
        let status = Command::new("useradd")
            .args(["-M", "-s", "/bin/sh", "-d"])
            .arg(home.path())
            .arg(&name)
            .status()
            .expect("useradd runs");
        assert!(status.success(), "useradd {name} failed");
        Self { name, home }
    }

    /// Writes `body` at `rel` beneath the home, owned by the user.
    fn write(&self, rel: &str, body: &str) {
        let path = self.home.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, body).expect("write");
    }

    /// Gives the whole tree at `dir` to the user.
    pub(crate) fn own(&self, dir: &std::path::Path) {
        let status = Command::new("chown")
            .args(["-R", &format!("{0}:{0}", self.name)])
            .arg(dir)
            .status()
            .expect("chown runs");
        assert!(status.success());
    }
}

impl Drop for ThrowawayUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

#[test]
fn not_root_an_agent_cannot_read_the_korvus_users_credentials_nor_signal_korvus() {
    if !can_make_users() {
        return;
    }
    let user = ThrowawayUser::make();
    user.write(".pgpass", "db:5432:*:korvus:pg_secret\n");
    user.write(
        ".aws/credentials",
        "[default]\naws_secret_access_key = aws_secret\n",
    );
    user.write(".ssh/id_ed25519", "ssh_secret\n");
    user.write("notes.txt", "not a credential\n");
    let home = user.home.path().display().to_string();
    user.own(user.home.path());
    std::fs::set_permissions(
        user.home.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let data = tempfile::tempdir().expect("temp dir");
    let probe = format!(
        r#"
for f in .pgpass .aws/credentials .ssh/id_ed25519 notes.txt; do
  if cat "{home}/$f" > "copy-$(basename $f)" 2>/dev/null; then echo "read $f=ok"; else echo "read $f=denied"; fi
done
if kill -USR2 $PPID 2>/dev/null; then echo kill=sent; else echo kill=denied; fi
echo '# R' > report.md
"#
    );
    let agent = script(data.path(), "creds.sh", &probe);
    user.own(data.path());
    let mut run = korvus(data.path());
    run.args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("credentials");
    let out = ok(&mut through(&["runuser", "-u", &user.name, "--"], &run));
    let log = ok(korvus(data.path()).args(["export", &session_id(&out)]));
    for denied in [".pgpass", ".aws/credentials", ".ssh/id_ed25519"] {
        assert!(
            log.contains(&format!("read {denied}=denied")),
            "{denied}:\n{log}"
        );
    }
    assert!(
        log.contains("read notes.txt=ok"),
        "other files stay readable:\n{log}"
    );
    assert!(log.contains("kill=denied"), "{log}");
    for secret in ["pg_secret", "aws_secret", "ssh_secret"] {
        let found = Command::new("grep")
            .args(["-r", secret])
            .arg(data.path())
            .status()
            .expect("grep runs");
        assert!(!found.success(), "{secret} reached the data dir");
    }
}

#[test]
fn limit_flags_reach_the_run_and_bad_ones_are_usage_errors() {
    let data = tempfile::tempdir().expect("temp dir");
    let hog = script(
        data.path(),
        "hog.sh",
        "echo kept > before.txt\npython3 -c \"x = b'x' * (512 << 20)\"\nsleep 30\n",
    );
    let out = crate::support::output(
        korvus(data.path())
            .args([
                "run",
                "--memory-limit",
                "128MiB",
                "--agent",
                "sh",
                "--agent-arg",
            ])
            .arg(&hog)
            .arg("hog"),
    );
    let stdout = crate::support::stdout(&out);
    assert!(!out.status.success(), "{stdout}");
    let ls = ok(korvus(data.path()).args(["ls"]));
    if nix::unistd::geteuid().is_root() {
        assert!(ls.contains("memory_exceeded"), "{ls}\n{stdout}");
    }
    let bad = crate::support::output(korvus(data.path()).args([
        "run",
        "--memory-limit",
        "4parsecs",
        "--agent",
        "true",
        "x",
    ]));
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        crate::support::stderr(&bad)
    );
    assert!(crate::support::stderr(&bad).contains("4parsecs"));
    for command in ["reopen", "demo", "serve"] {
        let help = ok(korvus(data.path()).args([command, "--help"]));
        for flag in [
            "--memory-limit",
            "--task-limit",
            "--scratch-limit",
            "--stall-timeout",
        ] {
            assert!(help.contains(flag), "{command} {flag}");
        }
    }
}

/// korvus not root: `--network none` puts the agent in a user and network
/// namespace of its own (only `lo`; the agent sees the overflow uid), and
/// `--network allow=…` — which needs root for its proxy — becomes `none`
/// with a note saying so; the runs still land their reports. Required,
/// the same `allow` fails before the agent starts, naming the cause.
#[test]
fn not_root_the_network_policy_is_a_user_namespace_with_only_loopback() {
    if !can_make_users() {
        return;
    }
    let user = ThrowawayUser::make();
    let data = tempfile::tempdir().expect("temp dir");
    // A port of the host's loopback the agent must not reach.
    let host_port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    host_port.set_nonblocking(true).expect("nonblocking");
    let probe = format!(
        r#"
awk -F: 'NR>2 {{gsub(/ /, "", $1); print "iface=" $1}}' /proc/net/dev
echo "uid=$(id -u)"
echo "proxy=${{HTTPS_PROXY:-unset}}"
if curl -s -m 5 http://127.0.0.1:{}/ >/dev/null; then echo host=reached; else echo host=unreachable; fi
echo '# R' > report.md
"#,
        host_port.local_addr().expect("addr").port()
    );
    let agent = script(data.path(), "net.sh", &probe);
    user.own(data.path());
    let allow = "allow=127.0.0.1:9";
    for (policy, required, note) in [("none", true, None), (allow, false, Some("needs root"))] {
        let mut run = korvus(data.path());
        run.args(["run", "--network", policy])
            .args(required.then_some("--network-required"))
            .args(["--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("offline");
        let out = ok(&mut through(&["runuser", "-u", &user.name, "--"], &run));
        let log = ok(korvus(data.path()).args(["export", &session_id(&out)]));
        let ifaces: Vec<&str> = log.split('"').filter(|s| s.starts_with("iface=")).collect();
        assert_eq!(ifaces, ["iface=lo"], "{policy}:\n{log}");
        assert!(
            log.contains("uid=65534"),
            "{policy}: the overflow uid:\n{log}"
        );
        assert!(log.contains("proxy=unset"), "{policy}:\n{log}");
        assert!(log.contains("host=unreachable"), "{policy}:\n{log}");
        assert!(
            host_port.accept().is_err(),
            "{policy}: nothing reached the host"
        );
        if let Some(note) = note {
            assert!(log.contains(note), "{policy}:\n{log}");
        }
    }
    let mut run = korvus(data.path());
    run.args(["run", "--network", allow, "--network-required"])
        .args(["--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("offline");
    let out = crate::support::output(&mut through(&["runuser", "-u", &user.name, "--"], &run));
    let said = format!("{}{}", stdout(&out), crate::support::stderr(&out));
    assert_eq!(out.status.code(), Some(3), "{said}");
    let log = ok(korvus(data.path()).args(["export", &session_id(&stdout(&out))]));
    assert!(log.contains("needs root"), "the cause is named:\n{log}");
    assert!(!log.contains("iface="), "the agent never started:\n{log}");
}

/// A model server on the host's loopback for one call: records the
/// request head, answers with usage.
fn one_call_model_server() -> (u16, std::thread::JoinHandle<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let served = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("a call");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let body = r#"{"model":"m","usage":{"input_tokens":7,"output_tokens":3}}"#;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(answer.as_bytes()).expect("answer");
        String::from_utf8_lossy(&got).into_owned()
    });
    (port, served)
}

/// korvus not root: the model gateway listens inside the agent's own
/// network namespace (the agent's child opens the socket there and sends
/// it back), so an agent with no network at all reaches its model, with
/// the run's token; the server gets the real key, which the agent never
/// sees, and the call is metered.
#[test]
fn not_root_the_model_gateway_listens_inside_the_agents_namespace() {
    if !can_make_users() {
        return;
    }
    let user = ThrowawayUser::make();
    let data = tempfile::tempdir().expect("temp dir");
    let (port, served) = one_call_model_server();
    let agent = script(
        data.path(),
        "model.sh",
        r#"
echo "key=${KORVUS_HOST_TEST_KEY:-unset}"
curl -s -m 10 -H "Authorization: Bearer $KORVUS_MODEL_TOKEN" -d '{"input":"hi"}' "$KORVUS_MODEL_URL/v1/responses" > answer.txt
echo "url=$KORVUS_MODEL_URL"
echo '# R' > report.md
"#,
    );
    user.own(data.path());
    let mut run = korvus(data.path());
    run.args(["run", "--network", "none", "--network-required"])
        .args(["--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .args(["--model-endpoint", &format!("http://127.0.0.1:{port}")])
        .args(["--model-key-var", "KORVUS_HOST_TEST_KEY"])
        .arg("call the model")
        .env("KORVUS_HOST_TEST_KEY", "sk-host-real-51f0");
    let out = ok(&mut through(&["runuser", "-u", &user.name, "--"], &run));
    let head = served.join().expect("the server");
    assert!(
        head.contains("authorization: Bearer sk-host-real-51f0"),
        "the server got the real key:\n{head}"
    );
    let log = ok(korvus(data.path()).args(["export", &session_id(&out)]));
    assert!(log.contains("url=http://127.0.0.1:"), "{log}");
    assert!(
        log.contains("\"type\":\"metered_usage\",\"input_tokens\":7,\"output_tokens\":3"),
        "{log}"
    );
    assert!(
        !log.contains("sk-host-real"),
        "the key is not in the log:\n{log}"
    );
    assert!(
        log.contains("key=unset"),
        "the agent has no key variable:\n{log}"
    );
}
