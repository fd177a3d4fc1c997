//! Benchmark 28: a streamed 1 MiB model answer through korvus's model
//! gateway against the same answer fetched directly. An agent (`sh` and
//! `curl`, on the host's network) fetches it `calls` times from an
//! in-process upstream (plain HTTP, 1 MiB of Responses API events ending
//! in `response.completed` with its usage): one session straight from the
//! upstream, one through the gateway, alternating. curl reports the time
//! to the first and to the last byte; this process's CPU time over each
//! session, whose difference is the gateway's (the upstream and the
//! manager do the same work in both), per MiB relayed.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use korvus_command::{CommandRunner, ModelGateway, Network};
use korvus_log::{Access, EventKind, LogId, MemoryLog, TurnLog as _};
use korvus_session::{CreateSession, Manager};
use korvus_store::{MemoryStore, NewIncident, Store as _};
use korvus_workspace::ScratchRoot;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::report::{quantile, Goal, Row};
use crate::Bench;

/// The answer's size.
const ANSWER: usize = 1024 * 1024;
const KEY_VAR: &str = "KORVUS_BENCH_MODEL_KEY";

/// One session's measurements: per call (first byte, last byte) in ms,
/// and this process's CPU time over the session.
struct Session {
    calls: Vec<(f64, f64)>,
    cpu_ms: f64,
}

pub(crate) async fn gateway(b: &mut Bench) -> Result<Vec<Row>> {
    let (rounds, calls) = if b.quick { (1, 5) } else { (5, 40) };
    let upstream = upstream().await?;
    // Not measured: the first session pays the process's one-time costs.
    one_session(b, &upstream, true, 2).await?;
    let mut pairs: [Vec<(f64, f64)>; 5] = Default::default();
    for _ in 0..rounds {
        let direct = one_session(b, &upstream, false, calls).await?;
        let served = one_session(b, &upstream, true, calls).await?;
        let q = |s: &Session, last: bool, p: f64| {
            let v: Vec<f64> = s
                .calls
                .iter()
                .map(|c| if last { c.1 } else { c.0 })
                .collect();
            quantile(&v, p)
        };
        pairs[0].push((q(&direct, false, 0.5), q(&served, false, 0.5)));
        pairs[1].push((q(&direct, false, 0.99), q(&served, false, 0.99)));
        pairs[2].push((q(&direct, true, 0.5), q(&served, true, 0.5)));
        pairs[3].push((q(&direct, true, 0.99), q(&served, true, 0.99)));
        let mib = calls as f64 * ANSWER as f64 / (1024.0 * 1024.0);
        pairs[4].push((direct.cpu_ms / mib, served.cpu_ms / mib));
    }
    let row = |what: &str, i: usize, unit: &str| {
        Row::paired(
            format!("28 a streamed 1 MiB model answer: {what}"),
            "straight from the upstream",
            "through the model gateway",
            unit,
            &pairs[i],
            Goal::None,
        )
    };
    Ok(vec![
        row("time to first byte, p50", 0, "ms"),
        row("time to first byte, p99", 1, "ms"),
        row("time to last byte, p50", 2, "ms"),
        row("time to last byte, p99", 3, "ms"),
        row("CPU of this process per MiB relayed", 4, "ms").note(format!(
            "{calls} calls per session, quantiles per session; CPU: user + system time of this \
             process (manager, in-process upstream, and the gateway on the right), 10 ms \
             ticks; the gateway's own cost is the difference"
        )),
    ])
}

/// An upstream on 127.0.0.1 answering every request with the 1 MiB stream;
/// its base URL.
async fn upstream() -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut body = Vec::with_capacity(ANSWER + 256);
    let delta = format!(
        "data: {{\"type\":\"response.output_text.delta\",\"delta\":\"{}\"}}\n\n",
        "x".repeat(960)
    );
    while body.len() + delta.len() < ANSWER - 200 {
        body.extend_from_slice(delta.as_bytes());
    }
    let done = "data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":250000}}}\n\n";
    body.extend_from_slice(done.as_bytes());
    body.resize(ANSWER, b'\n');
    let body: Arc<[u8]> = body.into();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve(conn, Arc::clone(&body)));
        }
    });
    Ok(url)
}

/// Reads one request (head and `Content-Length` body) and answers it.
async fn serve(mut conn: tokio::net::TcpStream, body: Arc<[u8]>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let Ok(n) = conn.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                break;
            }
        }
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    if conn.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for chunk in body.chunks(16 * 1024) {
        if conn.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// One session fetching the answer `calls` times, through the gateway or
/// straight from `upstream`.
async fn one_session(b: &Bench, upstream: &str, served: bool, calls: usize) -> Result<Session> {
    let root = b.work.join(format!("gateway-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&root)?;
    let (url, auth) = if served {
        (
            "$KORVUS_MODEL_URL",
            "Authorization: Bearer $KORVUS_MODEL_TOKEN",
        )
    } else {
        (upstream, "Authorization: Bearer direct")
    };
    let script = format!(
        "i=0; while [ $i -lt {calls} ]; do i=$((i+1)); \
         curl -sf -o /dev/null -w 't %{{time_starttransfer}} %{{time_total}}\\n' \
         -H \"{auth}\" -H 'content-type: application/json' -d '{{\"stream\":true}}' \
         \"{url}/v1/responses\" || echo failed; done; echo '# R' > report.md"
    );
    let mut runner = CommandRunner::new("sh")
        .arg("-c")
        .arg(script)
        .network(Network::host())
        .env_source(std::env::vars_os().chain([(KEY_VAR.into(), "sk-bench".into())]));
    if served {
        runner = runner.model_gateway(ModelGateway::openai(upstream, KEY_VAR));
    }
    let store = Arc::new(MemoryStore::new());
    let logs = Arc::new(MemoryLog::new());
    let manager = Manager::builder(store.clone(), Arc::new(runner))
        .turn_log(logs.clone())
        .scratch_root(ScratchRoot::supplied(&root))
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "gateway".into(),
            workspace: None,
        })
        .await?;
    let cpu0 = crate::lease::cpu_of("self", false);
    let session = manager
        .create(CreateSession::new(incident.id, "fetch"))
        .await?;
    let row = manager
        .await_settled(session.id, Duration::from_secs(600))
        .await?;
    let cpu_ms = (crate::lease::cpu_of("self", false) - cpu0) as f64;
    if row.exit_reason.as_deref() != Some("completed") {
        bail!("the session ended {row:?}");
    }
    let events = logs
        .open(LogId::from_uuid(session.id.as_uuid()), Access::Read)
        .await?
        .read(0, None)
        .await?;
    manager.stop().await;
    let _ = std::fs::remove_dir_all(&root);
    let mut measured = Vec::new();
    for event in events {
        let EventKind::Message { text, .. } = event.kind else {
            continue;
        };
        if text == "failed" {
            bail!("a call failed (through the gateway: {served})");
        }
        let Some(times) = text.strip_prefix("t ") else {
            continue;
        };
        let mut parts = times.split(' ').map(str::parse::<f64>);
        let first = parts.next().context("a first-byte time")??;
        let last = parts.next().context("a last-byte time")??;
        measured.push((first * 1000.0, last * 1000.0));
    }
    if measured.len() != calls {
        bail!("{} of {calls} calls measured", measured.len());
    }
    Ok(Session {
        calls: measured,
        cpu_ms,
    })
}
