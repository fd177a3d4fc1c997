//! A cgroup of its own for each run: made before the program starts
//! (the child joins it between `fork` and `exec`, see `spawn.rs`), limits
//! written into it, read for out-of-memory kills, CPU time and peaks, and
//! emptied — every process of the run killed, wherever it went — and
//! removed when the run ends.
//!
//! Layout, beneath the parent cgroup (`base`, the process's own or
//! [`Limits::cgroup_root`](crate::Limits::cgroup_root)):
//! `korvus.<incarnation>/runs/<run>`, the incarnation `<pid>-<random>`
//! and the directory locked by its live owner (`owner.rs`, which also
//! sweeps those of gone owners). On cgroup v2 the process itself moves to
//! `korvus.<incarnation>/manager` first (a cgroup that enables controllers for its
//! children may hold no process); `runs/` carries the limits across all
//! runs. On cgroup v1 the same path exists in each controller's hierarchy.

mod discover;
mod owner;
mod v1;
mod v2;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

use crate::limits::Limits;

/// Where run cgroups can be made.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Hierarchy {
    /// cgroup v2: `base` offers the memory and pids controllers.
    V2 { base: PathBuf },
    /// cgroup v1: the parent cgroup in each controller's hierarchy.
    V1(V1Dirs),
}

/// One directory per cgroup v1 controller (the parent, or a run's own).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct V1Dirs {
    pub(crate) memory: Option<PathBuf>,
    pub(crate) pids: Option<PathBuf>,
    pub(crate) cpu: Option<PathBuf>,
    pub(crate) cpuacct: Option<PathBuf>,
    pub(crate) freezer: Option<PathBuf>,
}

impl V1Dirs {
    /// Each distinct directory once (`cpu` and `cpuacct` are often one).
    pub(crate) fn distinct(&self) -> Vec<&Path> {
        let mut out: Vec<&Path> = Vec::new();
        for dir in [
            &self.memory,
            &self.pids,
            &self.cpu,
            &self.cpuacct,
            &self.freezer,
        ]
        .into_iter()
        .flatten()
        {
            if !out.contains(&dir.as_path()) {
                out.push(dir);
            }
        }
        out
    }
}

/// Where a run's processes are placed.
#[derive(Debug)]
pub(crate) enum Placement {
    /// No limit needs a cgroup.
    NotNeeded,
    /// A cgroup of the run's own, and what of the limits it could not
    /// enforce (empty when all).
    InForce {
        cgroup: RunCgroup,
        gaps: Vec<String>,
    },
    /// No cgroup could be made; the text says why.
    NotInForce(String),
}

/// Makes the cgroup of run `name` with `limits` written into it.
pub(crate) fn place(limits: &Limits, name: &str) -> Placement {
    if !limits.needs_cgroup() {
        return Placement::NotNeeded;
    }
    let hierarchy = match &limits.cgroup_root {
        Some(root) => discover::at(root),
        None => discover::own(),
    };
    if let Ok(h) = &hierarchy {
        owner::sweep_once(h);
    }
    let made = hierarchy.and_then(|h| match h {
        Hierarchy::V2 { base } => v2::make(&base, name, limits),
        Hierarchy::V1(dirs) => v1::make(&dirs, name, limits),
    });
    match made {
        Ok((cgroup, gaps)) => Placement::InForce { cgroup, gaps },
        Err(why) => Placement::NotInForce(why),
    }
}

/// The run's own cgroup. Dropped before [`RunCgroup::finish`], it kills
/// what is left in it and removes it.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    kind: Kind,
    removed: AtomicBool,
    /// The largest out-of-memory kill count seen.
    oom_seen: AtomicU64,
}

#[derive(Debug)]
enum Kind {
    V2(PathBuf),
    V1(V1Dirs),
}

/// Peaks of a finished run, where the kernel keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Peaks {
    pub(crate) memory: Option<u64>,
    pub(crate) tasks: Option<u64>,
}

