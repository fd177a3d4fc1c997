//! `korvus serve --webhook`: completion webhooks received by a receiver
//! that verifies each signature with the Standard Webhooks reference
//! library (`standardwebhooks` from PyPI, installed by `cargo xtask test`):
//! 100 sessions give 100 deliveries; a receiver down for 30 s gets every
//! event once it is back; a replica killed mid-delivery loses none — each
//! arrives at least once, with the same id, never for a stale fence.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve::Server;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The tools' Python, or `None` (a loud skip) outside `cargo xtask test`.
fn python() -> Option<PathBuf> {
    let required = std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() == Ok("1");
    if let Some(p) = std::env::var_os("KORVUS_API_TOOLS_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let why = std::env::var("KORVUS_API_TOOLS_UNAVAILABLE")
        .unwrap_or_else(|_| "KORVUS_API_TOOLS_PYTHON is not set".to_owned());
    assert!(!required, "the webhook tests need standardwebhooks ({why})");
    eprintln!("SKIPPED: the webhook tests need standardwebhooks ({why}); run `cargo xtask test`");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The receiver on `port`, recording to `record`, holding each answer
/// `hold` seconds; killed on drop.
struct Receiver(Child);

impl Receiver {
    fn start(python: &Path, port: u16, record: &Path, hold: &str) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/webhook_receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .arg(SECRET)
            .arg(record)
            .arg(hold)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the receiver starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "receiver ready");
        Self(child)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every verified delivery: `(id, body data)`, in arrival order; panics
/// on a delivery that did not verify.
fn received(record: &Path) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            assert!(v.get("bad").is_none(), "a delivery did not verify: {v}");
            (v["id"].as_str().unwrap().to_owned(), v["data"].clone())
        })
        .collect()
}

/// Waits until the deliveries name `n` ids.
fn wait_for_ids(record: &Path, n: usize, limit: Duration) -> Vec<(String, Value)> {
    let deadline = Instant::now() + limit;
    loop {
        let got = received(record);
        let ids: BTreeSet<&String> = got.iter().map(|(id, _)| id).collect();
        if ids.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} ids after {limit:?}",
            ids.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A serve process delivering webhooks to `port`.
fn replica(data: &Path, port: u16, timeout: &str) -> Server {
    let url = format!("http://127.0.0.1:{port}/hook");
    Server::start_with(
        data,
        None,
        "0",
        &[
            "--webhook",
            &url,
            "--webhook-secret",
            SECRET,
            "--webhook-timeout",
            timeout,
        ],
    )
}

/// Creates `n` sessions in `incident` (again after a full queue) and
/// waits until each has ended; their rows.
fn run_sessions(server: &Server, incident: &str, n: usize) -> Vec<Value> {
    let mut ids = Vec::new();
    while ids.len() < n {
        let body = format!(r#"{{"prompt": "check {}"}}"#, ids.len());
        let path = format!("/api/incidents/{incident}/sessions");
        match server.call("POST", &path, Some(&body)) {
            (201, row) => ids.push(row["id"].as_str().unwrap().to_owned()),
            (429, _) => std::thread::sleep(Duration::from_millis(200)),
            other => panic!("create: {other:?}"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    ids.iter()
        .map(|id| loop {
            let (_, row) = server.call("GET", &format!("/api/sessions/{id}"), None);
            if row["status"] != "running" {
                return row;
            }
            assert!(Instant::now() < deadline, "session {id} did not end");
            std::thread::sleep(Duration::from_millis(100));
        })
        .collect()
}

fn incident(server: &Server) -> String {
    let (status, row) = server.call("POST", "/api/incidents", Some(r#"{"title": "hooks"}"#));
    assert_eq!(status, 201);
    row["id"].as_str().unwrap().to_owned()
}

/// Each row's event: delivered with the id of its run, for its fence.
fn assert_one_event_per_row(rows: &[Value], got: &[(String, Value)]) {
    let by_id: BTreeMap<&String, &Value> = got.iter().map(|(id, d)| (id, d)).collect();
    for row in rows {
        let id = format!(
            "{}.{}.{}.ended",
            row["id"].as_str().unwrap(),
            row["revision"],
            row["fence"]
        );
        let data = by_id.get(&id).unwrap_or_else(|| panic!("no delivery {id}"));
        assert_eq!(data["fence"], row["fence"], "{id}");
        assert_eq!(data["status"], row["status"], "{id}");
        assert_eq!(data["session_id"], row["id"]);
    }
    for (id, data) in got {
        let row = rows.iter().find(|r| r["id"] == data["session_id"]);
        if let Some(row) = row {
            assert_eq!(data["fence"], row["fence"], "{id}: never a stale fence");
        }
    }
}

#[test]
fn a_hundred_sessions_give_a_hundred_verified_deliveries_and_an_outage_loses_none() {
    let Some(python) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let record = data.path().join("received.jsonl");
    let port = free_port();
    let receiver = Receiver::start(&python, port, &record, "0");
    let server = replica(data.path(), port, "5");
    let inc = incident(&server);
    let rows = run_sessions(&server, &inc, 100);
    let got = wait_for_ids(&record, 100, Duration::from_secs(60));
    assert_one_event_per_row(&rows, &got);
    let ids: BTreeSet<&String> = got.iter().map(|(id, _)| id).collect();
    assert_eq!(ids.len(), 100);

    // The receiver goes away for 30 s while sessions end.
    drop(receiver);
    let during = run_sessions(&server, &inc, 10);
    std::thread::sleep(Duration::from_secs(30));
    let before = received(&record).len();
    let _back = Receiver::start(&python, port, &record, "0");
    let got = wait_for_ids(&record, 110, Duration::from_secs(120));
    assert!(got.len() > before);
    let all: Vec<Value> = rows.into_iter().chain(during).collect();
    assert_one_event_per_row(&all, &got);
}

#[test]
fn a_replica_killed_mid_delivery_loses_no_webhook() {
    let Some(python) = python() else { return };
    let data = tempfile::tempdir().unwrap();
    let record = data.path().join("received.jsonl");
    let port = free_port();
    // No receiver yet: the events wait in the outbox.
    let mut a = replica(data.path(), port, "2");
    let inc = incident(&a);
    let rows = run_sessions(&a, &inc, 10);
    // A receiver that holds every answer: replica A's deliveries are in
    // flight when it is killed.
    let _receiver = Receiver::start(&python, port, &record, "1.5");
    let deadline = Instant::now() + Duration::from_secs(60);
    while received(&record).is_empty() {
        assert!(Instant::now() < deadline, "replica A delivered nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let in_flight: BTreeSet<String> = received(&record).into_iter().map(|(id, _)| id).collect();
    // Replica B takes over once A's claims expire (3 × the 2 s timeout).
    let _b = replica(data.path(), port, "2");
    let got = wait_for_ids(&record, 10, Duration::from_secs(120));
    assert_one_event_per_row(&rows, &got);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = received(&record);
        let again = in_flight
            .iter()
            .filter(|id| got.iter().filter(|(g, _)| g == *id).count() >= 2)
            .count();
        if again == in_flight.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "what A had in flight was not delivered again by B: {again} of {}",
            in_flight.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
