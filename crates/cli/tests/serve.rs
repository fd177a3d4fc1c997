//! `korvus serve` as a process: its token rules, its API behind the token,
//! and its shutdown — SIGTERM cancels the running sessions, their reports
//! land, and the process exits 0.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{korvus, ok, output, stderr};

pub(crate) const TOKEN: &str = "browser-test-token-0123456789abcdef";

/// A `korvus serve` process; stopped with SIGTERM (then killed) on drop.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Server {
    /// Serves `data` with the demo agent (or `agent`, run by `sh`), the
    /// demo agent paced at `pause` seconds per step, on a free loopback port.
    pub(crate) fn start(data: &Path, agent: Option<&Path>, pause: &str) -> Self {
        Self::start_with(data, agent, pause, &[])
    }

    /// As [`start`](Self::start), with more `serve` arguments.
    pub(crate) fn start_with(
        data: &Path,
        agent: Option<&Path>,
        pause: &str,
        extra: &[&str],
    ) -> Self {
        Self::start_in(data, agent, pause, extra, &[])
    }

    /// As [`start_with`](Self::start_with), with environment variables
    /// (a database URL, say).
    pub(crate) fn start_in(
        data: &Path,
        agent: Option<&Path>,
        pause: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = korvus(data);
        cmd.envs(env.iter().copied())
            .env("KORVUS_TOKEN", TOKEN)
            .env("KORVUS_DEMO_PAUSE", pause)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra);
        if let Some(agent) = agent {
            cmd.args(["--agent", "sh", "--agent-arg"]).arg(agent);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("korvus serve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let base = loop {
            let line = lines
                .next()
                .expect("korvus serve printed its address")
                .unwrap();
            if let Some(url) = line.strip_prefix("korvus serve: listening on ") {
                break url.trim().to_owned();
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self { child, base }
    }

    /// `SIGTERM`, then the exit status within 30 s.
    pub(crate) fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// One API call with the bearer token: `(status, JSON body)`.
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, text) = self.call_raw(method, path, body);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// One API call with the bearer token: `(status, body)`.
    pub(crate) fn call_raw(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let hostport = self.base.trim_start_matches("http://");
        let mut s = TcpStream::connect(hostport).expect("connect");
        let body = body.unwrap_or("");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, rest) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, rest.to_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.terminate().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn a_short_token_is_refused_before_anything_starts() {
    let data = tempfile::tempdir().unwrap();
    let out = output(korvus(data.path()).env("KORVUS_TOKEN", "short").args([
        "serve",
        "--listen",
        "127.0.0.1:0",
    ]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("at least 16 bytes"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn sigterm_cancels_running_sessions_lands_their_reports_and_exits_cleanly() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path(), None, "0.5");
    let (status, incidents) = server.call("GET", "/api/incidents", None);
    assert_eq!(status, 200);
    let incident = incidents["items"][0]["id"]
        .as_str()
        .expect("the demo incident")
        .to_owned();
    let (status, session) = server.call(
        "POST",
        &format!("/api/incidents/{incident}/sessions"),
        Some(r#"{"prompt": "why is the disk full?"}"#),
    );
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    // Wait until the agent is at work, then stop the server.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, log) = server.call_raw("GET", &format!("/api/sessions/{id}/log"), None);
        if log.contains("\"tool_call\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent never got going:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let exit = server.terminate().expect("korvus serve stops within 30 s");
    assert!(exit.success(), "{exit:?}");
    // Another process reads the rows: ended, with its report.
    let show = ok(korvus(data.path()).args(["show", &id]));
    assert!(show.contains("status     cancelled"), "{show}");
    let rev = show
        .lines()
        .find(|l| l.trim_start().starts_with("rev 1"))
        .unwrap_or_else(|| panic!("no report row:\n{show}"));
    assert!(
        rev.contains("cancelled") && !rev.contains("(no report.md)"),
        "{show}"
    );
}

#[test]
fn a_half_sent_request_head_is_closed_after_the_header_read_timeout() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(data.path(), None, "0.2", &["--header-read-timeout", "1"]);
    let hostport = server.base.trim_start_matches("http://");
    let started = Instant::now();
    let mut s = TcpStream::connect(hostport).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET /api/incidents HTTP/1.1\r\nHost: {hostport}\r\n").as_bytes())
        .unwrap();
    let mut rest = Vec::new();
    let read = s.read_to_end(&mut rest);
    let took = started.elapsed();
    // Closed (EOF or a reset), not timed out by our own read deadline.
    let timed_out = read
        .as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock);
    assert!(
        !timed_out && took < Duration::from_secs(5),
        "{read:?} after {took:?}"
    );
    // The server still answers whole requests.
    assert_eq!(server.call("GET", "/api/incidents", None).0, 200);
}
