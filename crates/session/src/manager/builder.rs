//! [`ManagerBuilder`]: it fills a [`Config`] and makes the [`Inner`] every
//! run shares.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use korvus_blob::BlobStore;
use korvus_harvest::PersistConfig;
use korvus_log::{MemoryLog, TurnLog};
use korvus_runner::{DocsSearch, Runner};
use korvus_store::{Budgets, CoordinatedStore};
use korvus_workspace::{default_trees, read_only_prefixes, ScratchRoot, Seeder, WorkspacePath};

use crate::config::Config;
use crate::inner::Inner;
use crate::lease::state::LeaseState;
use crate::live::{LiveRuns, RunGroup, Slots};
use crate::manager::Manager;
use crate::StreamReopener;

/// Builds a [`Manager`]. The store and the runner are constructor
/// arguments ([`Manager::builder`]): a manager without them cannot be
/// expressed. Everything else is optional, with the degradation each
/// setter names.
#[must_use = "a builder does nothing until `build` is called"]
pub struct ManagerBuilder {
    store: Arc<dyn CoordinatedStore>,
    runner: Arc<dyn Runner>,
    blobs: Option<Arc<dyn BlobStore>>,
    logs: Option<Arc<dyn TurnLog>>,
    scratch_root: Option<ScratchRoot>,
    seeder: Option<Arc<dyn Seeder>>,
    trees: Vec<WorkspacePath>,
    docs: Option<Arc<dyn DocsSearch>>,
    reopener: Option<Arc<dyn StreamReopener>>,
    budgets: Option<Arc<dyn Budgets>>,
    config: Config,
}

impl fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagerBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ManagerBuilder {
    pub(crate) fn new(store: Arc<dyn CoordinatedStore>, runner: Arc<dyn Runner>) -> Self {
        Self {
            store,
            runner,
            blobs: None,
            logs: None,
            scratch_root: None,
            seeder: None,
            trees: default_trees(),
            docs: None,
            reopener: None,
            budgets: None,
            config: Config::default(),
        }
    }

    /// Blob storage for harvested files. Without it, reports land as rows
    /// without bytes (no markdown key) and nothing is harvested.
    pub fn blob_store(mut self, blobs: Arc<dyn BlobStore>) -> Self {
        self.blobs = Some(blobs);
        self
    }

    /// The turn log service. Without it, each manager keeps logs in memory.
    pub fn turn_log(mut self, logs: Arc<dyn TurnLog>) -> Self {
        self.logs = Some(logs);
        self
    }

    /// Where scratch dirs are made. Without it, runs get no workspace (no
    /// seeding, no context files, no harvest). A supplied root is never
    /// removed; an owned one ([`ScratchRoot::create_owned`]) is removed by
    /// [`Manager::stop`].
    pub fn scratch_root(mut self, root: ScratchRoot) -> Self {
        self.scratch_root = Some(root);
        self
    }

    /// Seeds read-only trees into scratch dirs; `trees` are the trees it is
    /// configured with (the read-only deny list is derived from them).
    pub fn seeder(mut self, seeder: Arc<dyn Seeder>, trees: Vec<WorkspacePath>) -> Self {
        self.seeder = Some(seeder);
        self.trees = trees;
        self
    }

    /// Documentation search handed to runs of pinned sessions.
    pub fn docs_search(mut self, docs: Arc<dyn DocsSearch>) -> Self {
        self.docs = Some(docs);
        self
    }

    /// Lifts an external stream's finished latch on reopen.
    pub fn stream_reopener(mut self, reopener: Arc<dyn StreamReopener>) -> Self {
        self.reopener = Some(reopener);
        self
    }

