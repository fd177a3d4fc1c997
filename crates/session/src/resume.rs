//! Resuming a run whose owner was lost
//! ([`ManagerBuilder::resume_orphans`](crate::ManagerBuilder::resume_orphans)).
//!
//! The reaper that took an orphan over, instead of settling it: fences its
//! turn log, stops what the dead attempt left running here, stores the
//! scratch dir that attempt left on this host as a checkpoint of the
//! revision (and removes the dir: the next attempt never runs in it), and
//! releases the row as resume pending
//! ([`Coordination::release_for_resume`](korvus_store::Coordination::release_for_resume))
//! with a backoff. Any manager of the pool then claims it like a queued
//! session (`admission.rs`), restores the revision's last checkpoint into
//! a fresh scratch dir and runs the agent again as a resume of the same
//! revision, with [`message`] first. Where the dir here cannot be stored
//! whole, or the attempts are used up, or a cancel is pending, the orphan
//! is settled as before (its dir kept and salvaged).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use korvus_harvest::{Checkpointer, PersistRequest};
use korvus_store::Session;
use tracing::{info, warn};

use crate::inner::Inner;
use crate::run::RunKey;
use crate::SessionError;

/// What a resumed attempt's agent reads first: that its run was
/// interrupted (its korvus process stopped and handed it off, or was
/// lost), how far its files are restored, and
/// the revision's own message to continue from.
/// `taken` is when the restored checkpoint was taken, as text.
pub(crate) fn message(row: &Session, taken: Option<&str>, original: &str) -> String {
    let restored = match taken {
        Some(at) => format!("its files are restored as of {at}"),
        None => "no checkpoint of its files was stored, so they are as at its start".to_owned(),
    };
    format!(
        "[korvus] This run was interrupted when the korvus process running it stopped or was \
         lost (attempt {} of revision {}); {restored}. Continue the task from where it \
         stopped:\n\n{original}",
        row.attempt.saturating_sub(1),
        row.revision,
    )
}

/// The note a resumed attempt's log gets first (after the lost attempt's
/// open turns are closed).
pub(crate) fn attempt_note(row: &Session, taken: Option<&str>) -> String {
    let from = match taken {
        Some(at) => format!("its files restored from the checkpoint taken at {at}"),
        None => "no checkpoint of its files to restore".to_owned(),
    };
    format!(
        "attempt {} of revision {}: resumed after its previous attempt was interrupted, {from}",
        row.attempt, row.revision
    )
}

/// The wait before attempt `attempt + 1` may start: at least `base`
/// doubled per attempt already made past the first (at least a minute
/// once that passes a minute), at most twice that — korvus's one
/// jittered [`Backoff`](korvus_store::Backoff) with twice the base, so
/// the jitter never shortens the wait below `base`.
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    korvus_store::Backoff::new(base.saturating_mul(2), Duration::from_secs(120)).delay(attempt)
}

impl Inner {
    /// Whether the orphan `row` (taken over) is resumed rather than
    /// settled: resumes are on, its run started, no cancel is pending, and
    /// it has attempts left.
    pub(crate) fn may_resume(&self, row: &Session) -> bool {
        let max = self.config.resume_orphans;
        max > 0 && row.started_at.is_some() && !row.cancel_requested && row.attempt < max
    }

