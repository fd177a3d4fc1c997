//! [`RunState`]: what other calls share with a live run — its flags, its
//! cancel time and its settle signal — in one allocation. A leaf module:
//! [`live`](crate::live) holds one per entry.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// The state of a live run that other calls read and set.
#[derive(Debug, Default)]
pub(crate) struct RunState {
    /// Set (before `cancel` fires) when the manager stopped the run because
    /// its lease may have lapsed: it then ends `lease_lost`.
    pub(crate) lease_lost: AtomicBool,
    /// Set (before `cancel` fires) when the manager's `stop` cancelled
    /// the run and nothing had cancelled it before: a first run stopped
    /// before it started then goes back to the queue instead of ending
    /// `cancelled`.
    pub(crate) by_stop: AtomicBool,
    /// Set with `by_stop` when the stop is the manager's drain: a run
    /// whose agent stopped is stored as a checkpoint and sent back to its
    /// pool to be resumed instead of landing `cancelled` (`handoff.rs`).
    pub(crate) handoff: AtomicBool,
    /// When a cancel reached the run (`Manager::cancel` here, or the
    /// poller seeing a request): the start of its cancel latency.
    pub(crate) cancelled_at: std::sync::OnceLock<std::time::Instant>,
    /// The run's checkpoints, once its agent started with a scratch dir
    /// and a blob store (`checkpoints.rs`).
    pub(crate) checkpoints:
        std::sync::OnceLock<std::sync::Arc<crate::checkpoint_slot::CheckpointSlot>>,
    /// Set after the terminal write and deregistration.
    settled: AtomicBool,
    /// Wakes those waiting for `settled`.
    settled_wake: Notify,
}

impl RunState {
    /// Whether the run settled (its terminal write done, or given up, and
    /// its entry removed).
    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// Marks the run settled and wakes those waiting for it.
    pub(crate) fn set_settled(&self) {
        self.settled.store(true, Ordering::Release);
        self.settled_wake.notify_waiters();
    }

    /// Waits until the run settled. Cancel-safe.
    pub(crate) async fn settled(&self) {
        loop {
            let wake = self.settled_wake.notified();
            let mut wake = std::pin::pin!(wake);
            // Registered before the flag is read, so a settle between the
            // two still wakes this waiter.
            wake.as_mut().enable();
            if self.is_settled() {
                return;
            }
            wake.await;
        }
    }
}
