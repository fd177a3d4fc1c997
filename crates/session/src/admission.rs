//! Admission: the loop that claims queued sessions for this manager's free
//! run slots.
//!
//! A create that finds every slot taken queues its session in the store
//! (running, unowned, not started). One task per manager wakes when one of
//! its runs frees a slot, when a create queued something here, when the
//! store pushes that work appeared (`Coordination::queue_signal`:
//! PostgreSQL's NOTIFY for rows queued and runs ended elsewhere) and
//! every `cancel_poll` period (the only way on SQLite; with a push, ten
//! times slower, as the fallback for a notification lost in a reconnect,
//! and a freed slot claims only when work is known or was announced —
//! so a run that ends costs no claim statement when nothing waits);
//! while a slot is free it asks the store for the next queued session of
//! its pool (`Coordination::claim_next`: priority, then the key with the
//! fewest runs in progress and the oldest last turn, then age — one
//! winner across replicas), opens
//! its turn log at the claimed fence and launches it like a created one.
//! It stops claiming once the manager stops (or
//! [`Manager::stop_claiming`] was called): unclaimed sessions stay queued
//! for the next manager, and a claim made while it began to stop is given
//! back.

use std::sync::{Arc, Weak};

use korvus_log::{Access, Event, EventKind, LogId};
use korvus_runner::ExitReason;
use korvus_store::{Artifact, Session};
use tracing::{debug, error, info, info_span, warn, Instrument};

use crate::inner::Inner;
use crate::live::Slot;
use crate::manager::Manager;
use crate::run::{Plan, Resume, RunKey};
use crate::SessionError;

/// Starts the admission loop of `inner`'s manager, if a tokio runtime is
/// running. The task ends when the manager is dropped or stops.
pub(crate) fn start(inner: &Arc<Inner>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        debug!("no runtime: queued sessions are not claimed");
        return;
    };
    let weak = Arc::downgrade(inner);
    // The store's push (PostgreSQL's NOTIFY), where it has one: then a
    // freed slot claims only when work is known or announced, and the
    // poll is only the fallback for a notification lost in a reconnect.
    let signal = inner.store.queue_signal();
    // With a per-key cap, a run of this manager that ends (or goes idle)
    // may make room under its key for work a claim passed over: a freed
    // slot always looks.
    let capped = inner.config.per_key.is_some();
    let period = match signal {
        Some(_) => inner.config.cancel_poll * PUSHED_POLL_FACTOR,
        None => inner.config.cancel_poll,
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Whether work may wait that no claim has looked for yet.
        let mut pending = true;
        loop {
            // The slots alone, not the manager: a dropped manager ends
            // the loop at its next wake-up. A slot freed while claims run
            // leaves a wake-up behind (`notify_one`), so none is missed.
            let Some(slots) = weak.upgrade().map(|inner| inner.slots.clone()) else {
                return;
            };
            let freed = {
                let slots = slots.clone();
                async move { slots.freed().await }
            };
            let pushed = async {
                match &signal {
                    Some(signal) => signal.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick.tick() => pending = true,
                () = freed => {}
                () = pushed => pending = true,
            }
            if signal.is_some() && !pending && !capped && !slots.waiting() {
                continue;
            }
            match admit(&weak).await {
                Admitted::Gone => return,
                Admitted::Drained => pending = false,
                Admitted::Full => {}
            }
        }
    });
}

/// How much slower the fallback poll is when the store pushes.
const PUSHED_POLL_FACTOR: u32 = 10;

/// What a round of claims ended with.
enum Admitted {
    /// The manager is gone or stopping: the loop ends.
    Gone,
    /// The queue had nothing more for this manager.
    Drained,
    /// Every slot is taken, or the store failed: work may still wait.
    Full,
}

