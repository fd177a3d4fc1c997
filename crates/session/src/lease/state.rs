//! [`LeaseState`]: this manager incarnation's lease in one type. A leaf
//! module: the manager holds one, the heartbeat and reaper (the parent
//! module) read and renew it, and it imports neither.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use korvus_store::{Lease, OwnerId};

/// This incarnation's lease, in one place: who owns its runs, for how long
/// a renewal keeps them, and when the last renewal that succeeded was sent
/// (by this process's monotonic clock).
#[derive(Debug)]
pub(crate) struct LeaseState {
    owner: OwnerId,
    ttl: Duration,
    /// When the last successful renewal was sent (or the manager built):
    /// every lease this manager holds was written at or after it.
    renewed: Mutex<Instant>,
}

impl LeaseState {
    /// A fresh incarnation's lease of `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            owner: OwnerId::new(),
            ttl,
            renewed: Mutex::new(Instant::now()),
        }
    }

    /// The lease every run of this manager is owned under.
    pub(crate) fn lease(&self) -> Lease {
        Lease {
            owner: self.owner,
            ttl: self.ttl,
        }
    }

    /// This incarnation.
    pub(crate) fn owner(&self) -> OwnerId {
        self.owner
    }

    /// Records a renewal sent at `sent` that succeeded.
    pub(super) fn renewed_at(&self, sent: Instant) {
        let mut renewed = self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        *renewed = (*renewed).max(sent);
    }

    /// When the lease of a run registered at `registered` was last written
    /// by a store call this manager knows succeeded (sent at or before the
    /// answer): the newer of the last successful renewal and the run's own
    /// registration (its create, reopen or resume wrote the lease just
    /// before).
    pub(super) fn last_written(&self, registered: Instant) -> Instant {
        let renewed = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        renewed.max(registered)
    }

    /// How long a run's lease may go without a renewal before this manager
    /// stops the run itself: ttl less a fifth, so it is stopped before any
    /// other manager can take it over.
    pub(super) fn lapse_after(&self) -> Duration {
        self.ttl - self.ttl / 5
    }
}
