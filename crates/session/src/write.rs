//! The bounded, retried writes that end a run: the report row
//! ([`Inner::write_report`]), the settlement ([`Inner::settle`], the last
//! write of every path), and the report row and `failed` settlement of a
//! run that ended before it could land ([`Inner::fail_early`]). Each is
//! made on its own task, detached from the run's cancellation, retried on
//! transient errors with backoff and given up — loudly — at its bound; the
//! outcome is typed ([`Write`], [`Settled`]).

use std::sync::Arc;
use std::time::Duration;

use korvus_runner::ExitReason;
use korvus_store::{Counters, NewReport, Session, SessionId, Settlement, StoreError};
use tracing::{error, info, warn, Instrument as _};

use crate::ending::Ending;
use crate::inner::Inner;
use crate::run::RunKey;

/// The settlement of a revision that never ran for `reason`
/// ([`Ending::NotRun`]), with no usage, for the run at `fence`.
pub(crate) fn failed(reason: ExitReason, fence: u64) -> Settlement {
    let (status, reason) = Ending::NotRun(reason).settles();
    Settlement {
        status,
        exit_reason: Some(reason),
        counters: Counters::default(),
        fence,
    }
}

/// What became of a settlement ([`Inner::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The store holds it.
    Written,
    /// The store refused it for good because the run is over for it: the
    /// session moved on (fenced off) or its row already ended.
    FencedOff,
    /// Not written: the bound passed or the store refused it otherwise.
    NotWritten,
}

impl Inner {
    /// Ends a revision that never ran (or whose run was lost): writes its
    /// report row without a document, then returns the `failed` settlement
    /// for the caller to write. A report row landing already wrote is kept.
    pub(crate) async fn fail_early(&self, run: RunKey, reason: ExitReason) -> Settlement {
        let report = NewReport {
            session_id: run.session,
            incident_id: run.incident,
            revision: run.revision,
            markdown_key: None,
            manifest_key: None,
            markdown_bytes: 0,
            exit_reason: reason.clone(),
            counters: Counters::default(),
            detail: None,
            salvaged_from: None,
            fence: run.fence,
        };
        self.write_report(report).await;
        failed(reason, run.fence)
    }

    /// Writes a report row: bounded by the report bound, retried with
    /// backoff on transient errors, never on permanent ones. A row already
    /// there for the revision (a retry whose first attempt committed, or a
    /// row landing wrote before a panic) counts as written: one row per
    /// revision. Returns whether the revision has its row.
    pub(crate) async fn write_report(&self, report: NewReport) -> bool {
        let bound = self.config.report_timeout;
        let store = Arc::clone(&self.store);
        let attempt = move || {
            let (store, report) = (Arc::clone(&store), report.clone());
            async move { store.create_report(report).await.map(|_| ()) }
        };
        match retry("report", bound, attempt).await {
            Write::Done => true,
            Write::Refused(StoreError::Conflict { .. }) => {
                info!("the revision already has its report row; kept");
                true
            }
            Write::Refused(e) if e.is_fenced_off() => {
                // The session moved on without this run, or already ended.
                warn!(error = %e, "report row fenced off: the session moved on without this run");
                false
            }
            Write::Refused(e) => {
                error!(error = %e, "report row not written");
                false
            }
            Write::GaveUp => {
                error!(?bound, "report row not written in time");
                false
            }
        }
    }

    /// Writes the session's outcome: the last write of every path. The
    /// settlement is made valid first (counters saturate at what the
    /// columns hold; exit reasons are valid by construction), then written
    /// on its own tasks (detached from any cancellation), retried with
    /// backoff on transient errors and given up — loudly — on a permanent
    /// one or after the settle bound. Whether this run may still write is
    /// the store's decision (the settlement presents the run's fence), never
    /// this process's clock: a run whose lease may have lapsed still settles
    /// when nobody took the session over.
    pub(crate) async fn settle(&self, id: SessionId, settlement: Settlement) -> Settled {
        let bound = self.config.settle_timeout;
        let settlement = Settlement {
            counters: settlement.counters.saturating(),
            ..settlement
        };
        let (status, reason) = (settlement.status, settlement.exit_reason.clone());
        let store = Arc::clone(&self.store);
        let attempt = move || {
            let (store, s) = (Arc::clone(&store), settlement.clone());
            async move { store.settle_session(id, s).await.map(|_| ()) }
        };
        match retry("settle", bound, attempt).await {
            Write::Done => {
                crate::metrics::settled(reason.as_deref());
                info!(%status, exit_reason = ?reason, "session settled");
                Settled::Written
            }
            Write::Refused(e) if e.is_fenced_off() => {
                // A newer run, a takeover or an operator owns the row now,
                // or it already ended: this run's outcome must not overwrite it.
                warn!(session_id = %id, error = %e, "settle fenced off: the session moved on without this run");
                Settled::FencedOff
            }
            Write::Refused(e) => {
                error!(session_id = %id, error = %e, "settle refused; the row may stay running");
                Settled::NotWritten
            }
            Write::GaveUp => {
                error!(session_id = %id, "settle gave up after {bound:?}; the row may stay running");
                Settled::NotWritten
            }
        }
    }
}

