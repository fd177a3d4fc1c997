//! [`Inner`]: what every phase of every run shares. Its fields are
//! private to the manager module (the builder makes it, `stop` tears it
//! down); the phases read them through the methods here.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use korvus_blob::BlobStore;
use korvus_log::TurnLog;
use korvus_runner::{DocsSearch, Runner};
use korvus_store::{CoordinatedStore, Lease};
use korvus_workspace::{ScratchRoot, Seeder, WorkspacePath};

use super::Config;
use crate::lease::state::LeaseState;
use crate::live::{LiveRuns, RunGroup, Slots};
use crate::StreamReopener;

/// What every phase of every run shares: the collaborators, the
/// configuration and the live-run table.
pub(crate) struct Inner {
    pub(super) store: Arc<dyn CoordinatedStore>,
    pub(super) runner: Arc<dyn Runner>,
    pub(super) blobs: Option<Arc<dyn BlobStore>>,
    pub(super) logs: Arc<dyn TurnLog>,
    /// The scratch root's path, when runs get a workspace.
    pub(super) scratch: Option<PathBuf>,
    /// A root this manager made and removes on `stop`.
    pub(super) owned_root: Mutex<Option<ScratchRoot>>,
    pub(super) seeder: Option<Arc<dyn Seeder>>,
    /// The single deny list of the seeded trees and `context/`.
    pub(super) read_only: Vec<WorkspacePath>,
    pub(super) docs: Option<Arc<dyn DocsSearch>>,
    pub(super) reopener: Option<Arc<dyn StreamReopener>>,
    pub(super) config: Config,
    /// The runs of this process, keyed by session.
    pub(super) live: LiveRuns,
    /// Creates and reopens in flight plus runs not yet released.
    pub(super) runs: RunGroup,
    pub(super) shutting_down: AtomicBool,
    /// Set by [`Manager::stop_claiming`] (and by `stop`): the admission
    /// loop claims nothing more.
    pub(super) claiming_stopped: AtomicBool,
    pub(super) stop_started: AtomicBool,
    /// This incarnation's lease: the owner of every run it starts, its
    /// ttl and its last renewal.
    pub(super) ownership: LeaseState,
    /// This manager's run slots (`max_running`).
    pub(super) slots: Slots,
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

    // Read access for the phases (the fields stay private to this module).

    /// The manager's `store`.
    pub(crate) fn store(&self) -> &Arc<dyn CoordinatedStore> {
        &self.store
    }

    /// The manager's `runner`.
    pub(crate) fn runner(&self) -> &Arc<dyn Runner> {
        &self.runner
    }

    /// The manager's `blobs`.
    pub(crate) fn blobs(&self) -> &Option<Arc<dyn BlobStore>> {
        &self.blobs
    }

    /// The manager's `logs`.
    pub(crate) fn logs(&self) -> &Arc<dyn TurnLog> {
        &self.logs
    }

    /// The manager's `scratch`.
    pub(crate) fn scratch(&self) -> &Option<PathBuf> {
        &self.scratch
    }

    /// The manager's `seeder`.
    pub(crate) fn seeder(&self) -> &Option<Arc<dyn Seeder>> {
        &self.seeder
    }

    /// The manager's `read_only`.
    pub(crate) fn read_only(&self) -> &Vec<WorkspacePath> {
        &self.read_only
    }

    /// The manager's `docs`.
    pub(crate) fn docs(&self) -> &Option<Arc<dyn DocsSearch>> {
        &self.docs
    }

    /// The manager's `reopener`.
    pub(crate) fn reopener(&self) -> &Option<Arc<dyn StreamReopener>> {
        &self.reopener
    }

    /// The manager's `config`.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The manager's `live`.
    pub(crate) fn live(&self) -> &LiveRuns {
        &self.live
    }

    /// The manager's `runs`.
    pub(crate) fn runs(&self) -> &RunGroup {
        &self.runs
    }

    /// The manager's `ownership`.
    pub(crate) fn ownership(&self) -> &LeaseState {
        &self.ownership
    }

    /// The manager's `slots`.
    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
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
