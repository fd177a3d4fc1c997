//! Checkpoints while a run goes: one scheduler per manager stores what
//! changed in each live run's scratch dir at least every
//! `checkpoint_interval` and soon after each turn's end the agent reports,
//! so a replica that dies loses at most an interval of its runs' output —
//! another replica lands the last checkpoint (`salvage.rs`).
//!
//! The scheduler is one task (not a timer in each parked run's future:
//! a parked run holds only its [`CheckpointSlot`], made when its agent
//! starts). Each due checkpoint runs on a task of its own, so one slow
//! checkpoint holds no other run's; a run's checkpoints never overlap (the
//! slot's lock), and its landing takes the checkpointer once one in
//! flight finished, then stores only what changed since
//! (`korvus_harvest::Checkpointer::land`). A checkpoint never blocks the
//! agent: it reads the scratch dir as it is, on blocking threads.

use std::sync::{Arc, Weak};
use std::time::Duration;

use korvus_harvest::Checkpointer;
use korvus_runner::CheckpointHook;
use tracing::{debug, info_span, warn, Instrument as _};

use crate::checkpoint_slot::CheckpointSlot;
use crate::inner::Inner;
use crate::live_state::RunState;
use crate::prepare::Prepared;
use crate::run::RunKey;

/// How often the scheduler looks for due checkpoints at most: a turn's end
/// is checkpointed within about this long.
const TICK: Duration = Duration::from_secs(1);

/// Whether `inner`'s runs are checkpointed: an interval, a blob store and
/// a scratch root.
pub(crate) fn enabled(inner: &Inner) -> bool {
    !inner.config.checkpoint_interval.is_zero() && inner.blobs.is_some() && inner.scratch.is_some()
}

/// Starts `inner`'s checkpoint scheduler, if its runs are checkpointed and
/// a tokio runtime is running. The task ends when the manager is dropped
/// or stops.
pub(crate) fn start(inner: &Arc<Inner>) {
    if !enabled(inner) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        debug!("no runtime: runs are not checkpointed");
        return;
    };
    let weak = Arc::downgrade(inner);
    let interval = inner.config.checkpoint_interval;
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(interval.min(TICK));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !schedule(&weak, interval) {
                return;
            }
        }
    });
}

/// Starts a checkpoint of every live run that is due; `false` once the
/// manager is gone or stopping.
fn schedule(weak: &Weak<Inner>, interval: Duration) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    if inner.is_shutting_down() {
        return false;
    }
    for (session, run) in inner.live.snapshot() {
        let Some(slot) = run.checkpoints.get() else {
            continue;
        };
        if !slot.claim_due(interval) {
            continue;
        }
        let slot = Arc::clone(slot);
        let span = info_span!("checkpoint", session_id = %session);
        let bound = inner.config.persist.timeout;
        tokio::spawn(
            async move {
                let outcome = match slot.checkpoint(bound).await {
                    None => return,
                    Some(Ok(outcome)) => outcome,
                    Some(Err(_)) => {
                        crate::metrics::checkpointed(0, true);
                        warn!(?bound, "checkpoint cut short at the persist bound; the next one tries again");
                        return;
                    }
                };
                let failed = !outcome.failed.is_empty() || !outcome.rows_written;
                crate::metrics::checkpointed(outcome.stored.len() as u64, failed);
                if failed {
                    warn!(stored = outcome.stored.len(), failed = outcome.failed.len(), reason = ?outcome.reason, "checkpoint not stored whole; the next one tries again");
                } else {
                    debug!(stored = outcome.stored.len(), unchanged = outcome.unchanged, "checkpoint stored");
                }
            }
            .instrument(span),
        );
    }
    true
}

/// Gives the run `key`, whose agent starts now in `prepared`'s dir, its
/// checkpoints (`state`'s slot): nothing when `inner`'s runs are not
/// checkpointed or the run has no scratch dir. `hook` is the runner's,
/// called before each checkpoint.
pub(crate) fn attach(
    inner: &Inner,
    state: &RunState,
    key: RunKey,
    prepared: &Prepared,
    hook: &CheckpointHook,
) {
    if !enabled(inner) || prepared.dir.is_none() {
        return;
    }
    let Some(blobs) = inner.blobs.clone() else {
        return;
    };
    let checkpointer = Checkpointer::new(
        Arc::clone(&inner.store).into_store(),
        blobs,
        inner.config.persist.clone(),
        crate::land::landing_request(inner, key, prepared),
    );
    let _ = state
        .checkpoints
        .set(Arc::new(CheckpointSlot::new(checkpointer, hook.clone())));
}

/// The checkpointer of `state`'s run for its landing, once a checkpoint
/// in flight finished (none runs after); `None` when it has none.
pub(crate) async fn take(inner: &Inner, state: &RunState) -> Option<Checkpointer> {
    match state.checkpoints.get() {
        Some(slot) => slot.take(inner.config.cleanup_timeout).await,
        None => None,
    }
}
