//! Benchmark 14: Server-Sent Events fan-out — many subscribers following one
//! session through `korvus-http`: events delivered per second, resident
//! memory per subscriber, and how many log readers serve them.
//!
//! The server runs in a child process (this binary's hidden `fanout-child`
//! command), so its resident memory is its own; the subscribers are plain
//! HTTP/1.1 connections from this process. The baseline is the least a
//! fan-out can do: the same number of subscribers of a bare tokio broadcast
//! channel streamed as SSE by the same axum server, with the same frames.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use axum::response::sse::{Event as SseEvent, Sse};
use futures::StreamExt;
use korvus_log::{Event, EventKind};
use korvus_runner::{RunContext, RunError, RunOutcome, Runner};
use korvus_session::{CreateSession, Manager};
use korvus_store::{Counters, MemoryStore, NewIncident, Store};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, Notify};

use crate::report::{Goal, Row};
use crate::sql::ms;
use crate::Bench;

/// Logs one event, waits for the gate, logs `events` more, completes.
#[derive(Debug)]
struct Burst {
    gate: Arc<Notify>,
    events: usize,
}

fn note(i: usize) -> Event {
    Event::new(EventKind::Note {
        text: format!("fan-out event {i} with a line of text like an agent's"),
    })
}

#[async_trait]
impl Runner for Burst {
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
        let fail = |e: korvus_log::LogError| RunError::msg(e.to_string());
        ctx.log.append(&[note(0)]).await.map_err(fail)?;
        self.gate.notified().await;
        for i in 1..=self.events {
            ctx.log.append(&[note(i)]).await.map_err(fail)?;
        }
        Ok(RunOutcome::completed(Counters::default()))
    }

    async fn resume(&self, ctx: RunContext, _message: String) -> Result<RunOutcome, RunError> {
        self.run(ctx).await
    }
}

/// Raises the open-file limit to its hard maximum: a thousand sockets.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
}

/// The child: serves `kind` (`ours` or `bare`), prints `{"port","path"}`,
/// then on `go` prints `{"followers"}` and emits `events` events.
pub(crate) fn child(kind: &str, events: usize) -> Result<()> {
    raise_fd_limit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(kind, events))
}

async fn serve(kind: &str, events: usize) -> Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let gate = Arc::new(Notify::new());
    let (bare_tx, _) = broadcast::channel::<Option<Arc<str>>>(1024);
    let store = Arc::new(MemoryStore::new());
    let runner = Burst {
        gate: Arc::clone(&gate),
        events,
    };
    let manager = Manager::builder(store.clone(), Arc::new(runner))
        .max_running(usize::MAX)
        .build();
    let (router, stats) = korvus_http::Api::default()
        .view(false)
        .router_with_stats(manager.clone());
    let tx = bare_tx.clone();
    let app = router.route(
        "/bare",
        axum::routing::get(move || {
            let rx = tx.subscribe();
            async move { bare_stream(rx) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let path = if kind == "ours" {
        let incident = store
            .create_incident(NewIncident {
                title: "fan-out".into(),
                workspace: None,
            })
            .await?;
        let s = manager
            .create(CreateSession::new(incident.id, "burst"))
            .await?;
        let log = korvus_log::LogId::from_uuid(s.id.as_uuid());
        while manager.turn_log().stat(log).await?.event_count.unwrap_or(0) < 1 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        format!("/api/sessions/{}/events", s.id)
    } else {
        "/bare".to_owned()
    };
    println!("{}", serde_json::json!({ "port": port, "path": path }));
    let mut line = String::new();
    tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut line)).await??;
    println!("{}", serde_json::json!({ "followers": stats.followers() }));
    if kind == "ours" {
        gate.notify_one();
        manager.wait().await;
    } else {
        for i in 1..=events {
            let json = serde_json::to_string(&note(i))?;
            // Paced like the log's appends: one frame at a time.
            let _ = bare_tx.send(Some(json.into()));
            tokio::task::yield_now().await;
        }
        let _ = bare_tx.send(None);
    }
    // Wait for the parent to read everything, then exit.
    let mut line = String::new();
    tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut line)).await??;
    Ok(())
}

type BareStream =
    Sse<futures::stream::BoxStream<'static, Result<SseEvent, std::convert::Infallible>>>;

