//! The run's hook on its turn log: every append wakes watchers, and an
//! append the log refuses because a newer run claimed it cancels this run.
//! A hook on the run's one write handle ([`LogHandle::with_append_hook`]),
//! not a second handle wrapping the first.

use std::sync::Arc;

use korvus_log::{AppendHook, EventKind, LogError, LogHandle};
use tracing::warn;

use crate::live::LiveRun;

/// `log` with the hook of `run`: after every stored append its `appended`
/// wakes [`Manager::watch`](crate::Manager::watch) (no polling of the
/// backend in a tight loop) and a stored turn end makes its checkpoint due
/// (its state's slot); a `LogError::Fenced` append fires its cancellation
/// — the run was superseded and must stop.
pub(crate) fn notifying(log: LogHandle, run: &LiveRun) -> LogHandle {
    let (notify, cancel, state) = (Arc::clone(&run.appended), run.cancel.clone(), run.state());
    let hook: AppendHook = Arc::new(move |events, outcome| match outcome {
        Ok(()) => {
            notify.notify_waiters();
            // A turn's end makes a checkpoint due (`checkpoints.rs`).
            let turn_ended = events
                .iter()
                .any(|e| matches!(e.kind, EventKind::TurnEnd { .. }));
            if let (true, Some(slot)) = (turn_ended, state.checkpoints.get()) {
                slot.turn_ended();
            }
        }
        Err(e @ LogError::Fenced { .. }) => {
            if !cancel.is_cancelled() {
                warn!(error = %e, "the turn log has a newer writer: this run was superseded; cancelling it");
                cancel.cancel();
            }
        }
        Err(_) => {}
    });
    log.with_append_hook(hook)
}
