//! [`Manager::reopen`]: one more iteration of a finished session, and the
//! interrupted-turn closers that repair its log first.

use std::collections::HashMap;

use korvus_log::{Access, Event, EventKind, LogError, LogHandle, LogId, Role};
use korvus_store::{Artifact, ContinueFrom, Incident, Session, SessionId, StoreError};
use tracing::{debug, error, info, info_span, warn, Instrument};

use korvus_runner::ExitReason;

use crate::inner::Inner;
use crate::manager::{join_detached, log_header};
use crate::run::{Plan, Resume, RunKey};
use crate::{Manager, Result, SessionError};

/// How a session is continued with a new message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Continue {
    /// A terminal session is reopened (`reopen`).
    Reopen,
    /// An idle session — `running`, waiting for the user — gets the user's
    /// answer (`send_message`).
    Answer,
}

impl Continue {
    /// Whether `row` is in the state this continuation starts from.
    fn accepts(self, row: &Session) -> bool {
        match self {
            Continue::Reopen => row.status.is_terminal(),
            Continue::Answer => row.is_idle(),
        }
    }

    /// The error for a row in another state.
    fn refused(self, session: SessionId) -> SessionError {
        match self {
            Continue::Reopen => SessionError::NotFinished { session },
            Continue::Answer => SessionError::NotAwaitingUser { session },
        }
    }
}

impl Manager {
    /// Reopens a finished session with a new message: one more iteration in
    /// a fresh scratch dir, with its inherited context and its own earlier
    /// output restored, landing the next report revision.
    ///
    /// The row decides, not the live-run table: a non-terminal row is
    /// `NotFinished`. If this process's previous run of the session is still
    /// unwinding, it is waited for first. Everything the iteration needs is
    /// read **before** the store's conditional reopen, so the loser of a race
    /// (`NotFinished`) writes nothing. The stream's finished latch is lifted
    /// before this returns, so a watcher subscribing right after sees the new
    /// iteration. The log is then repaired (its interrupted turns and tool calls closed) and
    /// the message appended.
    ///
    /// # Errors
    /// `ShuttingDown`, `MessageRequired`, `NotFinished`, `NotFound`, `Store`, `Log`.
    ///
    /// # Cancel safety
    /// Cancel-safe in effect: the work runs on its own task, so dropping the
    /// future cannot strand a reopened row without its run. Dropped before
    /// that, while it stores kept output first, nothing is continued (see
    /// [`salvage`](Manager::salvage)).
    pub async fn reopen(&self, id: SessionId, message: &str) -> Result<Session> {
        self.continue_with(id, message, Continue::Reopen).await
    }

    /// Answers a session that is waiting for the user (its runner returned
    /// `awaiting_user`; the row is `running` with that exit reason): one
    /// more iteration exactly as [`reopen`](Manager::reopen) runs one for a
    /// finished session — next report revision, own output restored,
    /// `Runner::resume` with `message`.
    ///
    /// The transition is one conditional store call: of a racing `cancel`
    /// and `send_message` (on any replica) exactly one wins; the loser gets
    /// `NotAwaitingUser` and nothing is written.
    ///
    /// # Errors
    /// `ShuttingDown`, `MessageRequired`, `NotAwaitingUser`, `NotFound`,
    /// `Store`, `Log`.
    ///
    /// # Cancel safety
    /// As `reopen`.
    pub async fn send_message(&self, id: SessionId, message: &str) -> Result<Session> {
        self.continue_with(id, message, Continue::Answer).await
    }

