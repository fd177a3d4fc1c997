//! `GET /api/sessions/{id}/events`: stored prefix, live events, resume with
//! `Last-Event-ID` exactly once, the `end` event after the terminal row, and
//! one follower however many subscribers.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use futures::StreamExt;
use korvus_runner::testing::ScriptRunner;
use korvus_runner::RunOutcome;
use korvus_store::Counters;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::support::{get, log_messages, post, request, settled, Env};

/// A runner that logs 5 messages, waits for one permit of `gate`, logs 5
/// more and completes.
fn gated(gate: Arc<Semaphore>) -> ScriptRunner {
    ScriptRunner::new(move |ctx, _| {
        let gate = Arc::clone(&gate);
        async move {
            log_messages(&ctx, 5).await;
            gate.acquire().await.unwrap().forget();
            for i in 5..10 {
                ctx.log
                    .append(&[korvus_log::Event::new(korvus_log::EventKind::Note {
                        text: format!("note {i}"),
                    })])
                    .await
                    .unwrap();
            }
            std::fs::write(ctx.scratch.as_ref().unwrap().join("report.md"), "# done\n").unwrap();
            Ok(RunOutcome::completed(Counters::default()))
        }
    })
}

/// One parsed SSE frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    Event { id: u64, data: Value },
    End(Value),
}

/// Reads SSE frames from a response body.
pub(crate) struct Reader {
    body: axum::body::BodyDataStream,
    buf: String,
}

impl Reader {
    pub(crate) async fn open(app: &axum::Router, uri: &str, last_event_id: Option<u64>) -> Self {
        let mut req = request(Method::GET, uri, None);
        if let Some(id) = last_event_id {
            req.headers_mut()
                .insert("last-event-id", id.to_string().parse().unwrap());
        }
        let response = app.clone().oneshot(req).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Self {
            body: response.into_body().into_data_stream(),
            buf: String::new(),
        }
    }

    /// The next frame, or `None` when the stream ended.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..at + 2).collect();
                if let Some(frame) = parse(&block) {
                    return Some(frame);
                }
                continue;
            }
            let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), self.body.next())
                .await
                .expect("an SSE frame within 20 s")?;
            self.buf
                .push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        }
    }

    /// Every frame up to and including `end`; asserts the stream then ends.
    pub(crate) async fn rest(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Some(f) = self.next().await {
            let end = matches!(f, Frame::End(_));
            out.push(f);
            if end {
                assert!(self.next().await.is_none(), "the stream goes on after end");
                return out;
            }
        }
        panic!("the stream ended without an end event: {out:?}");
    }
}

fn parse(block: &str) -> Option<Frame> {
    let (mut id, mut event, mut data) = (None, None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.parse::<u64>().unwrap());
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push_str(v);
        }
    }
    if data.is_empty() {
        return None; // a keep-alive comment
    }
    let data: Value = serde_json::from_str(&data).unwrap();
    match event.as_deref() {
        Some("end") => Some(Frame::End(data)),
        None => Some(Frame::Event {
            id: id.expect("every event has an id"),
            data,
        }),
        Some(other) => panic!("unexpected event {other}: {data}"),
    }
}

fn ids(frames: &[Frame]) -> Vec<u64> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Event { id, .. } => Some(*id),
            Frame::End(_) => None,
        })
        .collect()
}

async fn start(env: &Env) -> String {
    let app = env.router();
    let s = post(
        &app,
        &format!("/api/incidents/{}/sessions", env.incident.id),
        json!({"prompt": "go"}),
    )
    .await;
    s.json()["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_client_that_reconnects_with_last_event_id_gets_every_event_exactly_once() {
    let gate = Arc::new(Semaphore::new(0));
    let env = Env::new(gated(Arc::clone(&gate))).await;
    let app = env.router();
    let sid = start(&env).await;
    let uri = format!("/api/sessions/{sid}/events");

    let mut first = Reader::open(&app, &uri, None).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(first.next().await.unwrap());
    }
    drop(first); // the browser lost its connection after event 2
    gate.add_permits(1); // events 5..9 are written while it is away

    let mut again = Reader::open(&app, &uri, Some(2)).await;
    seen.extend(again.rest().await);
    // Event 0 is the prompt, which create logs as a user message; the
    // runner's ten events follow it.
    assert_eq!(ids(&seen), (0..11).collect::<Vec<_>>(), "{seen:?}");
    let Some(Frame::End(row)) = seen.last() else {
        panic!()
    };
    assert_eq!(
        row["status"], "completed",
        "the end event carries the terminal row"
    );
    assert_eq!(
        get(&app, &format!("/api/sessions/{sid}")).await.json()["status"],
        "completed"
    );
    if let Frame::Event { data, .. } = &seen[10] {
        assert_eq!(data["text"], "note 9");
    }

    // After the end, a resume from the last id gets the end alone; `?after`
    // works as the header does.
    let mut late = Reader::open(&app, &format!("{uri}?after=10"), None).await;
    let rest = late.rest().await;
    assert_eq!(rest.len(), 1, "{rest:?}");
    let mut whole = Reader::open(&app, &uri, None).await;
    assert_eq!(ids(&whole.rest().await), (0..11).collect::<Vec<_>>());
    env.manager.stop().await;
}

#[tokio::test]
async fn many_subscribers_share_one_follower_and_all_see_everything() {
    let gate = Arc::new(Semaphore::new(0));
    let env = Env::new(gated(Arc::clone(&gate))).await;
    let (app, stats) = korvus_http::Api::default().router_with_stats(env.manager.clone());
    let sid = start(&env).await;
    let uri = format!("/api/sessions/{sid}/events");
    let mut readers = Vec::new();
    for _ in 0..20 {
        let mut r = Reader::open(&app, &uri, None).await;
        // Each has the stored prefix before the run goes on.
        for _ in 0..5 {
            r.next().await.unwrap();
        }
        readers.push(r);
    }
    assert_eq!(
        stats.followers(),
        1,
        "20 subscribers, one reader of the log"
    );
    gate.add_permits(1);
    for mut r in readers {
        let rest = r.rest().await;
        // The prompt (event 0) and four of the runner's first five were
        // read before the gate opened.
        assert_eq!(ids(&rest), (5..11).collect::<Vec<_>>(), "{rest:?}");
    }
    settled(&env, &sid).await;
    // The follower is gone once the session ended.
    for _ in 0..50 {
        if stats.followers() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(stats.followers(), 0);
    env.manager.stop().await;
}

#[tokio::test]
async fn a_malformed_last_event_id_is_refused() {
    let env = Env::new(gated(Arc::new(Semaphore::new(1)))).await;
    let app = env.router();
    let sid = start(&env).await;
    let mut req = request(Method::GET, &format!("/api/sessions/{sid}/events"), None);
    req.headers_mut()
        .insert("last-event-id", "x1".parse().unwrap());
    let answer = crate::support::call(&app, req).await;
    answer.assert_error(StatusCode::BAD_REQUEST, "invalid_last_event_id");
    // The largest id has no successor: refused, not wrapped round to 0.
    crate::support::get(
        &app,
        &format!("/api/sessions/{sid}/events?after=18446744073709551615"),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_last_event_id");
    settled(&env, &sid).await;
    env.manager.stop().await;
}
