//! `GET /api/sessions/{id}/events`: a session's turn log as Server-Sent
//! Events, with one shared reader per session.
//!
//! # How a stream is put together
//!
//! Each SSE event's `id` is the event's 0-based offset in the log, so a
//! client that reconnects with `Last-Event-ID: n` (or `?after=n`, for a
//! fresh `EventSource`) resumes at offset `n + 1`.
//!
//! Live events come from a [`Hub`] entry: one task per watched session
//! follows the log with [`Manager::watch_from`](korvus_session::Manager::watch_from)
//! and broadcasts every event, serialised once, to all subscribers. A
//! subscriber first joins the broadcast, then reads the stored events it
//! lacks from the log itself (one read per connection, not a poll); live
//! events it already read are skipped by offset, and a gap (it fell behind
//! the broadcast's buffer) is filled by reading the log again. So events
//! arrive in order, exactly once, however the two sources interleave.
//!
//! When the follower ends (the run settled, or the session waits for the
//! user), the hub broadcasts the end; every subscriber drains what is left
//! in the log and sends a final `end` event carrying the session in full
//! (as `GET /api/sessions/{id}` answers it), then
//! closes the stream. When the follower fails (the log or the store cannot
//! be read), subscribers get a `failure` event instead and the stream closes
//! without `end`: the client reconnects with its last id. A follower with no
//! subscribers left stops within [`IDLE_CHECK`].

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use korvus_log::{Access, LogHandle, LogId};
use korvus_session::Manager;
use korvus_store::SessionId;
use serde::Deserialize;
use tokio::sync::broadcast;

use crate::error::{parse_id, ApiError, ApiPath, ApiQuery};
use crate::AppState;

/// Stored events read per round trip of a catching-up subscriber.
const BATCH: u64 = 256;
/// Frames a slow subscriber may fall behind before it catches up from the
/// log instead.
const BUFFER: usize = 1024;
/// How often a follower checks whether anyone still listens.
pub(crate) const IDLE_CHECK: Duration = Duration::from_secs(5);

/// What a hub broadcasts.
#[derive(Debug, Clone)]
enum Frame {
    /// The event at `offset`, as JSON.
    Event { offset: u64, json: Arc<str> },
    /// The follower ended: the run settled (or waits for the user).
    End,
    /// The follower failed (the log or the store could not be read):
    /// subscribers close without `end`, and clients reconnect.
    Failed,
}

/// Sessions whose events a follower task reads now (gauge): one per
/// watched session, however many clients watch it.
pub const SSE_FOLLOWERS: &str = "korvus_sse_followers";
/// Clients connected to an event stream now (gauge).
pub const SSE_SUBSCRIBERS: &str = "korvus_sse_subscribers";

/// The followers of watched sessions, one per session.
#[derive(Debug, Default, Clone)]
pub(crate) struct Hub {
    inner: Arc<Mutex<HubInner>>,
}

#[derive(Debug, Default)]
struct HubInner {
    followers: HashMap<SessionId, Follower>,
    next_generation: u64,
}

#[derive(Debug)]
struct Follower {
    generation: u64,
    tx: broadcast::Sender<Frame>,
}

