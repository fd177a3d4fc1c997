//! Benchmark 19: a Server-Sent Events reconnect at the end of a long
//! `JsonlLog`. `GET /api/sessions/{id}/events?after=n` of a finished
//! session whose log holds 1,000,000 events (20,000 under `--quick`),
//! asking for the last event (it gets that event and `end`), against the
//! same for a session whose log holds 100 events, through `korvus-http`'s
//! router in process, one `JsonlLog` service behind both.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use korvus_log::{JsonlLog, LogId};
use korvus_session::Manager;
use korvus_store::{
    Counters, IncidentId, MemoryStore, SessionId, SessionStatus, Settlement, Store,
};

use crate::fixtures::{get_ok, leased_session, logs_and_incident, long_log};
use crate::report::{quantile, Goal, Row};
use crate::runners::ParkedRunner;
use crate::sql::ms;
use crate::Bench;

const SHORT: u64 = 100;

pub(crate) async fn sse_reconnect(b: &mut Bench) -> Result<Vec<Row>> {
    let long = if b.quick { 20_000 } else { 1_000_000 };
    let (logs, store, incident) = logs_and_incident(&b.work.join("reconnect"), "reconnect").await?;
    let long_id = finished(&store, &logs, incident, long).await?;
    let short_id = finished(&store, &logs, incident, SHORT).await?;
    let manager = Manager::builder(store, Arc::new(ParkedRunner { barrier: None }))
        .turn_log(logs)
        .build();
    let router = korvus_http::Api::default()
        .view(false)
        .router(manager.clone());
    let path = |id: SessionId, n: u64| format!("/api/sessions/{id}/events?after={}", n - 2);
    // The first reconnect of each pays for indexing its log once.
    let cold_long = reconnect(&router, &path(long_id, long)).await?;
    let cold_short = reconnect(&router, &path(short_id, SHORT)).await?;
    let (rounds, per_round) = if b.quick { (2, 5) } else { (10, 20) };
    let mut pairs = Vec::new();
    for round in 0..rounds {
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        for i in 0..per_round {
            if (round + i) % 2 == 0 {
                ours.push(reconnect(&router, &path(long_id, long)).await?);
                base.push(reconnect(&router, &path(short_id, SHORT)).await?);
            } else {
                base.push(reconnect(&router, &path(short_id, SHORT)).await?);
                ours.push(reconnect(&router, &path(long_id, long)).await?);
            }
        }
        pairs.push((quantile(&base, 0.5), quantile(&ours, 0.5)));
    }
    manager.stop().await;
    b.details.insert(
        "19_sse_reconnect".into(),
        serde_json::json!({ "cold_long_ms": cold_long, "cold_short_ms": cold_short }),
    );
    Ok(vec![Row::paired(
        format!("19 SSE reconnect at the end of a {long}-event JsonlLog"),
        format!("{SHORT}-event log"),
        format!("{long}-event log"),
        "ms",
        &pairs,
        Goal::RatioAtMost { max: 2.0 },
    )
    .note(format!(
        "GET …/events?after=n−2 of a finished session (the last event, then end), through \
         korvus-http's router in process; p50 of {per_round} per round; the first reconnect of each \
         log, which indexes it once, took {cold_long:.1} ms (long) and {cold_short:.1} ms (short)"
    ))])
}

/// A finished session of `incident` whose log holds `events` events.
async fn finished(
    store: &MemoryStore,
    logs: &JsonlLog,
    incident: IncidentId,
    events: u64,
) -> Result<SessionId> {
    let session = leased_session(store, incident, "long".into()).await?;
    long_log(logs, LogId::from_uuid(session.id.as_uuid()), events).await?;
    store
        .settle_session(
            session.id,
            Settlement {
                status: SessionStatus::Completed,
                exit_reason: Some("completed".into()),
                counters: Counters::default(),
                fence: session.fence,
            },
        )
        .await?;
    Ok(session.id)
}

async fn reconnect(router: &axum::Router, path: &str) -> Result<f64> {
    let t = Instant::now();
    let body = get_ok(router, path).await?;
    let text = String::from_utf8_lossy(&body);
    if !text.contains("event: end") {
        bail!("{path}: the stream did not end: {text:.300}");
    }
    Ok(ms(t.elapsed()))
}
