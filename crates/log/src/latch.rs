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

impl Latch {
    /// A guard that opens the latch when it is dropped (also while
    /// unwinding).
    pub(crate) fn on_drop(self: &std::sync::Arc<Self>) -> OpenOnDrop {
        OpenOnDrop(std::sync::Arc::clone(self))
    }
}

/// Opens its latch when dropped: see [`Latch::on_drop`].
pub(crate) struct OpenOnDrop(std::sync::Arc<Latch>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}