impl Hub {
    /// How many sessions have a follower now.
    pub(crate) fn followers(&self) -> usize {
        self.lock().followers.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubInner> {
        // A panic while holding the lock leaves a consistent map (every
        // critical section is one insert or remove), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the session's broadcast, starting its follower if it has none.
    fn subscribe(
        &self,
        manager: &Manager,
        id: SessionId,
        start: u64,
    ) -> broadcast::Receiver<Frame> {
        let mut inner = self.lock();
        if let Some(f) = inner.followers.get(&id) {
            return f.tx.subscribe();
        }
        let (tx, rx) = broadcast::channel(BUFFER);
        inner.next_generation += 1;
        let generation = inner.next_generation;
        inner.followers.insert(
            id,
            Follower {
                generation,
                tx: tx.clone(),
            },
        );
        metrics::gauge!(SSE_FOLLOWERS).increment(1.0);
        drop(inner);
        tokio::spawn(follow(
            self.clone(),
            manager.clone(),
            id,
            generation,
            start,
            tx,
        ));
        rx
    }

    /// Removes the session's follower if it is still `generation` and —
    /// with `only_if_idle` — nobody listens. Returns whether it was removed.
    fn retire(&self, id: SessionId, generation: u64, only_if_idle: bool) -> bool {
        let mut inner = self.lock();
        let current = inner.followers.get(&id);
        let ours = current.is_some_and(|f| f.generation == generation);
        let idle = current.is_some_and(|f| f.tx.receiver_count() == 0);
        if ours && (idle || !only_if_idle) {
            inner.followers.remove(&id);
            metrics::gauge!(SSE_FOLLOWERS).decrement(1.0);
            return true;
        }
        !ours
    }
}

/// The follower task: the session's events from `start` on, broadcast.
async fn follow(
    hub: Hub,
    manager: Manager,
    id: SessionId,
    generation: u64,
    start: u64,
    tx: broadcast::Sender<Frame>,
) {
    // Should this task panic, the guard still takes it out of the map, so
    // later subscribers start afresh and current ones see the channel close.
    let guard = Retire {
        hub: hub.clone(),
        id,
        generation,
    };
    let events = manager.watch_from(id, start);
    tokio::pin!(events);
    let mut offset = start;
    let mut idle = tokio::time::interval(IDLE_CHECK);
    idle.tick().await;
    let last = loop {
        tokio::select! {
            item = events.next() => match item {
                Some(Ok(event)) => {
                    let json: Arc<str> = serde_json::to_string(&event)
                        .unwrap_or_else(|_| "{}".to_owned())
                        .into();
                    // No receiver is not an error: the idle check retires us.
                    let _ = tx.send(Frame::Event { offset, json });
                    offset += 1;
                }
                Some(Err(e)) => {
                    tracing::warn!(session = %id, error = %e, "event follower failed");
                    break Frame::Failed;
                }
                None => break Frame::End,
            },
            _ = idle.tick() => {
                if hub.retire(id, generation, true) {
                    // Retired: the guard's second retire finds nothing.
                    return;
                }
            }
        }
    };
    // Retire before announcing the end: a subscriber arriving after this
    // starts a fresh follower instead of joining one that is finished.
    drop(guard);
    let _ = tx.send(last);
}

/// Takes a follower out of the hub when dropped.
struct Retire {
    hub: Hub,
    id: SessionId,
    generation: u64,
}

impl Drop for Retire {
    fn drop(&mut self) {
        self.hub.retire(self.id, self.generation, false);
    }
}

/// `?after=n`: resume after the event with id `n` (for a fresh
/// `EventSource`, which cannot set `Last-Event-ID` itself).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    after: Option<String>,
}

/// `GET /api/sessions/{id}/events`.
pub(crate) async fn events(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let id: SessionId = parse_id("session", &id)?;
    let after = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("-").to_owned())
        .or(query.after);
    let next = match after {
        None => 0,
        Some(text) => text
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_last_event_id",
                    format!("{text:?} is not an event id"),
                )
            })?,
    };
    let manager = &app.manager;
    manager.store().get_session(id).await?;
    let handle = manager
        .turn_log()
        .open(LogId::from_uuid(id.as_uuid()), Access::Read)
        .await
        .map_err(korvus_session::SessionError::from)?;
    let start = handle
        .len()
        .await
        .map_err(korvus_session::SessionError::from)?;
    let rx = app.hub.subscribe(manager, id, start);
    metrics::gauge!(SSE_SUBSCRIBERS).increment(1.0);
    let sub = Subscriber {
        manager: manager.clone(),
        id,
        handle: Some(handle),
        rx,
        next,
        out: VecDeque::new(),
        phase: Phase::CatchUp,
    };
    let stream = futures::stream::unfold(sub, |mut sub| async move {
        sub.next().await.map(|e| (Ok(e), sub))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading stored events until the log has no more.
    CatchUp,
    /// Taking events from the broadcast.
    Live,
    /// The follower ended: read what is left, then send `end`.
    Ending,
    Done,
}

struct Subscriber {
    manager: Manager,
    id: SessionId,
    /// Open only while reading stored events: a follower of a quiet
    /// session holds no file or connection of the log.
    handle: Option<LogHandle>,
    rx: broadcast::Receiver<Frame>,
    /// The offset of the next event this client needs.
    next: u64,
    out: VecDeque<SseEvent>,
    phase: Phase,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        metrics::gauge!(SSE_SUBSCRIBERS).decrement(1.0);
    }
}

