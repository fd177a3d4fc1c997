//! `GET /metrics` of `korvus serve`: after a demo run and a cancel, the
//! series `docs/operations.md` names, with the expected counts; no label
//! value is an id; behind the token, or without it on `--metrics-listen`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve::{Server, TOKEN};
use crate::support::korvus;

/// `name{labels} value` lines of a Prometheus text page, by series.
fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// Polls the session until its row is terminal.
fn ended(server: &Server, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, row) = server.call("GET", &format!("/api/sessions/{id}"), None);
        let status = row["status"].as_str().unwrap_or_default();
        if ["completed", "failed", "cancelled"].contains(&status) {
            return row;
        }
        assert!(Instant::now() < deadline, "never ended: {row}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A plain GET without a token: `(status, body)`.
fn get(hostport: &str, path: &str) -> (u16, String) {
    call(hostport, "GET", path)
}

/// A plain request without a token or body: `(status, body)`.
fn call(hostport: &str, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(hostport).expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        rest.to_owned(),
    )
}

#[test]
fn metrics_count_a_demo_run_and_a_cancel_without_ids() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), None, "0.2");
    let (_, incidents) = server.call("GET", "/api/incidents", None);
    let incident = incidents["items"][0]["id"].as_str().unwrap().to_owned();
    let create = |prompt: &str| {
        let body = format!(r#"{{"prompt": "{prompt}"}}"#);
        let path = format!("/api/incidents/{incident}/sessions");
        let (status, row) = server.call("POST", &path, Some(&body));
        assert_eq!(status, 201, "{row}");
        row["id"].as_str().unwrap().to_owned()
    };
    let done = create("why is the disk full?");
    assert_eq!(ended(&server, &done)["status"], "completed");
    let cancelled = create("and the network?");
    let (status, _) = server.call("POST", &format!("/api/sessions/{cancelled}/cancel"), None);
    assert_eq!(status, 200);
    assert_eq!(ended(&server, &cancelled)["status"], "cancelled");

    // A row is terminal before its run's clean-up and settle signal end:
    // scrape until no run of the server is active.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let (status, text) = server.call_raw("GET", "/metrics", None);
        assert_eq!(status, 200, "{text}");
        if series(&text).get("korvus_runs_active") == Some(&0.0) {
            break text;
        }
        assert!(Instant::now() < deadline, "runs still active:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let got = series(&text);
    let value = |s: &str| {
        got.get(s)
            .copied()
            .unwrap_or_else(|| panic!("no {s} in\n{text}"))
    };
    assert_eq!(value("korvus_runs_started_total"), 2.0);
    assert_eq!(value("korvus_runs_active"), 0.0);
    assert_eq!(value("korvus_sessions_queued{pool=\"default\"}"), 0.0);
    assert_eq!(
        value("korvus_sessions_settled_total{exit_reason=\"completed\"}"),
        1.0
    );
    assert_eq!(
        value("korvus_sessions_settled_total{exit_reason=\"cancelled\"}"),
        1.0
    );
    assert_eq!(value("korvus_cancels_total{via=\"local\"}"), 1.0);
    assert_eq!(value("korvus_cancel_duration_seconds_count"), 1.0);
    assert_eq!(value("korvus_run_duration_seconds_count"), 2.0);
    for phase in ["prepare", "execute", "land", "settle", "cleanup"] {
        let name = format!("korvus_run_phase_duration_seconds_count{{phase=\"{phase}\"}}");
        assert_eq!(value(&name), 2.0, "{name}");
    }
    assert!(value("korvus_persist_files_total") >= 1.0);
    assert!(value("korvus_log_events_appended_total") > 0.0);
    assert!(value("korvus_heartbeats_total{outcome=\"ok\"}") >= 1.0);
    for id in [&done, &cancelled, &incident] {
        assert!(!text.contains(id.as_str()), "an id in a label:\n{text}");
    }
    // Behind the token like the API.
    let hostport = server.base.trim_start_matches("http://").to_owned();
    assert_eq!(get(&hostport, "/metrics").0, 401);
}

#[test]
fn metrics_listen_serves_them_on_their_own_address_without_the_token() {
    let data = tempfile::tempdir().unwrap();
    let mut child = korvus(data.path())
        .env("KORVUS_TOKEN", TOKEN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut metrics, mut api) = (None, None);
    while metrics.is_none() || api.is_none() {
        let line = lines
            .next()
            .expect("korvus serve prints its addresses")
            .unwrap();
        if let Some(url) = line.strip_prefix("korvus serve: metrics on http://") {
            metrics = Some(url.trim_end_matches("/metrics").to_owned());
        }
        if let Some(url) = line.strip_prefix("korvus serve: listening on http://") {
            api = Some(url.trim().to_owned());
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let (status, text) = get(metrics.as_deref().unwrap(), "/metrics");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("korvus_sessions_queued{pool=\"default\"} 0"),
        "{text}"
    );
    // Its errors are JSON like the API's.
    for (method, path, status, code) in [
        ("GET", "/nope", 404, "no_route"),
        ("POST", "/metrics", 405, "method_not_allowed"),
    ] {
        let (got, text) = call(metrics.as_deref().unwrap(), method, path);
        assert_eq!(got, status, "{method} {path}: {text}");
        let body: Value = serde_json::from_str(&text).expect(&text);
        assert_eq!(body["code"], code, "{text}");
    }
    let server = Server {
        child,
        base: format!("http://{}", api.unwrap()),
    };
    // Not beside the API then.
    let (status, _) = server.call_raw("GET", "/metrics", None);
    assert_ne!(status, 200);
}
