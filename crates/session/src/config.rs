//! [`Config`]: the bounds and switches of a manager, with their defaults.
//! A leaf: the builder fills it, [`Inner`](crate::inner::Inner) holds it,
//! and every phase reads its `pub(crate)` fields directly (no getters,
//! like tokio's `runtime/config.rs`).

use std::path::PathBuf;
use std::time::Duration;

use korvus_harvest::PersistConfig;

/// The default upper bound of one run (one agent burst): an hour. A run
/// is an investigation, not a service; an agent that has not returned after
/// an hour is stuck far more often than it is nearly done, and a bound is
/// what lets every session end. Set it per manager with
/// [`ManagerBuilder::run_timeout`](crate::ManagerBuilder::run_timeout).
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Default of [`ManagerBuilder::cancel_poll`](crate::ManagerBuilder::cancel_poll): a cancel from another
/// replica reaches the run within about this long.
pub const DEFAULT_CANCEL_POLL: Duration = Duration::from_millis(500);

/// Default of [`ManagerBuilder::checkpoint_interval`](crate::ManagerBuilder::checkpoint_interval): a dead replica's
/// runs lose at most about this much of their output.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// How many runs a manager executes at once unless told
/// ([`ManagerBuilder::max_running`](crate::ManagerBuilder::max_running)).
pub const DEFAULT_MAX_RUNNING: usize = 64;

/// Default of [`ManagerBuilder::lease`](crate::ManagerBuilder::lease)'s ttl: a manager that stops
/// renewing (killed, cut off from the database) loses its sessions to
/// another manager's reaper this long after its last renewal.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// Default of [`ManagerBuilder::lease`](crate::ManagerBuilder::lease)'s heartbeat period: one renewal
/// statement this often, whatever the number of sessions.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

/// Default of [`ManagerBuilder::resume_orphans`](crate::ManagerBuilder::resume_orphans)'s
/// attempts: a run whose owner was lost is run again twice more before it
/// ends `owner_lost`.
pub const DEFAULT_RESUME_ORPHANS: u32 = 3;

/// The bounds and switches of a manager, set through [`ManagerBuilder`].
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Upper bound of one run; zero leaves it to the runner.
    pub(crate) run_timeout: Duration,
    /// Bound of the report row write, retries included.
    pub(crate) report_timeout: Duration,
    /// Bound of the final status write, retries included.
    pub(crate) settle_timeout: Duration,
    /// Bound of closing the turn log, and of the clean-up after the
    /// terminal write (docs release, scratch removal).
    pub(crate) cleanup_timeout: Duration,
    /// How long a cancelled runner may take to return before it is dropped.
    pub(crate) cancel_grace: Duration,
    /// Limits of the persist phase.
    pub(crate) persist: PersistConfig,
    /// Store every scratch dir as one archive before removing it.
    pub(crate) archive_on_release: bool,
    /// The report template copied into every scratch dir.
    pub(crate) report_template: Option<PathBuf>,
    /// How often cancel requests from other replicas are polled.
    pub(crate) cancel_poll: Duration,
    /// How often a run's scratch dir is checkpointed at least (also at
    /// each turn's end); zero: never.
    pub(crate) checkpoint_interval: Duration,
    /// How long a renewal keeps this manager's sessions.
    pub(crate) lease_ttl: Duration,
    /// How often the lease is renewed (and orphans looked for).
    pub(crate) heartbeat: Duration,
    /// How many runs this manager executes at once.
    pub(crate) max_running: usize,
    /// The runner pool this manager claims queued sessions of.
    pub(crate) pool: String,
    /// At most this many runs in progress per queue key, across the
    /// pool's managers (`None`: no cap).
    pub(crate) per_key: Option<u32>,
    /// Whether this manager claims queued sessions of its pool.
    pub(crate) claims: bool,
    /// At most this many queued sessions in the pool when a create would
    /// queue one more.
    pub(crate) max_queued: Option<u64>,
    /// At most this many queued sessions under one key, likewise.
    pub(crate) max_queued_per_key: Option<u64>,
    /// At most this many attempts of a revision whose owner was lost
    /// (0: an orphan is settled `owner_lost`, never resumed).
    pub(crate) resume_orphans: u32,
    /// What runs this manager's sessions, recorded on each it creates
    /// (`ManagerBuilder::runner_description`).
    pub(crate) runner: Option<String>,
    /// The wait before a resumed attempt may start, doubled per attempt.
    pub(crate) resume_backoff: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            run_timeout: DEFAULT_RUN_TIMEOUT,
            report_timeout: Duration::from_secs(30),
            settle_timeout: Duration::from_secs(30),
            cleanup_timeout: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(10),
            persist: PersistConfig::default(),
            archive_on_release: false,
            report_template: None,
            cancel_poll: DEFAULT_CANCEL_POLL,
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            lease_ttl: DEFAULT_LEASE_TTL,
            heartbeat: DEFAULT_HEARTBEAT,
            max_running: DEFAULT_MAX_RUNNING,
            pool: korvus_store::DEFAULT_POOL.to_owned(),
            per_key: None,
            claims: true,
            max_queued: None,
            max_queued_per_key: None,
            resume_orphans: DEFAULT_RESUME_ORPHANS,
            runner: None,
            resume_backoff: Duration::from_secs(1),
        }
    }
}
