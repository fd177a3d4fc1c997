//! The examples `docs/embedding.md` shows (`crates/agents/examples/`), built
//! with the tests and run as a user would run them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{korvus, ok};

/// The built example `name` of korvus-agents: `cargo test --workspace`
/// builds it beside the test binary's `deps/`; a run of this crate's tests
/// alone builds it here first.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join("examples").join(name);
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "-p", "korvus-agents", "--example", name])
            .status()
            .expect("cargo runs");
        assert!(built.success(), "building the example {name} failed");
    }
    assert!(path.is_file(), "example {} not built", path.display());
    path
}

/// An executable agent script in `dir`.
fn agent(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("agent.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// One request with the `x-user` header the example's auth wants.
fn call(addr: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nx-user: me\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        serde_json::from_str(rest).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn the_embedding_example_runs_a_session_on_a_fresh_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    // A data dir that does not exist yet: the example creates it.
    let data = tmp.path().join("fresh/data");
    let found = agent(tmp.path(), "echo '# found it' > report.md\n");
    let out = Command::new(example("embed"))
        .arg(&data)
        .arg(&found)
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(": completed (completed)"), "{stdout}");

    // A relative agent path is resolved against the working directory
    // (the agent runs in its scratch dir); a failed session is an error
    // naming its cause.
    let failing = tmp.path().join("fails");
    std::fs::create_dir_all(&failing).unwrap();
    agent(&failing, "echo 'no such disk' >&2\nexit 3\n");
    let out = Command::new(example("embed"))
        .current_dir(&failing)
        .arg(tmp.path().join("data2"))
        .arg("agent.sh")
        .output()
        .expect("the example runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("the session ended failed"), "{stderr}");
    assert!(!stderr.contains("runner_failed"), "the agent ran: {stderr}");
}

#[test]
fn the_http_example_stops_on_sigterm_with_its_sessions_cancelled_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let agent = agent(
        tmp.path(),
        "echo '# partial' > report.md\necho 'agent is working'\nsleep 600 & wait\n",
    );
    let mut server = Command::new(example("serve_http"))
        .arg(&data)
        .arg(&agent)
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("its address").unwrap();
        if let Some(url) = line.strip_prefix("serving on http://") {
            break url.trim_end_matches("/korvus/").to_owned();
        }
    };
    let (status, _) = call(&addr, "GET", "/korvus/api/incidents", "");
    assert_eq!(status, 200);
    let mut unauthorised = TcpStream::connect(&addr).unwrap();
    unauthorised
        .write_all(b"GET /korvus/api/incidents HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = String::new();
    unauthorised.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    let (status, incident) = call(&addr, "POST", "/korvus/api/incidents", r#"{"title":"t"}"#);
    assert_eq!(status, 201, "{incident}");
    let id = incident["id"].as_str().unwrap().to_owned();
    let (status, session) = call(
        &addr,
        "POST",
        &format!("/korvus/api/incidents/{id}/sessions"),
        r#"{"prompt":"why?"}"#,
    );
    assert!(status == 201 || status == 202, "{status} {session}");
    let sid = session["id"].as_str().unwrap().to_owned();
    // Wait until the agent works, then stop the server.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = TcpStream::connect(&addr).unwrap();
        let req = format!(
            "GET /korvus/api/sessions/{sid}/log HTTP/1.1\r\nHost: {addr}\r\nx-user: me\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut log = String::new();
        s.read_to_string(&mut log).unwrap();
        if log.contains("agent is working") {
            break;
        }
        assert!(Instant::now() < deadline, "the agent never worked: {log}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = nix::unistd::Pid::from_raw(server.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the example did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        lines.any(|l| l.is_ok_and(|l| l == "stopped")),
        "it stopped the manager and closed"
    );
    // Its session ended cancelled, with its report row.
    let show = ok(korvus(&data).args(["show", &sid]));
    assert!(show.contains("status     cancelled"), "{show}");
    assert!(show.contains("rev 1   cancelled"), "{show}");
}