impl Subscriber {
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.out.pop_front() {
                return Some(e);
            }
            match self.phase {
                Phase::Done => return None,
                Phase::CatchUp | Phase::Ending => self.read_stored().await,
                Phase::Live => self.receive().await,
            }
        }
    }

    /// One read of stored events from `next` on; when there are none, the
    /// next phase.
    async fn read_stored(&mut self) {
        if self.handle.is_none() {
            let log = LogId::from_uuid(self.id.as_uuid());
            match self.manager.turn_log().open(log, Access::Read).await {
                Ok(h) => self.handle = Some(h),
                Err(e) => return self.fail(&e),
            }
        }
        let handle = self.handle.as_ref().expect("opened above");
        match handle.read(self.next, Some(BATCH)).await {
            Ok(events) if !events.is_empty() => {
                for event in events {
                    let json = serde_json::to_string(&event).unwrap_or_else(|_| "{}".into());
                    self.push(self.next, &json);
                }
            }
            Ok(_) if self.phase == Phase::CatchUp => {
                self.handle = None;
                self.phase = Phase::Live;
            }
            Ok(_) => self.finish().await,
            Err(e) => self.fail(&e),
        }
    }

    /// A `failure` event, then the stream closes without `end`: the client
    /// reconnects with its last id.
    fn fail(&mut self, e: &dyn std::fmt::Display) {
        tracing::warn!(session = %self.id, error = %e, "event stream read failed");
        self.out.push_back(
            SseEvent::default()
                .event("failure")
                .data(r#"{"error":"the turn log cannot be read; reconnect","code":"log_failed"}"#),
        );
        self.phase = Phase::Done;
    }

    async fn receive(&mut self) {
        match self.rx.recv().await {
            Ok(Frame::Event { offset, json }) => {
                if offset == self.next {
                    self.push(offset, &json);
                } else if offset > self.next {
                    // A gap between what we read and what is broadcast: the
                    // log has it.
                    self.phase = Phase::CatchUp;
                }
            }
            Ok(Frame::End) => self.phase = Phase::Ending,
            Ok(Frame::Failed) | Err(broadcast::error::RecvError::Closed) => {
                self.fail(&"the session's follower stopped");
            }
            Err(broadcast::error::RecvError::Lagged(_)) => self.phase = Phase::CatchUp,
        }
    }

    fn push(&mut self, offset: u64, json: &str) {
        self.out
            .push_back(SseEvent::default().id(offset.to_string()).data(json));
        self.next = offset + 1;
    }

    /// The final `end` event, carrying the session's detail (the row,
    /// its counters and cause).
    async fn finish(&mut self) {
        let data = match self.manager.store().get_session(self.id).await {
            Ok(row) => {
                let detail = crate::routes::SessionDetail::of(&self.manager, row).await;
                serde_json::to_string(&detail).unwrap_or_else(|_| "{}".into())
            }
            Err(e) => {
                tracing::warn!(session = %self.id, error = %e, "session row unreadable at stream end");
                "{}".into()
            }
        };
        self.out
            .push_back(SseEvent::default().event("end").data(data));
        self.phase = Phase::Done;
    }
}