impl RunCgroup {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            removed: AtomicBool::new(false),
            oom_seen: AtomicU64::new(0),
        }
    }

    /// Each directory's `cgroup.procs`, open for writing: the child writes
    /// `0` to each to join the run's cgroup before `exec`.
    pub(crate) fn join_files(&self) -> std::io::Result<Vec<OwnedFd>> {
        self.dirs()
            .iter()
            .map(|d| {
                rustix::fs::open(
                    d.join("cgroup.procs"),
                    OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(std::io::Error::from)
            })
            .collect()
    }

    fn dirs(&self) -> Vec<&Path> {
        match &self.kind {
            Kind::V2(dir) => vec![dir.as_path()],
            Kind::V1(dirs) => dirs.distinct(),
        }
    }

    /// How many of the run's processes the kernel killed for memory.
    pub(crate) fn oom_kills(&self) -> u64 {
        let count = match &self.kind {
            Kind::V2(dir) => keyed(&dir.join("memory.events"), "oom_kill"),
            Kind::V1(dirs) => dirs
                .memory
                .as_ref()
                .and_then(|d| keyed(&d.join("memory.oom_control"), "oom_kill")),
        };
        let count = count.unwrap_or(0);
        self.oom_seen.fetch_max(count, Ordering::Relaxed);
        count
    }

    /// CPU time the run's processes have used, all together.
    pub(crate) fn cpu_usage(&self) -> Option<Duration> {
        match &self.kind {
            Kind::V2(dir) => keyed(&dir.join("cpu.stat"), "usage_usec").map(Duration::from_micros),
            Kind::V1(dirs) => dirs
                .cpuacct
                .as_ref()
                .and_then(|d| number(&d.join("cpuacct.usage")))
                .map(Duration::from_nanos),
        }
    }

    /// The largest memory use and task count of the run, where kept.
    pub(crate) fn peaks(&self) -> Peaks {
        match &self.kind {
            Kind::V2(dir) => Peaks {
                memory: number(&dir.join("memory.peak")),
                tasks: number(&dir.join("pids.peak")),
            },
            Kind::V1(dirs) => Peaks {
                memory: dirs.memory.as_ref().and_then(|d| {
                    number(&d.join("memory.memsw.max_usage_in_bytes"))
                        .or_else(|| number(&d.join("memory.max_usage_in_bytes")))
                }),
                tasks: dirs
                    .pids
                    .as_ref()
                    .and_then(|d| number(&d.join("pids.peak"))),
            },
        }
    }

    /// Every process id in the run's cgroups.
    fn procs(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs()
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Kills every process of the run and waits (up to 5 s) until none is
    /// left: `cgroup.kill` on v2; on v1 freeze, kill every task listed,
    /// thaw, until empty. Blocking.
    pub(crate) fn kill_all(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        match &self.kind {
            Kind::V2(dir) => v2::kill(dir, || self.procs(), deadline),
            Kind::V1(dirs) => v1::kill(dirs, || self.procs(), deadline),
        }
    }

    /// Kills what is left, reads the peaks and removes the cgroup.
    /// Blocking.
    pub(crate) fn finish(&self) -> Peaks {
        self.kill_all();
        let peaks = self.peaks();
        self.remove();
        peaks
    }

    /// Removes the run's directories (retrying while the kernel still
    /// counts an exiting process in them).
    fn remove(&self) {
        if self.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for dir in self.dirs() {
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    // An exiting process still counted: try again shortly.
                    Err(e)
                        if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error())
                            && Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "run cgroup not removed");
                        break;
                    }
                }
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if !self.removed.load(Ordering::Acquire) {
            self.kill_all();
            self.remove();
        }
    }
}

/// Writes `text` to the control file `path`.
pub(crate) fn write(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// The number in a one-number control file.
fn number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a `key value` control file.
fn keyed(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Sends `SIGKILL` to each of `pids`.
fn kill_each(pids: &[i32]) {
    for &pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests;
