//! [`Limits`]: how much of the host one run may use — memory, tasks and
//! CPU (through a cgroup of its own), the size of its scratch dir and how
//! long it may sit silent and idle.

use std::path::PathBuf;
use std::time::Duration;

/// Default memory limit of one run: resident memory plus swap of all its
/// processes together.
pub const DEFAULT_MEMORY: u64 = 4 << 30;
/// Default task limit of one run (cgroup `pids` count threads too).
pub const DEFAULT_TASKS: u64 = 1024;
/// Default size limit of one run's scratch dir (allocated blocks).
pub const DEFAULT_SCRATCH: u64 = 10 << 30;
/// Default stall limit: no output line and no CPU time used this long.
pub const DEFAULT_STALL: Duration = Duration::from_secs(15 * 60);
/// Default time between two checks of the scratch dir's size, the
/// cgroup's out-of-memory count and the stall clock.
pub const DEFAULT_POLL: Duration = Duration::from_secs(2);

/// A CPU limit for one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cpu {
    /// At most this many CPUs' worth of time (`1.5` = one and a half
    /// cores), enforced as a CFS quota per 100 ms period.
    Cores(f64),
    /// A share of contended CPU time relative to other cgroups: 1 to
    /// 10,000, 100 being the kernel's default (cgroup v2 `cpu.weight`; on
    /// v1, `cpu.shares` of `weight × 1024 / 100`).
    Weight(u16),
}

/// What one run may use of the host ([`CommandRunner::limits`](crate::CommandRunner::limits)).
///
/// The default ([`Limits::default`]) protects a shared host: **memory
/// 4 GiB** ([`DEFAULT_MEMORY`]), **1,024 tasks** ([`DEFAULT_TASKS`]), no
/// CPU limit, **scratch dir 10 GiB** ([`DEFAULT_SCRATCH`]), **stall
/// 15 min** ([`DEFAULT_STALL`]). Memory, tasks and CPU need a cgroup the
/// process may write (cgroup v2 with the controllers delegated, or v1);
/// where there is none they are **not in force**: a warning once per
/// process and a note in every run's log say so, unless the limits are
/// [`required`](Limits::required), which makes such a run fail before its
/// program starts. The scratch size and the stall need no cgroup.
///
/// Exceeding a limit: memory ends the run's processes together and the
/// session `failed` / `memory_exceeded`; tasks make a `fork` fail inside
/// the agent; scratch ends it `disk_quota_exceeded`, stall `stalled`. The
/// harvest still runs, so what the agent wrote before is kept.
#[derive(Debug, Clone)]
pub struct Limits {
    pub(crate) memory: Option<u64>,
    pub(crate) tasks: Option<u64>,
    pub(crate) cpu: Option<Cpu>,
    pub(crate) scratch: Option<u64>,
    pub(crate) stall: Option<Duration>,
    pub(crate) poll: Duration,
    pub(crate) required: bool,
    pub(crate) cgroup_root: Option<PathBuf>,
    pub(crate) all_runs_memory: Option<u64>,
    pub(crate) all_runs_tasks: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: Some(DEFAULT_MEMORY),
            tasks: Some(DEFAULT_TASKS),
            cpu: None,
            scratch: Some(DEFAULT_SCRATCH),
            stall: Some(DEFAULT_STALL),
            poll: DEFAULT_POLL,
            required: false,
            cgroup_root: None,
            all_runs_memory: None,
            all_runs_tasks: None,
        }
    }
}

impl Limits {
    /// Nothing limited (and no cgroup made) but the run timeout.
    pub fn none() -> Self {
        Self {
            memory: None,
            tasks: None,
            scratch: None,
            stall: None,
            ..Self::default()
        }
    }

    /// Memory of the run's processes together, resident plus swap, in
    /// bytes (`None`: unlimited).
    pub fn memory(mut self, bytes: Option<u64>) -> Self {
        self.memory = bytes;
        self
    }

    /// Tasks (processes and threads) of the run at once (`None`:
    /// unlimited).
    pub fn tasks(mut self, tasks: Option<u64>) -> Self {
        self.tasks = tasks;
        self
    }

    /// CPU time of the run (`None`, the default: unlimited).
    pub fn cpu(mut self, cpu: Option<Cpu>) -> Self {
        self.cpu = cpu;
        self
    }

    /// Allocated size of the scratch dir in bytes, checked every
    /// [`poll`](Limits::poll) (`None`: unlimited).
    pub fn scratch(mut self, bytes: Option<u64>) -> Self {
        self.scratch = bytes;
        self
    }

    /// How long the run may print nothing while its processes use next to
    /// no CPU time — under 1% of a core, so an idle program's timer
    /// wake-ups are not work (`None`: for ever).
    pub fn stall(mut self, stall: Option<Duration>) -> Self {
        self.stall = stall;
        self
    }

    /// Time between two checks of the scratch size, the out-of-memory
    /// count and the stall clock (default [`DEFAULT_POLL`]; at least 10 ms).
    pub fn poll(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(10));
        self
    }

    /// Fail the run ([`CommandError::Limits`](crate::CommandError::Limits))
    /// before its program starts where the memory, task or CPU limits
    /// cannot be put in force, instead of running it without them.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// The cgroup korvus makes its run cgroups beneath, instead of the
    /// one the process runs in: a cgroup v2 directory (with
    /// `cgroup.controllers`), or a directory holding cgroup v1 hierarchies
    /// by controller name (`memory/`, `pids/`, optionally `cpu/`,
    /// `cpuacct/`, `freezer/`, each the parent cgroup).
    pub fn cgroup_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cgroup_root = Some(dir.into());
        self
    }

    /// A memory limit on all runs of this process together (a parent
    /// cgroup shared by every runner of the process; default none).
    pub fn all_runs_memory(mut self, bytes: Option<u64>) -> Self {
        self.all_runs_memory = bytes;
        self
    }

    /// A task limit on all runs of this process together (default none).
    pub fn all_runs_tasks(mut self, tasks: Option<u64>) -> Self {
        self.all_runs_tasks = tasks;
        self
    }

    /// Whether any limit needs a cgroup (memory, tasks, CPU, or a limit
    /// across runs).
    pub(crate) fn needs_cgroup(&self) -> bool {
        self.memory.is_some()
            || self.tasks.is_some()
            || self.cpu.is_some()
            || self.all_runs_memory.is_some()
            || self.all_runs_tasks.is_some()
    }

    /// The memory limit, if any.
    pub fn memory_limit(&self) -> Option<u64> {
        self.memory
    }

    /// The task limit, if any.
    pub fn task_limit(&self) -> Option<u64> {
        self.tasks
    }

    /// The scratch size limit, if any.
    pub fn scratch_limit(&self) -> Option<u64> {
        self.scratch
    }

    /// The stall limit, if any.
    pub fn stall_limit(&self) -> Option<Duration> {
        self.stall
    }
}
