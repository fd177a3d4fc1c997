//! [`Inner`]: what every phase of every run shares. A leaf: the builder
//! makes it, `stop` tears it down, and the phases read its `pub(crate)`
//! fields directly.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use korvus_blob::BlobStore;
use korvus_log::TurnLog;
use korvus_runner::{DocsSearch, Runner};
use korvus_store::{CoordinatedStore, Lease};
use korvus_workspace::{ScratchRoot, Seeder, WorkspacePath};

use crate::config::Config;
use crate::lease::state::LeaseState;
use crate::live::{LiveRuns, RunGroup, Slots};
use crate::StreamReopener;

/// What every phase of every run shares: the collaborators, the
/// configuration and the live-run table.
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn CoordinatedStore>,
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) blobs: Option<Arc<dyn BlobStore>>,
    pub(crate) logs: Arc<dyn TurnLog>,
    /// The scratch root's path, when runs get a workspace.
    pub(crate) scratch: Option<PathBuf>,
    /// A root this manager made and removes on `stop`.
    pub(crate) owned_root: Mutex<Option<ScratchRoot>>,
    pub(crate) seeder: Option<Arc<dyn Seeder>>,
    /// The single deny list of the seeded trees and `context/`.
    pub(crate) read_only: Vec<WorkspacePath>,
    pub(crate) docs: Option<Arc<dyn DocsSearch>>,
    pub(crate) reopener: Option<Arc<dyn StreamReopener>>,
    /// Where budgets are kept, when this manager sets them.
    pub(crate) budgets: Option<Arc<dyn korvus_store::Budgets>>,
    pub(crate) config: Config,
    /// The runs of this process, keyed by session.
    pub(crate) live: LiveRuns,
    /// Creates and reopens in flight plus runs not yet released.
    pub(crate) runs: RunGroup,
    pub(crate) shutting_down: AtomicBool,
    /// Set by [`Manager::stop_claiming`] (and by `stop`): the admission
    /// loop claims nothing more.
    pub(crate) claiming_stopped: AtomicBool,
    pub(crate) stop_started: AtomicBool,
    /// Set by `Manager::drain` before `shutting_down`: a run launched
    /// after it is handed off too (`supervise.rs`).
    pub(crate) draining: AtomicBool,
    /// This incarnation's lease: the owner of every run it starts, its
    /// ttl and its last renewal.
    pub(crate) ownership: LeaseState,
    /// This manager's run slots (`max_running`).
    pub(crate) slots: Slots,
}

impl Inner {
    /// A run slot for a new run (a create or a continue), when it may
    /// start here at once: a slot is free and nothing known to be queued
    /// waits for it. With a per-key cap never: every new run is queued and
    /// claimed, because only a claim counts the key's runs under the key's
    /// lock.
    pub(crate) fn slot_for_new(&self) -> Option<crate::live::Slot> {
        match self.config.per_key {
            Some(_) => None,
            None => self.slots.try_take_for_new(),
        }
    }

    /// The lease every run of this manager is owned under.
    pub(crate) fn lease(&self) -> Lease {
        self.ownership.lease()
    }

    /// Whether [`Manager::stop`] began.
    /// Sequentially consistent: a run registers, then looks; `stop` sets
    /// the flag, then cancels every registered run — one of them sees the
    /// other.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Whether the admission loop may claim no more (see
    /// [`Manager::stop_claiming`]).
    pub(crate) fn is_claiming_stopped(&self) -> bool {
        self.claiming_stopped.load(Ordering::Acquire)
    }
}