    async fn continue_with(&self, id: SessionId, message: &str, how: Continue) -> Result<Session> {
        let inner = &self.inner;
        let guard = inner.runs.join();
        self.check_not_stopping()?;
        if message.trim().is_empty() {
            return Err(SessionError::MessageRequired);
        }
        // Output an earlier run could not store is stored first: the next
        // run restores it, and it never starts without it. Before the row
        // is read for the transition, so a salvage does not widen the
        // window between that read and the transition.
        salvage_first(inner, id, how).await?;
        let row = inner.store.get_session(id).await?;
        let span =
            info_span!("continue", session_id = %id, incident_id = %row.incident_id, how = ?how);
        let this = self.clone();
        let message = message.to_owned();
        // On its own task: once the store's transition is made, dropping the
        // caller's future must not leave a running row without its run.
        let work = async move {
            let inner = &this.inner;
            if !how.accepts(&row) {
                return Err(how.refused(id));
            }
            wait_for_unwinding(inner, &row, how).await?;

            // Read everything before the transition.
            let Reading {
                incident,
                log,
                created,
                closers,
                next_revision,
                inherited,
                own,
            } = read_before_transition(inner, &row).await?;

            // Transition: one conditional statement; the loser saves nothing.
            let from = match how {
                Continue::Reopen => ContinueFrom::Terminal,
                Continue::Answer => ContinueFrom::Idle,
            };
            let transition = inner
                .store
                .continue_session(id, from, Some(inner.lease()))
                .await;
            let session = match transition {
                Ok(session) => session,
                Err(e) => {
                    // A log this reopen created for a session that is now
                    // gone (a prune deleted it meanwhile) is removed. Any
                    // other loss keeps it: a concurrent reopen that won may
                    // be using it already.
                    if created && matches!(e, StoreError::NotFound { .. }) {
                        drop(log);
                        remove_created_log(inner, id).await;
                    }
                    return Err(e.into());
                }
            };
            // A run of this session that died on this host (its process
            // was killed) may have left its agent running: stop it before
            // the new run uses the session.
            let _ = inner.stop_dead_agents(id).await;
            // A report row that failed to land leaves the next report
            // revision behind the session's: never reuse a revision (its
            // report key may already hold bytes an artifact row describes).
            let revision = next_revision.max(session.revision);
            if let Some(reopener) = inner.reopener.clone() {
                // A panicking reopener must not strand the running row.
                if let Err(e) = tokio::spawn(async move { reopener.reopen(id).await }).await {
                    warn!(error = %e, "stream reopener panicked");
                }
            }
            // From here on the log refuses the writers of earlier runs.
            let repaired = match log.claim_epoch(session.fence).await {
                Ok(()) => repair(&log, &closers, &message).await,
                Err(e) => Err(e),
            };
            if let Err(e) = repaired {
                error!(error = %e, "turn log not repaired; settling the session failed");
                let ended = RunKey {
                    revision,
                    ..RunKey::of(&session)
                };
                let ended = inner.fail_early(ended, ExitReason::TURN_LOG_FAILED).await;
                inner.settle(id, ended).await;
                return Err(e.into());
            }
            info!(revision, closers = closers.len(), "session continued");
            // No free slot (or a per-key cap, which only a claim counts):
            // queued with its message already in the log, where the
            // manager that claims it reads it.
            let Some(slot) = inner.slot_for_new() else {
                return queue_continued(inner, log, session, revision).await;
            };
            let resume = Some(Resume::continued(message, own));
            let plan = Plan::new(session.clone(), revision, incident, inherited, resume);
            this.launch(plan, log, guard, slot);
            Ok(session)
        }
        .instrument(span);
        join_detached(work).await
    }
}

/// Stores the kept dirs of session `id` under this manager's scratch root
/// before the session continues (`kept.rs`); `OutputKept` when one of them
/// cannot be stored whole now, with nothing continued. Nothing is done for
/// a row the continue refuses anyway, or without a blob store (nothing
/// could be stored); a salvage another caller made first is seen, and a
/// store that fails transiently is its own error (try again).
async fn salvage_first(inner: &Inner, id: SessionId, how: Continue) -> Result<()> {
    if inner.blobs.is_none() {
        return Ok(());
    }
    for _ in 0..3 {
        let kept = inner.kept_dirs(id).await?;
        let Some(first) = kept.into_iter().find(|k| !k.run_alive) else {
            return Ok(());
        };
        let row = inner.store.get_session(id).await?;
        if !how.accepts(&row) {
            return Ok(());
        }
        let done = match inner.salvage_kept(row).await {
            Ok((_, done, _)) => done,
            // Another salvage (or a reopen) moved the row: look again.
            Err(SessionError::Store(e)) if e.is_fenced_off() => continue,
            Err(SessionError::Store(e)) if e.is_transient() => return Err(SessionError::Store(e)),
            Err(e) => {
                return Err(SessionError::OutputKept {
                    session: id,
                    revision: first.revision,
                    dir: first.path.clone(),
                    reason: crate::error::chain(&e),
                })
            }
        };
        return match done.into_iter().find(|d| !d.complete) {
            None => Ok(()),
            Some(d) => Err(SessionError::OutputKept {
                session: id,
                revision: d.revision,
                dir: d.dir,
                reason: d.detail.unwrap_or_default(),
            }),
        };
    }
    Ok(())
}

/// Queues a continued session whose message is in its log: the log
/// closed — durably: the claimer resumes with the last user message it
/// finds there — then the session given back to the queue. A log that
/// cannot be closed fails the revision (`turn_log_failed`) instead: queued,
/// the session could resume with an older message.
async fn queue_continued(
    inner: &Inner,
    log: LogHandle,
    session: Session,
    revision: u32,
) -> Result<Session> {
    if let Err(e) = log.close().await {
        error!(error = %e, "turn log of the continue not closed; settling the session failed");
        let ended = RunKey {
            revision,
            ..RunKey::of(&session)
        };
        let ended = inner.fail_early(ended, ExitReason::TURN_LOG_FAILED).await;
        inner.settle(session.id, ended).await;
        return Err(e.into());
    }
    let session = inner.enqueue(session).await;
    info!(queued = session.is_queued(), "continued session queued");
    inner.slots.set_waiting(true);
    inner.slots.nudge();
    Ok(session)
}

/// Closes interrupted turns, then appends the user's message.
async fn repair(log: &LogHandle, closers: &[Event], message: &str) -> korvus_log::Result<()> {
    log.append(closers).await?;
    log.append(&[Event::korvus(EventKind::Message {
        role: Role::User,
        text: message.to_owned(),
    })])
    .await
}

