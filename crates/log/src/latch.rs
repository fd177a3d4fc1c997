//! [`Latch`]: a one-way signal that waiters can wait for.

use std::sync::atomic::{AtomicBool, Ordering};

/// Opens once and stays open; waiters wait for it (a close that a second
/// `close` waits for). An `AtomicBool` and a `Notify`: a tokio `watch`
/// channel would do, at about six times the size per handle.
#[derive(Debug, Default)]
pub(crate) struct Latch {
    open: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Latch {
    /// Opens it and wakes every waiter.
    pub(crate) fn open(&self) {
        self.open.store(true, Ordering::Release);
        self.wake.notify_waiters();
    }

    /// Waits until it is open. Cancel-safe.
    pub(crate) async fn wait(&self) {
        loop {
            let wake = self.wake.notified();
            let mut wake = std::pin::pin!(wake);
            // Registered before the flag is read: an `open` between the
            // two still wakes this waiter.
            wake.as_mut().enable();
            if self.open.load(Ordering::Acquire) {
                return;
            }
            wake.await;
        }
    }
}