    /// Sends the orphan `row` (taken over at `row.fence`) back to its pool
    /// to be resumed. `None` when it must be settled instead: the dir its
    /// dead attempt left here could not be stored whole (the settlement's
    /// salvage keeps it).
    ///
    /// # Errors
    /// The store's or the log's error; the orphan is then left to a later
    /// takeover.
    pub(crate) async fn release_for_resume(
        &self,
        row: &Session,
    ) -> Result<Option<Session>, SessionError> {
        // A revision whose report row the dead attempt wrote is landed:
        // settled (adopting that row), never run again.
        if self.store.get_report(row.id, row.revision).await.is_ok() {
            return Ok(None);
        }
        self.claim_log_retried(row).await?;
        self.stop_dead_agents(row.id).await;
        if !self.checkpoint_dead_dir(row).await {
            return Ok(None);
        }
        // A cancel that came while the dir was stored wins.
        if self.store.get_session(row.id).await?.cancel_requested {
            return Ok(None);
        }
        let wait = backoff(self.config.resume_backoff, row.attempt);
        let pending = match self.store.release_for_resume(row.id, row.fence, wait).await {
            Ok(pending) => pending,
            // A cancel requested since the check above: the store refuses
            // the release, and the orphan is settled.
            Err(e) => {
                let now = self.store.get_session(row.id).await?;
                if now.fence == row.fence && now.cancel_requested {
                    return Ok(None);
                }
                return Err(e.into());
            }
        };
        warn!(session_id = %row.id, attempt = pending.attempt, ?wait, "the orphan goes back to its pool to be resumed");
        crate::metrics::resumed();
        self.slots.nudge();
        Ok(Some(pending))
    }

    /// Stores the scratch dir the dead attempt of `row` left on this host
    /// as a checkpoint of its revision, at the takeover's fence, and
    /// removes it. `true` when there is none, or it was stored whole.
    async fn checkpoint_dead_dir(&self, row: &Session) -> bool {
        let Some(root) = &self.scratch else {
            return true;
        };
        let dir = root.join(row.id.to_string()).join(row.revision.to_string());
        let is_dir = tokio::fs::symlink_metadata(&dir)
            .await
            .is_ok_and(|m| m.file_type().is_dir());
        if !is_dir {
            return true;
        }
        if !self.checkpoint_dir(RunKey::of(row), &dir, None).await {
            return false;
        }
        if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
            warn!(session_id = %row.id, error = %e, "the lost attempt's dir not removed: settling instead of resuming");
            return false;
        }
        true
    }

    /// Stores `dir` whole as a checkpoint of run `key`'s revision, at its
    /// fence — through `checkpointer` when the run had one (it stores only
    /// what changed since its last checkpoint). `false` when something of
    /// it could not be stored, or there is no blob store to store it in.
    pub(crate) async fn checkpoint_dir(
        &self,
        key: RunKey,
        dir: &Path,
        checkpointer: Option<Checkpointer>,
    ) -> bool {
        let Some(blobs) = &self.blobs else {
            return false;
        };
        let mut checkpointer = match checkpointer {
            Some(c) => c,
            None => Checkpointer::new(
                Arc::clone(&self.store).into_store(),
                Arc::clone(blobs),
                self.config.persist.clone(),
                PersistRequest {
                    incident: key.incident,
                    session: key.session,
                    revision: key.revision,
                    fence: key.fence,
                    scratch: Some(dir.to_path_buf()),
                    skip_prefixes: self.read_only.clone(),
                    restored: self.restored_before(key.session, key.revision, false).await,
                },
            ),
        };
        let outcome = checkpointer.checkpoint().await;
        if outcome.reason.is_some() || !outcome.failed.is_empty() {
            warn!(session_id = %key.session, reason = ?outcome.reason, failed = outcome.failed.len(), "the dir was not stored whole as a checkpoint");
            return false;
        }
        info!(session_id = %key.session, stored = outcome.stored.len(), unchanged = outcome.unchanged, "stored the dir as a checkpoint");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_per_attempt_up_to_a_minute_jittered_upwards() {
        let base = Duration::from_secs(1);
        for (attempt, least) in [(1, 1), (2, 2), (4, 8), (40, 60)] {
            let wait = backoff(base, attempt);
            let least = Duration::from_secs(least);
            assert!(wait >= least && wait <= least * 2, "{attempt}: {wait:?}");
        }
        assert_eq!(backoff(Duration::ZERO, 3), Duration::ZERO);
    }
}