/// What a reopen reads before the store's transition, so the loser of a
/// race has written nothing.
struct Reading {
    incident: Incident,
    /// The session's log, open for write: this process's claim on it.
    log: LogHandle,
    /// Whether this reopen created the log (there was none): a lost
    /// transition removes it again.
    created: bool,
    closers: Vec<Event>,
    next_revision: u32,
    inherited: Vec<(Artifact, String)>,
    own: Vec<Artifact>,
}

/// A local run that wrote `row` — or one a forced cancel or takeover
/// fenced off, at an older fence — may still be unwinding (cleaning up,
/// deregistering): waits for it to finish. A live run at a newer fence
/// than `row` is a concurrent caller's new run: that caller won, and this
/// one must not wait for the run to end.
async fn wait_for_unwinding(inner: &Inner, row: &Session, how: Continue) -> Result<()> {
    let id = row.id;
    let live = inner.live.get(id);
    if live.as_ref().is_some_and(|run| run.fence > row.fence) {
        return Err(how.refused(id));
    }
    if let Some(run) = live {
        run.settled().await;
        // What we waited for may have been a concurrent caller's new run
        // rather than the old one unwinding: then we lost.
        let now = inner.store.get_session(id).await?;
        if now.revision != row.revision || !how.accepts(&now) {
            return Err(how.refused(id));
        }
    }
    Ok(())
}

/// Removes the log a reopen created for a session that turned out to be
/// gone; a failure is only logged (a later prune removes a log whose
/// session is gone).
async fn remove_created_log(inner: &Inner, id: SessionId) {
    if let Err(e) = inner.logs.delete(LogId::from_uuid(id.as_uuid())).await {
        warn!(error = %e, "the log this reopen created was not removed");
    }
}

async fn read_before_transition(inner: &Inner, row: &Session) -> Result<Reading> {
    let incident = inner.store.get_incident(row.incident_id).await?;
    let (log, created) = open_log(inner, row).await?;
    match read_with_log(inner, row, &log, created).await {
        Ok((closers, next_revision, inherited, own)) => Ok(Reading {
            incident,
            log,
            created,
            closers,
            next_revision,
            inherited,
            own,
        }),
        Err(e) => {
            // Only when the session is gone (see the transition above).
            if created
                && matches!(
                    inner.store.get_session(row.id).await,
                    Err(StoreError::NotFound { .. })
                )
            {
                drop(log);
                remove_created_log(inner, row.id).await;
            }
            Err(e)
        }
    }
}

/// The session's log open for write, and whether this call created it.
async fn open_log(inner: &Inner, row: &Session) -> Result<(LogHandle, bool)> {
    let id = row.id;
    let mut created = false;
    let log = match inner
        .logs
        .open(LogId::from_uuid(id.as_uuid()), Access::Write)
        .await
    {
        Ok(log) => log,
        // The configured backend has no log of this session (a deployment
        // that added or changed its turn log later): the log is an
        // enhancement, so the reopen starts one instead of refusing.
        Err(LogError::NotFound { .. }) => {
            warn!(session_id = %id, "the session has no turn log in the configured backend; starting one");
            created = true;
            match inner.logs.create(log_header(row.incident_id, id)).await {
                Ok(log) => log,
                // A concurrent reopen of this session created it first.
                Err(LogError::AlreadyExists { .. } | LogError::AlreadyOwned { .. }) => {
                    return Err(SessionError::NotFinished { session: id })
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Another reopen of this process holds the writer: it is winning
        // the same race.
        Err(LogError::AlreadyOwned { .. }) => {
            return Err(SessionError::NotFinished { session: id })
        }
        Err(e) => return Err(e.into()),
    };
    Ok((log, created))
}

/// What a continue reads with the log open: the closers, the next report
/// revision, the inherited and the own artifacts.
async fn read_with_log(
    inner: &Inner,
    row: &Session,
    log: &LogHandle,
    created: bool,
) -> Result<(Vec<Event>, u32, Vec<(Artifact, String)>, Vec<Artifact>)> {
    let id = row.id;
    let closers = if created {
        // Nothing was logged, so no turn was left open; the note says why
        // the log starts here.
        vec![Event::korvus(EventKind::Note {
            text: format!(
                "this session had no turn log in the configured backend; its log starts \
                 with revision {}",
                row.revision + 1
            ),
        })]
    } else {
        let read = crate::closers::closers_of(log).await?;
        debug!(
            from = read.from,
            len = read.len,
            closers = read.closers.len(),
            "closers computed from the log since its last repair"
        );
        read.closers
    };
    let next_revision = inner.store.next_report_revision(id).await?;
    let refs = inner.store.list_context_refs(id).await?;
    let ids: Vec<_> = refs.iter().map(|r| r.artifact_id).collect();
    let mut by_id: HashMap<_, Artifact> = inner
        .store
        .get_artifacts(&ids)
        .await?
        .into_iter()
        .map(|a| (a.id, a))
        .collect();
    let inherited = refs
        .iter()
        .filter_map(|r| by_id.remove(&r.artifact_id).map(|a| (a, r.role.clone())))
        .collect();
    let own = inner.store.latest_session_artifacts(id).await?;
    Ok((closers, next_revision, inherited, own))
}
