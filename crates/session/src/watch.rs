//! [`Manager::watch`]: a session's log events, stored prefix then live.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, Stream};
use korvus_log::{Access, Event, LogHandle, LogId};
use korvus_store::SessionId;
use tokio::sync::Notify;

use crate::{Manager, Result, SessionError};

/// Events read per round trip.
const BATCH: u64 = 256;
/// How often an idle watcher re-checks without a wake-up (a session run by
/// another process appends without waking us).
const POLL: Duration = Duration::from_millis(200);

struct State {
    manager: Manager,
    id: SessionId,
    handle: Option<LogHandle>,
    offset: u64,
    buffer: VecDeque<Event>,
    notify: Option<Arc<Notify>>,
    settled: Option<Arc<crate::live::RunState>>,
    /// The fence of the local run `settled` belongs to.
    fence: u64,
    /// The run has settled: drain what is left, then end.
    ending: bool,
    done: bool,
}

impl Manager {
    /// Streams the session's log events: the stored prefix, then live
    /// events as the runner appends them, without gaps or duplicates. The
    /// stream ends after the run's settle (the terminal row is readable
    /// when it ends); for a session that is not running — or is waiting for
    /// the user — it ends after the stored events. A session running in
    /// another process is followed by polling until its row is terminal or
    /// waiting for the user. A row that is neither is never taken for
    /// settled: when this process's run ends without its outcome written,
    /// the stream ends with [`SessionError::Unsettled`].
    ///
    /// An error item (e.g. the log does not exist) ends the stream.
    pub fn watch(&self, id: SessionId) -> impl Stream<Item = Result<Event>> + Send + 'static {
        self.watch_from(id, 0)
    }

    /// [`watch`](Self::watch) from the event at `offset` (0-based) on: the
    /// events before it are skipped without being read, so a follower that
    /// already has them (e.g. a reconnecting event-stream client) resumes
    /// where it left off. An offset past the end waits for the log to grow
    /// that far.
    pub fn watch_from(
        &self,
        id: SessionId,
        offset: u64,
    ) -> impl Stream<Item = Result<Event>> + Send + 'static {
        let state = State {
            manager: self.clone(),
            id,
            handle: None,
            offset,
            buffer: VecDeque::new(),
            notify: None,
            settled: None,
            fence: 0,
            ending: false,
            done: false,
        };
        stream::unfold(state, |mut st| async move {
            st.next().await.map(|item| (item, st))
        })
    }
}

impl State {
    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(e) = self.buffer.pop_front() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            match self.step().await {
                Ok(()) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }

    async fn step(&mut self) -> Result<()> {
        if self.handle.is_none() {
            // Subscribe before the first read, so an append or settle that
            // happens in between is not missed.
            self.follow_local_run();
            let handle = self
                .manager
                .inner
                .logs
                .open(LogId::from_uuid(self.id.as_uuid()), Access::Read)
                .await?;
            self.handle = Some(handle);
        }
        let handle = self.handle.as_ref().expect("opened above");
        // Register for a wake-up before reading, so an append between the
        // read and the wait is not missed. Without a local run, a fresh
        // `Notify` never fires and the poll interval takes over.
        let notify = self.notify.clone().unwrap_or_default();
        let wake = notify.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        let events = handle.read(self.offset, Some(BATCH)).await?;
        if !events.is_empty() {
            self.offset += events.len() as u64;
            self.buffer.extend(events);
            return Ok(());
        }
        if self.ending {
            self.done = true;
            return Ok(());
        }
        if self.is_settled().await? {
            // One more read after the settle drains anything appended late.
            self.ending = true;
            return Ok(());
        }
        let settled = self.settled.clone();
        tokio::select! {
            _ = &mut wake => {}
            _ = async {
                match settled {
                    Some(state) => state.settled().await,
                    None => std::future::pending::<()>().await,
                }
            } => {}
            _ = tokio::time::sleep(POLL) => {}
        }
        Ok(())
    }

    /// Follows this process's run of the session, if there is one: its
    /// append wake-ups and its settle signal.
    fn follow_local_run(&mut self) {
        let run = self.manager.inner.live.get(self.id);
        self.fence = run.as_ref().map_or(0, |r| r.fence);
        self.notify = run.as_ref().map(|r| Arc::clone(&r.appended));
        self.settled = run.map(|r| r.state());
    }

    async fn is_settled(&mut self) -> Result<bool> {
        let inner = &self.manager.inner;
        if let Some(state) = &self.settled {
            if !state.is_settled() {
                return Ok(false);
            }
            // The local run ended; the row says whether it settled.
            let row = inner.store.get_session(self.id).await?;
            if row.status.is_terminal() || row.is_idle() {
                return Ok(true);
            }
            if row.fence == self.fence {
                // It ended without its outcome written: never reported as settled.
                return Err(SessionError::Unsettled { session: self.id });
            }
            // The session moved on (a newer run here, or elsewhere): follow that.
            self.follow_local_run();
            return Ok(false);
        }
        // Not run by this process: the row decides. A session waiting for
        // the user has no run to follow either.
        let row = inner.store.get_session(self.id).await?;
        Ok(row.status.is_terminal() || row.is_idle())
    }
}