/// Claims queued sessions while a slot is free.
async fn admit(weak: &Weak<Inner>) -> Admitted {
    let Some(inner) = weak.upgrade() else {
        return Admitted::Gone;
    };
    loop {
        if inner.is_shutting_down() {
            return Admitted::Gone;
        }
        if inner.is_claiming_stopped() {
            return Admitted::Drained;
        }
        let Some(slot) = inner.slots.try_take() else {
            return Admitted::Full;
        };
        match inner
            .store
            .claim_next(&inner.config.pool, inner.config.per_key, inner.lease())
            .await
        {
            // Claimed while the manager began to stop (or stopped
            // claiming): given back, to start elsewhere.
            Ok(Some(row)) if inner.is_claiming_stopped() => {
                slot.give_back();
                if row.started_at.is_some() {
                    // A resume: pending again at once (as an attempt of
                    // its own), not left for a reaper after a ttl.
                    give_back_resume(&inner, &row).await;
                } else {
                    inner.give_back(RunKey::of(&row)).await;
                }
                return if inner.is_shutting_down() {
                    Admitted::Gone
                } else {
                    Admitted::Drained
                };
            }
            Ok(Some(row)) => {
                // A first run's wait (a continue keeps no time of queueing).
                if row.revision == 1 {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default();
                    let created = u64::try_from(row.created_at.timestamp_millis()).unwrap_or(0);
                    let waited = now.saturating_sub(std::time::Duration::from_millis(created));
                    crate::metrics::queue_waited(waited);
                }
                inner.slots.set_waiting(true);
                let manager = Manager {
                    inner: Arc::clone(&inner),
                };
                let span =
                    info_span!("session", session_id = %row.id, incident_id = %row.incident_id);
                manager.start_claimed(row, slot).instrument(span).await;
            }
            Ok(None) => {
                // Nothing queued in the pool: new creates may take free
                // slots directly again.
                inner.slots.set_waiting(false);
                slot.give_back();
                return Admitted::Drained;
            }
            Err(e) => {
                slot.give_back();
                warn!(error = %e, "queued sessions not claimed; trying again");
                // Work may still wait: looked for again at the next wake-up.
                return Admitted::Full;
            }
        }
    }
}

