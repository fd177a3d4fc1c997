//! Hand-off on a rolling deploy ([`Manager::drain`]): instead of
//! cancelling its runs, a stopping manager asks each run's agent to stop,
//! stores its scratch dir as a checkpoint of the revision, removes the
//! dir, and releases the session as *resume pending*
//! ([`Coordination::release_for_resume`](korvus_store::Coordination::release_for_resume),
//! no backoff) — so another manager of the pool claims it and runs the
//! agent again as a resume of the same revision (`admission.rs`), exactly
//! as after a takeover (`resume.rs`). What is still queued stays queued.

use std::sync::atomic::Ordering;
use std::time::Duration;

use korvus_harvest::Checkpointer;
use korvus_log::{Event, EventKind};
use tracing::{info, warn};

use crate::cleanup::{cleanup, Leftovers};
use crate::execute::RunResult;
use crate::manager::Manager;
use crate::prepare::Prepared;
use crate::run::Run;

impl Manager {
    /// Hands this manager's runs off to its pool and shuts down — for a
    /// rolling deploy, where [`stop`](Manager::stop) would cancel every
    /// session in flight. Like `stop`, it refuses new creates and reopens
    /// and stops claiming (claims on their way are given back; what is
    /// queued stays queued). Each run in progress is cancelled (its agent
    /// gets the cancel grace to stop); a run whose agent had started is
    /// then stored as a checkpoint of its revision — continued revisions
    /// (reopens, answers) included, whose message the log already holds
    /// — its dir removed, and its session released as resume pending
    /// ([`Session::is_resume_pending`](korvus_store::Session::is_resume_pending)):
    /// another manager of the pool resumes it. A first run that had not
    /// started goes back to the queue. Where a dir cannot be stored whole,
    /// the run lands `cancelled` as `stop` would land it, its output kept.
    /// A run that ended on its own meanwhile lands as it ended.
    ///
    /// Returns `true` once every run has been handed off (or landed) and
    /// released, `false` when `deadline` passed first: the rest go on
    /// unwinding in the background, and a run this process does not live
    /// to release is resumed by another manager's reaper once its lease
    /// expires. A lone manager's hand-offs wait, pending, for the next one
    /// to start. A hand-off is an attempt of the revision: it is never
    /// refused, but a session handed off N times has N fewer of
    /// [`resume_orphans`](crate::ManagerBuilder::resume_orphans)' resumes
    /// left should a later attempt lose its owner.
    ///
    /// # Cancel safety
    /// As `stop`'s: dropping the future stops the waiting, not the drain.
    pub async fn drain(&self, deadline: Duration) -> bool {
        let inner = &self.inner;
        inner.claiming_stopped.store(true, Ordering::SeqCst);
        inner.draining.store(true, Ordering::SeqCst);
        inner.shutting_down.store(true, Ordering::SeqCst);
        let first = !inner.stop_started.swap(true, Ordering::SeqCst);
        if first {
            let n = inner.live.stop_all(true);
            info!(runs = n, "drain: handing every local run off to the pool");
        }
        let done = tokio::time::timeout(deadline, self.wait()).await.is_ok();
        if !done {
            warn!(?deadline, "drain: runs still unwinding at the deadline");
        }
        if done && first {
            self.release_owned_root().await;
        }
        done
    }

    /// Removes an owned scratch root once the last run released it (at
    /// the end of `stop` or `drain`).
    pub(crate) async fn release_owned_root(&self) {
        let root = self
            .inner
            .owned_root
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(root) = root {
            if let Err(e) = root.release().await {
                warn!(error = %e, "owned scratch root not removed");
            }
        }
    }
}

/// How a run's hand-off went.
pub(crate) enum HandOff {
    /// Handed off: the session waits to be resumed (or for a reaper);
    /// nothing lands and nothing settles.
    Done,
    /// Not a hand-off, or one that could not store the dir whole: the run
    /// lands as it ended, with its checkpointer if it still has one.
    Land(Option<Checkpointer>),
}

impl Run<'_> {
    /// Hands the run off when the manager's drain cancelled it (no caller
    /// had) and its runner came back cancelled: its dir stored as a
    /// checkpoint (through the run's own `checkpointer`, when it had one),
    /// a note, the log closed, the dir removed, the session released as
    /// resume pending.
    pub(crate) async fn hand_off(
        &self,
        result: &RunResult,
        prepared: &mut Prepared,
        checkpointer: Option<Checkpointer>,
    ) -> HandOff {
        let cancelled = matches!(result, RunResult::Cancelled(_));
        if !cancelled || !self.live.handoff.load(Ordering::Acquire) {
            return HandOff::Land(checkpointer);
        }
        let inner = self.inner;
        if let Some(dir) = prepared.dir.as_ref().map(|d| d.path().to_path_buf()) {
            // Through a fresh checkpointer when the run's own one is gone;
            // bounded as a landing's persist phase is.
            let stored = tokio::time::timeout(
                inner.config.persist.timeout,
                inner.checkpoint_dir(self.key, &dir, checkpointer),
            )
            .await;
            if !matches!(stored, Ok(true)) {
                warn!("the hand-off's checkpoint was not stored whole in time: the run lands cancelled");
                return HandOff::Land(None);
            }
        }
        // A cancel that came meanwhile (`Manager::cancel` clears the mark):
        // the run lands cancelled, as asked.
        if !self.live.handoff.load(Ordering::Acquire) {
            return HandOff::Land(None);
        }
        let note = Event::korvus(EventKind::Note {
            text: format!(
                "handed off: the korvus process running revision {} stopped; its files are \
                 stored as a checkpoint and another manager of the pool resumes it",
                self.key.revision
            ),
        });
        if let Err(e) = self.log.append(&[note]).await {
            warn!(error = %e, "the hand-off note was not logged");
        }
        Box::pin(self.close_log()).await;
        // The dir goes before the release: a manager of the same scratch
        // root that claims the resume never finds it.
        let dir = prepared.dir.take();
        Box::pin(cleanup(inner, Leftovers::removing(None, dir))).await;
        match inner
            .store
            .release_for_resume(self.key.session, self.key.fence, Duration::ZERO)
            .await
        {
            Ok(pending) => {
                info!(
                    attempt = pending.attempt,
                    "handed off: the session waits to be resumed by its pool"
                );
                crate::metrics::resumed();
            }
            // Its files are stored: a reaper resumes it once this
            // manager's lease lapses.
            Err(e) => warn!(error = %e, "the hand-off was not released; a reaper resumes it"),
        }
        HandOff::Done
    }
}