/// The baseline stream: a first frame, then whatever the channel carries.
fn bare_stream(rx: broadcast::Receiver<Option<Arc<str>>>) -> BareStream {
    let first = futures::stream::once(async { Ok(SseEvent::default().id("0").data("{}")) });
    let rest = futures::stream::unfold((rx, 1u64, false), |(mut rx, id, done)| async move {
        if done {
            return None;
        }
        loop {
            match rx.recv().await {
                Ok(Some(json)) => {
                    let e = SseEvent::default().id(id.to_string()).data(&*json);
                    return Some((Ok(e), (rx, id + 1, false)));
                }
                Ok(None) | Err(broadcast::error::RecvError::Closed) => {
                    let e = SseEvent::default().event("end").data("{}");
                    return Some((Ok(e), (rx, id, true)));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
            }
        }
    });
    Sse::new(first.chain(rest).boxed())
}

#[derive(Debug, Deserialize)]
struct Ready {
    port: u16,
    path: String,
}

#[derive(Debug, Deserialize)]
struct Followers {
    followers: usize,
}

/// What one measurement gave.
#[derive(Debug, Clone, Copy)]
struct Sample {
    events_per_sec: f64,
    kib_per_subscriber: f64,
    followers: usize,
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// A subscriber: connects, and resolves once when it saw its first frame
/// and once when it saw `end`, counting frames.
async fn subscribe(port: u16, path: String, first: tokio::sync::mpsc::Sender<()>) -> Result<u64> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    let mut frames = 0u64;
    let mut announced = false;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            bail!("the stream closed before its end event");
        }
        let kept = tail.len();
        tail.extend_from_slice(&buf[..n]);
        frames += count_new(&tail, b"\nid: ", kept);
        if !announced && frames > 0 {
            announced = true;
            let _ = first.send(()).await;
        }
        if find(&tail, b"event: end").is_some() {
            return Ok(frames);
        }
        // Keep a marker's length less one, so a marker split between two
        // reads is still found (and none is counted twice).
        let keep = tail.len().saturating_sub(b"event: end".len() - 1);
        tail.drain(..keep);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Occurrences of `needle` in `hay` that end past its first `kept` bytes
/// (the ones inside them were counted with the previous read).
fn count_new(hay: &[u8], needle: &[u8], kept: usize) -> u64 {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(at, w)| *w == needle && at + needle.len() > kept)
        .count() as u64
}

/// One measurement: a fresh server child of `kind`, `n` subscribers,
/// `events` events after each saw its first frame.
async fn measure(kind: &str, n: usize, events: usize) -> Result<Sample> {
    let mut child: Child = Command::new(std::env::current_exe()?)
        .args(["fanout-child", kind, &events.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the fan-out child")?;
    // A korvus session's log begins with its prompt (a user message):
    // one frame more than the bare channel's.
    let prompt = u64::from(kind == "ours");
    let result = drive(&mut child, n, events, prompt).await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

async fn drive(child: &mut Child, n: usize, events: usize, prompt: u64) -> Result<Sample> {
    let pid = child.id();
    let mut stdin: ChildStdin = child.stdin.take().context("no stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
    let mut next_line =
        move || -> Result<String> { Ok(lines.next().context("the fan-out child exited")??) };
    let ready: Ready = serde_json::from_str(&next_line()?)?;
    let before = rss_kib(pid)?;
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel(n);
    let mut subs = Vec::with_capacity(n);
    for _ in 0..n {
        subs.push(tokio::spawn(subscribe(
            ready.port,
            ready.path.clone(),
            first_tx.clone(),
        )));
    }
    for _ in 0..n {
        first_rx
            .recv()
            .await
            .context("a subscriber failed before its first frame")?;
    }
    let after = rss_kib(pid)?;
    let started = Instant::now();
    stdin.write_all(b"go\n")?;
    let followers: Followers = serde_json::from_str(&next_line()?)?;
    for sub in subs {
        let frames = sub.await??;
        // The events, the prompt (ours) and the end frame.
        let expected = events as u64 + 1 + prompt;
        if frames != expected {
            bail!("a subscriber got {frames} frames, not {expected}");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    stdin.write_all(b"done\n")?;
    Ok(Sample {
        events_per_sec: (n * events) as f64 / elapsed,
        kib_per_subscriber: after.saturating_sub(before) as f64 / n as f64,
        followers: followers.followers,
    })
}

pub(crate) async fn fanout(b: &mut Bench) -> Result<Vec<Row>> {
    raise_fd_limit();
    let (n, events, runs) = if b.quick { (20, 50, 1) } else { (1000, 200, 3) };
    let mut rate = Vec::new();
    let mut memory = Vec::new();
    let mut readers = Vec::new();
    let started = Instant::now();
    for _ in 0..runs {
        let base = measure("bare", n, events).await?;
        let ours = measure("ours", n, events).await?;
        rate.push((base.events_per_sec, ours.events_per_sec));
        memory.push((base.kib_per_subscriber, ours.kib_per_subscriber));
        readers.push((1.0, ours.followers as f64));
    }
    b.details.insert(
        "14_fanout".into(),
        serde_json::json!({ "subscribers": n, "events": events, "ms": ms(started.elapsed()) }),
    );
    Ok(vec![
        Row::paired(
            format!("14 SSE fan-out: {n} subscribers of one session, events delivered"),
            "bare broadcast → SSE",
            "korvus-http events",
            "events/s",
            &rate,
            Goal::None,
        )
        .note(format!(
            "{events} events appended one by one after every subscriber had its first frame, until each saw `end`; events × subscribers / time; higher is better (ratio < 1: slower than bare)"
        )),
        Row::paired(
            format!("14 SSE fan-out: {n} subscribers, RSS per subscriber"),
            "bare broadcast → SSE",
            "korvus-http events",
            "KiB",
            &memory,
            Goal::None,
        )
        .note("the server child's VmRSS growth from before the first connection until each subscriber had its first frame, / subscribers"),
        Row::paired(
            format!("14 SSE fan-out: log readers for {n} subscribers"),
            "one",
            "followers",
            "readers",
            &readers,
            Goal::ValueAtMost { max: 1.0, ratio_max: None },
        )
        .note("sessions with a follower task while every subscriber is connected (`Stats::followers`)"),
    ])
}