/// Opens the turn log of a claimed session and claims it at the claimed
/// fence. For a resume, the interrupted attempt may still hold the log's
/// one write handle — its run unwinding in this process after its lease
/// lapsed, or a paused process on this host holding a JSONL log's lock:
/// waited for, at most half the lease ttl (the claim holds the row that
/// long without a heartbeat); then `AlreadyOwned`, which the caller
/// answers by sending the resume back to the pool.
async fn open_claimed_log(
    inner: &Inner,
    row: &Session,
) -> Result<korvus_log::LogHandle, korvus_log::LogError> {
    let id = LogId::from_uuid(row.id.as_uuid());
    let wait = if row.started_at.is_some() {
        inner.config.lease_ttl / 2
    } else {
        std::time::Duration::ZERO
    };
    let deadline = tokio::time::Instant::now() + wait;
    let log = loop {
        match inner.logs.open(id, Access::Write).await {
            Err(korvus_log::LogError::AlreadyOwned { .. })
                if tokio::time::Instant::now() < deadline =>
            {
                debug!("the turn log is still held by a run unwinding here; waiting");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            opened => break opened?,
        }
    };
    log.claim_epoch(row.fence).await?;
    Ok(log)
}

/// Sends a resume this manager claimed while it began to stop back to its
/// pool. On failure the row, never started here, becomes an orphan once
/// this manager's heartbeat no longer lists it, and a reaper resumes it.
async fn give_back_resume(inner: &Inner, row: &Session) {
    match inner
        .store
        .release_for_resume(row.id, row.fence, std::time::Duration::ZERO)
        .await
    {
        Ok(_) => {
            info!(session_id = %row.id, "a resume claimed while stopping went back to the pool");
            inner.slots.nudge();
        }
        Err(e) => {
            warn!(session_id = %row.id, error = %e, "a resume claimed while stopping was not given back; a reaper resumes it")
        }
    }
}

impl Manager {
    /// Starts the run of a session this manager just claimed from the
    /// queue: its incident, inherited context and turn log (claimed at the
    /// claimed fence), then `launch`. A claimed row never stays running
    /// without its run: what fails here settles it `failed`.
    async fn start_claimed(&self, row: Session, slot: Slot) {
        let inner = &self.inner;
        let guard = inner.runs.join();
        let id = row.id;
        let (incident, inherited) = match self.read_claimed(&row).await {
            Ok(read) => read,
            Err(e) => {
                error!(error = %e, "a claimed session could not be read; settling it failed");
                let ended = inner
                    .fail_early(RunKey::of(&row), ExitReason::CONTEXT_REFS_FAILED)
                    .await;
                inner.settle(id, ended).await;
                return;
            }
        };
        let log = match open_claimed_log(inner, &row).await {
            Ok(log) => log,
            // A create writes the row, then its context refs, then its
            // log: no log means its creator died half-way (the row went
            // back to the queue as a claim that never started), and its
            // refs may be missing too. It is ended as its creator's death
            // ended it before the queue existed, never run without them.
            Err(korvus_log::LogError::NotFound { .. }) => {
                warn!("the claimed session was left half made by its creator (no turn log); settling it owner_lost");
                let ended = inner
                    .fail_early(RunKey::of(&row), ExitReason::OWNER_LOST)
                    .await;
                inner.settle(id, ended).await;
                return;
            }
            // A resume whose interrupted attempt still holds the log: back
            // to the pool (as an attempt), tried again after a backoff of
            // at least a ttl, doubled per attempt.
            Err(korvus_log::LogError::AlreadyOwned { .. }) if row.started_at.is_some() => {
                warn!("the interrupted attempt still holds the turn log; the resume goes back to the pool");
                drop(guard);
                slot.give_back();
                let base = inner.config.resume_backoff.max(inner.config.lease_ttl);
                let wait = crate::resume::backoff(base, row.attempt);
                if let Err(e) = inner.store.release_for_resume(id, row.fence, wait).await {
                    warn!(error = %e, "the resume was not sent back; a reaper resumes it");
                }
                return;
            }
            Err(e) => {
                error!(error = %e, "turn log of a claimed session not opened; settling it failed");
                let ended = inner
                    .fail_early(RunKey::of(&row), ExitReason::TURN_LOG_FAILED)
                    .await;
                inner.settle(id, ended).await;
                return;
            }
        };
        info!(fence = row.fence, "queued session claimed");
        // A continued session (reopen, answer) was queued with its
        // message as the last user message of its log.
        let read = if row.attempt > 1 && row.started_at.is_some() {
            self.read_resumed(&row, &log).await
        } else if row.revision > 1 {
            self.read_continue(&row, &log).await
        } else {
            Ok((row.revision, None))
        };
        let (revision, resume) = {
            match read {
                Ok(read) => read,
                Err(e) => {
                    error!(error = %e, "a claimed continue could not be read; settling it failed");
                    let _ = log.close().await;
                    let ended = inner
                        .fail_early(RunKey::of(&row), ExitReason::TURN_LOG_FAILED)
                        .await;
                    inner.settle(id, ended).await;
                    return;
                }
            }
        };
        let plan = Plan::new(row.clone(), revision, incident, inherited, resume);
        self.launch(plan, log, guard, slot);
    }

    /// The revision and the resume of a claimed continue: its message is
    /// the last user message of its log (appended before it was queued),
    /// its own output the newest artifact of each path it stored, its revision the
    /// next report revision (never one a failed report row left behind).
    async fn read_continue(
        &self,
        row: &Session,
        log: &korvus_log::LogHandle,
    ) -> crate::Result<(u32, Option<Resume>)> {
        let store = &self.inner.store;
        let message = crate::closers::last_user_message(log)
            .await?
            .ok_or(SessionError::MessageRequired)?;
        let own = store.latest_session_artifacts(row.id).await?;
        let revision = store.next_report_revision(row.id).await?.max(row.revision);
        Ok((revision, Some(Resume::continued(message, own))))
    }

    /// The resume of a revision whose earlier attempt lost its owner
    /// (claimed resume-pending): the same revision; the earlier output of
    /// the session restored as for a continue, and over it the revision's
    /// last checkpoint; a message saying what happened, then the
    /// revision's own message (the prompt, or the continue's).
    async fn read_resumed(
        &self,
        row: &Session,
        log: &korvus_log::LogHandle,
    ) -> crate::Result<(u32, Option<Resume>)> {
        let store = &self.inner.store;
        let original = crate::closers::last_user_message(log)
            .await?
            .unwrap_or_else(|| row.prompt.clone());
        let own = if row.revision > 1 {
            store.latest_session_artifacts(row.id).await?
        } else {
            Vec::new()
        };
        let all = korvus_store::StoreExt::all_session_artifacts(&**store, row.id).await?;
        let checkpoint: Vec<Artifact> =
            crate::salvage_checkpoint::newest_checkpoints(all, row.revision)
                .into_values()
                .collect();
        let restored_from = checkpoint.iter().map(|a| a.created_at).max();
        let taken = restored_from.map(|at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string());
        let interrupted_at = crate::closers::last_event_at(log).await?;
        let message = crate::resume::message(row, taken.as_deref(), &original);
        // The lost attempt's open turn is closed before this one's events,
        // and the log says which attempt follows.
        let mut events = crate::closers::closers_of(log).await?.closers;
        events.push(Event::korvus(EventKind::Note {
            text: crate::resume::attempt_note(row, taken.as_deref()),
        }));
        log.append(&events).await?;
        Ok((
            row.revision,
            Some(Resume {
                message,
                own,
                checkpoint,
                resumed: Some(korvus_runner::Resumed::new(interrupted_at, restored_from)),
            }),
        ))
    }

    /// The incident and the inherited context (artifact and role, in
    /// stored order) of a claimed session.
    async fn read_claimed(
        &self,
        row: &Session,
    ) -> crate::Result<(korvus_store::Incident, Vec<(Artifact, String)>)> {
        let store = &self.inner.store;
        let incident = store.get_incident(row.incident_id).await?;
        let refs = store.list_context_refs(row.id).await?;
        let ids: Vec<_> = refs.iter().map(|r| r.artifact_id).collect();
        let artifacts = store.get_artifacts(&ids).await?;
        let inherited = refs
            .into_iter()
            .zip(artifacts)
            .map(|(r, a)| (a, r.role))
            .collect();
        Ok((incident, inherited))
    }
}