impl Inner {
    /// Records that the run starts (`Coordination::mark_started`), right
    /// before its runner is called: from here a run whose owner dies is an
    /// orphan (`owner_lost`), before it only a claim the reaper gives back
    /// to the queue. Bounded by the report bound, retried on transient
    /// errors; a repeat of a committed attempt is `Ok`.
    pub(crate) async fn mark_started(&self, run: RunKey) -> Write {
        let store = Arc::clone(&self.store);
        let attempt = move || {
            let store = Arc::clone(&store);
            async move { store.mark_started(run.session, run.fence).await.map(|_| ()) }
        };
        retry("start", self.config.report_timeout, attempt).await
    }

    /// Queues a session this manager created owned (so that no claimer
    /// could take it before its context refs and turn log existed) and
    /// will not run now: gives the creator's claim back
    /// (`Coordination::release`), bounded by the report bound. Returns
    /// the queued row; when the release cannot be written, the row as
    /// created — still this manager's claim, never started and never
    /// renewed, which a reaper gives back to the queue once its lease
    /// lapses.
    pub(crate) async fn enqueue(&self, session: Session) -> Session {
        let run = RunKey::of(&session);
        let store = Arc::clone(&self.store);
        let attempt = move || {
            let store = Arc::clone(&store);
            async move { store.release(run.session, run.fence).await.map(|_| ()) }
        };
        match retry("enqueue", self.config.report_timeout, attempt).await {
            Write::Done => Session {
                owner: None,
                lease_expires_at: None,
                fence: session.fence + 1,
                ..session
            },
            Write::Refused(e) => {
                warn!(error = %e, "the new session was not queued: it moved on");
                session
            }
            Write::GaveUp => {
                warn!("the new session was not queued; a reaper queues it once its lease lapses");
                session
            }
        }
    }

    /// Gives the claim of a run that never started back to the queue
    /// (`Coordination::release`), bounded by the clean-up bound. When it
    /// cannot be written the row stays claimed and unstarted: no
    /// heartbeat renews it, its lease lapses, and a reaper gives it back.
    /// `false` only when the store says the run started after all (a start
    /// whose answer was lost committed): the caller must end it.
    pub(crate) async fn give_back(&self, run: RunKey) -> bool {
        let store = Arc::clone(&self.store);
        let attempt = move || {
            let store = Arc::clone(&store);
            async move { store.release(run.session, run.fence).await.map(|_| ()) }
        };
        match retry("give_back", self.config.cleanup_timeout, attempt).await {
            Write::Done => {
                info!("the session went back to the queue without starting");
                self.slots.nudge();
                true
            }
            Write::Refused(StoreError::AlreadyStarted { .. }) => {
                warn!("the claim was not given back: its start was recorded after all");
                false
            }
            Write::Refused(e) => {
                warn!(error = %e, "the claim was not given back: the session moved on");
                true
            }
            Write::GaveUp => {
                warn!("the claim was not given back; a reaper returns it to the queue once its lease lapses");
                true
            }
        }
    }
}

/// How a bounded, retried store write ended ([`retry`]).
#[derive(Debug)]
pub(crate) enum Write {
    /// The store acknowledged it.
    Done,
    /// The store refused it with a permanent error: retrying cannot help.
    Refused(StoreError),
    /// The bound passed with only transient failures, panics or hangs.
    GaveUp,
}

/// Runs `attempt` on its own task (so a caller going away or a panic
/// cannot cut it half-way) until it succeeds ([`Write::Done`]), fails
/// permanently ([`Write::Refused`]) or `bound` passes ([`Write::GaveUp`]), retrying transient failures, panics and
/// hangs with backoff (each retry counted under `what`). One attempt may take a quarter of the bound: a call
/// that hangs once (a dropped connection) is abandoned and tried again
/// rather than using up the whole bound. Both writes retried this way are
/// safe to repeat: a settle writes the same row again, and a report row
/// that did land makes the retry a `Conflict` the caller accepts.
pub(crate) async fn retry<F, Fut>(what: &'static str, bound: Duration, attempt: F) -> Write
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>> + Send + 'static,
{
    let deadline = tokio::time::Instant::now() + bound;
    let per_attempt = bound / 4;
    let mut backoff = korvus_store::Backoff::WRITES.start();
    loop {
        // In the caller's span (a run's `settle`, say): its store work
        // belongs to the run's trace.
        let task = tokio::spawn(attempt().in_current_span());
        let abort = task.abort_handle();
        let until = deadline.min(tokio::time::Instant::now() + per_attempt);
        match tokio::time::timeout_at(until, task).await {
            Ok(Ok(Ok(()))) => return Write::Done,
            Ok(Ok(Err(e))) if !e.is_transient() => return Write::Refused(e),
            Ok(Ok(Err(e))) => warn!(error = %e, "store write failed; retrying"),
            Ok(Err(join)) => warn!(error = %join, "store write panicked; retrying"),
            Err(_) => {
                abort.abort();
                warn!(?per_attempt, "store write did not answer in time; retrying");
            }
        }
        if tokio::time::Instant::now() + backoff.delay() >= deadline {
            return Write::GaveUp;
        }
        crate::metrics::write_retried(what);
        tokio::time::sleep(backoff.delay()).await;
        backoff.advance();
    }
}
