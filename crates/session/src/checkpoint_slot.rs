//! [`CheckpointSlot`]: a live run's checkpoints, shared by the run (its
//! turn-end hook, its landing) and the manager's checkpoint scheduler
//! (`checkpoints.rs`). A leaf module: [`RunState`](crate::live_state::RunState)
//! holds one once the run's agent started.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use korvus_harvest::Checkpointer;
use korvus_runner::CheckpointHook;

/// One run's checkpointer and when it is due.
#[derive(Debug)]
pub(crate) struct CheckpointSlot {
    /// The checkpointer, until the landing takes it. Held across a
    /// checkpoint: the landing waits for one in flight, and two never
    /// overlap.
    checkpointer: tokio::sync::Mutex<Option<Checkpointer>>,
    /// A turn ended since the last checkpoint began: due now.
    turn_ended: AtomicBool,
    /// When the last checkpoint began (or the slot was made).
    last: Mutex<Instant>,
    /// A checkpoint of this run is scheduled or running.
    busy: AtomicBool,
    /// The runner's: called before each checkpoint, so what only the
    /// runner can reach (the agent's thread) is in the dir.
    hook: CheckpointHook,
}

impl CheckpointSlot {
    /// A slot for a run whose agent starts now.
    pub(crate) fn new(checkpointer: Checkpointer, hook: CheckpointHook) -> Self {
        Self {
            hook,
            checkpointer: tokio::sync::Mutex::new(Some(checkpointer)),
            turn_ended: AtomicBool::new(false),
            last: Mutex::new(Instant::now()),
            busy: AtomicBool::new(false),
        }
    }

    /// The agent reported the end of a turn: a checkpoint is due.
    pub(crate) fn turn_ended(&self) {
        self.turn_ended.store(true, Ordering::Release);
    }

    /// Claims the next checkpoint of this run when one is due (a turn
    /// ended, or `interval` passed since the last began) and none is in
    /// flight; the caller then runs [`checkpoint`](Self::checkpoint).
    pub(crate) fn claim_due(&self, interval: Duration) -> bool {
        let elapsed = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        let due = self.turn_ended.load(Ordering::Acquire) || elapsed >= interval;
        due && !self.busy.swap(true, Ordering::AcqRel)
    }

    /// Runs one checkpoint (after [`claim_due`](Self::claim_due)), given
    /// up after `bound` — the landing waits for it, so a hung blob store
    /// must not hold the run's end (rows a checkpoint cut short wrote stay
    /// hidden; its bytes are the sweeper's). Nothing once the landing took
    /// the checkpointer. Returns its outcome, `Err` when it was cut short.
    pub(crate) async fn checkpoint(
        &self,
        bound: Duration,
    ) -> Option<Result<korvus_harvest::CheckpointOutcome, tokio::time::error::Elapsed>> {
        let mut held = self.checkpointer.lock().await;
        let outcome = match held.as_mut() {
            Some(checkpointer) => {
                self.turn_ended.store(false, Ordering::Release);
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                let hook = self.hook.clone();
                let checkpoint = async {
                    // The runner's copy first (blocking file work), then
                    // the walk that stores it.
                    let _ = tokio::task::spawn_blocking(move || hook.call()).await;
                    checkpointer.checkpoint().await
                };
                Some(tokio::time::timeout(bound, checkpoint).await)
            }
            None => None,
        };
        self.busy.store(false, Ordering::Release);
        outcome
    }

    /// Takes the checkpointer for the landing, once a checkpoint in flight
    /// finished: none runs after. The runner's hook is cleared first (a
    /// runner that returned without clearing it — an error, or dropped
    /// past its grace — must not write into the dir the landing walks),
    /// waiting at most `bound` for a call of it still in flight.
    pub(crate) async fn take(&self, bound: Duration) -> Option<Checkpointer> {
        let hook = self.hook.clone();
        let cleared = tokio::task::spawn_blocking(move || hook.clear());
        if tokio::time::timeout(bound, cleared).await.is_err() {
            tracing::warn!(
                ?bound,
                "the runner's checkpoint hook is still running; landing all the same"
            );
        }
        self.checkpointer.lock().await.take()
    }
}