    /// Where session and incident budgets are kept (the store, usually:
    /// both SQL stores and the memory store implement
    /// [`Budgets`]). Without it [`Manager::set_budget`] and a
    /// [`CreateSession::budget`](crate::CreateSession::budget) are
    /// refused with [`SessionError::NoBudgets`](crate::SessionError::NoBudgets).
    /// What enforces them is the runner (the command runner's
    /// `budgets`, given the same store).
    pub fn budgets(mut self, budgets: Arc<dyn Budgets>) -> Self {
        self.budgets = Some(budgets);
        self
    }

    /// Upper bound of one run (default [`DEFAULT_RUN_TIMEOUT`](crate::DEFAULT_RUN_TIMEOUT), an hour);
    /// zero leaves it to the runner. A run past it settles `failed` /
    /// `timeout`.
    pub fn run_timeout(mut self, timeout: Duration) -> Self {
        self.config.run_timeout = timeout;
        self
    }

    /// Bound of the report row write, retries included (default 30 s).
    pub fn report_timeout(mut self, timeout: Duration) -> Self {
        self.config.report_timeout = timeout;
        self
    }

    /// Bound of the final status write, retries included (default 30 s).
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.config.settle_timeout = timeout;
        self
    }

    /// Bound of closing the turn log before the terminal write, and again of
    /// the clean-up after it (docs release, scratch removal); default 30 s.
    pub fn cleanup_timeout(mut self, timeout: Duration) -> Self {
        self.config.cleanup_timeout = timeout;
        self
    }

    /// How many runs this manager executes at once (default
    /// [`DEFAULT_MAX_RUNNING`](crate::DEFAULT_MAX_RUNNING), at least 1). A session created while every
    /// slot is taken is **queued** in the store (running, unowned, not
    /// started: [`Session::is_queued`](korvus_store::Session::is_queued))
    /// and `create` returns at once; the manager — or any other manager
    /// of the same [pool](ManagerBuilder::pool) on the store — claims it
    /// when a slot frees up, checking every
    /// [`cancel_poll`](ManagerBuilder::cancel_poll) period and at once
    /// when one of its own runs ends. A continued session (`reopen`,
    /// `send_message`) is held back the same way: its message is appended
    /// to its log and it is queued, and the manager that claims it resumes
    /// it with that message.
    pub fn max_running(mut self, n: usize) -> Self {
        self.config.max_running = n.max(1);
        self
    }

    /// At most `n` runs in progress (claimed, started or continued, not
    /// settled) per queue key — the session's
    /// [`queue_key`](crate::CreateOptions::queue_key), else its incident —
    /// across every manager of the pool on the store (default: no cap; at
    /// least 1). With a cap every create is queued and then claimed
    /// through the store, which counts a key's runs under a lock of that
    /// key, so replicas racing for one key never overshoot it; a session
    /// of a key at its cap waits while other keys' sessions start. Give
    /// every manager of a pool the same cap: a claim applies its own
    /// manager's. Continued sessions (reopen, answer) are queued and
    /// claimed like creates when a cap is set.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use korvus_session::Manager;
    /// # use korvus_store::MemoryStore;
    /// # use korvus_runner::testing::ScriptRunner;
    /// # use korvus_runner::RunOutcome;
    /// # let runner = ScriptRunner::new(|_, _| async {
    /// #     Ok(RunOutcome::completed(Default::default()))
    /// # });
    /// // 64 runs at once on this replica, at most 2 of any one tenant
    /// // (queue key) across all replicas of the pool.
    /// let manager = Manager::builder(Arc::new(MemoryStore::new()), Arc::new(runner))
    ///     .max_running(64)
    ///     .max_running_per_key(2)
    ///     .build();
    /// # drop(manager);
    /// ```
    pub fn max_running_per_key(mut self, n: u32) -> Self {
        self.config.per_key = Some(n.max(1));
        self
    }

    /// A bound on the pool's queue (default: none): a create that would be
    /// queued while `n` sessions of the pool are queued already answers
    /// [`SessionError::QueueFull`](crate::SessionError::QueueFull) and
    /// writes nothing. Checked by each create before it writes, so
    /// concurrent creates may pass it by as many as race.
    pub fn max_queued(mut self, n: u64) -> Self {
        self.config.max_queued = Some(n);
        self
    }

    /// A bound on one key's queue (its queue key, else its incident), as
    /// [`max_queued`](ManagerBuilder::max_queued) is on the pool's.
    pub fn max_queued_per_key(mut self, n: u64) -> Self {
        self.config.max_queued_per_key = Some(n);
        self
    }

    /// Whether this manager claims queued sessions of its pool (default
    /// `true`). A manager built only to cancel, reap or inspect — whose
    /// runner runs nothing — says `false`, or it would take queued
    /// sessions from the pool's real managers and fail them. Its own
    /// creates that find no slot are queued for the others.
    pub fn claim_queued(mut self, claims: bool) -> Self {
        self.config.claims = claims;
        self
    }

    /// The runner pool of this manager (default
    /// [`DEFAULT_POOL`](korvus_store::DEFAULT_POOL)): its sessions are
    /// queued under it, and it claims only sessions queued under it, so
    /// managers running different agents on one store keep to their own.
    pub fn pool(mut self, name: impl Into<String>) -> Self {
        self.config.pool = name.into();
        self
    }

    /// How often this manager asks the store for cancel requests made on
    /// other replicas for the runs it drives (default
    /// [`DEFAULT_CANCEL_POLL`](crate::DEFAULT_CANCEL_POLL)); one statement per period, and none while
    /// no run is live.
    pub fn cancel_poll(mut self, period: Duration) -> Self {
        self.config.cancel_poll = period.max(Duration::from_millis(10));
        self
    }

    /// How often a run's scratch dir is checkpointed while the agent works
    /// (default [`DEFAULT_CHECKPOINT_INTERVAL`](crate::DEFAULT_CHECKPOINT_INTERVAL)): what changed since the
    /// last checkpoint is stored — bytes first, then hidden `checkpoint`
    /// rows — at least this often and at each turn's end the agent reports,
    /// so a replica that dies loses at most this much of its runs' output
    /// (another replica lands the last checkpoint). One scheduler per
    /// manager; a checkpoint never blocks the agent and never overlaps the
    /// run's previous one, and the landing then stores only what changed
    /// since. [`Duration::ZERO`] turns checkpoints off. Needs a blob store
    /// and a scratch root.
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.config.checkpoint_interval = interval;
        self
    }

    /// Resumes a run whose owner was lost instead of ending it
    /// `owner_lost`, up to `max_attempts` attempts of its revision
    /// (default [`DEFAULT_RESUME_ORPHANS`](crate::DEFAULT_RESUME_ORPHANS),
    /// backoff 1 s; `0` never resumes). The reaper that takes an orphan over stores what its
    /// scratch dir holds here as a checkpoint, then sends it back to its
    /// pool as *resume pending*; any manager of the pool claims it like a
    /// queued session, restores the revision's last checkpoint into a
    /// fresh scratch dir and runs the agent again as a resume of the same
    /// revision (`KORVUS_RESUME=1`, `KORVUS_ATTEMPT`), with a message that
    /// says it was interrupted. Attempts wait at least `backoff` doubled
    /// per attempt (at least a minute once that passes a minute), jittered
    /// up to twice that, before they may start; a session whose
    /// every attempt lost its owner ends `owner_lost` with its output
    /// salvaged.
    pub fn resume_orphans(mut self, max_attempts: u32, backoff: Duration) -> Self {
        self.config.resume_orphans = max_attempts;
        self.config.resume_backoff = backoff;
        self
    }

    /// Records `description` on every session this manager creates
    /// ([`Session::runner`](korvus_store::Session::runner)): what runs
    /// them, in the embedder's own words — the CLI records its agent
    /// options, so a later `reopen` or `reply` needs none. Opaque to
    /// korvus, at most 4 KiB (a longer one fails each create with
    /// `InvalidInput`), stored in the clear: never put a secret or an
    /// environment value in it.
    pub fn runner_description(mut self, description: impl Into<String>) -> Self {
        self.config.runner = Some(description.into());
        self
    }

    /// How long a cancelled runner may take to return before it is dropped
    /// (default 10 s).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.config.cancel_grace = grace;
        self
    }

    /// Limits of the persist phase (cap, size limit, concurrency, timeout).
    pub fn persist_config(mut self, config: PersistConfig) -> Self {
        self.config.persist = config;
        self
    }

    /// A report template (a markdown file) handed to every run: copied
    /// read-only into the scratch dir at `korvus_workspace::REPORT_TEMPLATE`
    /// and named in `RunContext::report_template`. A template that cannot
    /// be read is logged and the run goes on without it.
    pub fn report_template(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.report_template = Some(path.into());
        self
    }

    /// Store every scratch dir as one `workspace.tar.gz` artifact of the
    /// revision, as part of landing (before the report row, within the
    /// persist bound; on timeout it is skipped with a reason in the log).
    pub fn archive_on_release(mut self, archive: bool) -> Self {
        self.config.archive_on_release = archive;
        self
    }

    /// The owner lease of this manager's runs: each renewal (one statement
    /// every `heartbeat`) keeps them for `ttl`, by the database clock. When
    /// renewals stop — the process was killed, or cannot reach the
    /// database — any manager on the same store takes its sessions over
    /// between `ttl` and `ttl + heartbeat` after the last one, and settles
    /// them `owner_lost` (or `cancelled` when a cancel was pending). A
    /// shorter ttl ends orphans sooner; it also loses runs to a shorter
    /// database outage or pause. `heartbeat` is kept at most a third of
    /// `ttl` (and at least 10 ms), so two renewals can fail before the
    /// lease lapses. Defaults: [`DEFAULT_LEASE_TTL`](crate::DEFAULT_LEASE_TTL), [`DEFAULT_HEARTBEAT`](crate::DEFAULT_HEARTBEAT).
    pub fn lease(mut self, ttl: Duration, heartbeat: Duration) -> Self {
        let ttl = ttl.max(Duration::from_millis(30));
        self.config.lease_ttl = ttl;
        self.config.heartbeat = heartbeat.clamp(Duration::from_millis(10), ttl / 3);
        self
    }

    /// Builds the manager: a new owner incarnation, whose heartbeat, reaper
    /// and cancel poller start on the current tokio runtime (a manager
    /// built outside one runs without them).
    pub fn build(self) -> Manager {
        let scratch = self.scratch_root.as_ref().map(|r| r.path().to_path_buf());
        let ownership = LeaseState::new(self.config.lease_ttl);
        let slots = Slots::new(self.config.max_running);
        let claims = self.config.claims;
        let manager = Manager {
            inner: Arc::new(Inner {
                store: self.store,
                runner: self.runner,
                blobs: self.blobs,
                logs: self.logs.unwrap_or_else(|| Arc::new(MemoryLog::new())),
                scratch,
                owned_root: Mutex::new(self.scratch_root.filter(|r| r.is_owned())),
                seeder: self.seeder,
                read_only: read_only_prefixes(&self.trees),
                docs: self.docs,
                reopener: self.reopener,
                budgets: self.budgets,
                config: self.config,
                live: LiveRuns::default(),
                runs: RunGroup::new(),
                shutting_down: AtomicBool::new(false),
                claiming_stopped: AtomicBool::new(!claims),
                stop_started: AtomicBool::new(false),
                draining: AtomicBool::new(false),
                ownership,
                slots,
            }),
        };
        crate::cancel_poll::start(&manager.inner);
        crate::checkpoints::start(&manager.inner);
        crate::lease::start(&manager.inner);
        if manager.inner.config.claims {
            crate::admission::start(&manager.inner);
        }
        manager
    }
}
