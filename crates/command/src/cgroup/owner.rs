//! Whose `korvus.<incarnation>` cgroup is whose, and the sweep of those
//! whose owner is gone.
//!
//! A process's cgroups are named by its *incarnation*, `<pid>-<random>`,
//! not by its PID alone: PIDs repeat, and under PID namespaces another
//! korvus on the host sees other PIDs, or none. Liveness is a lock, not a
//! `/proc/<pid>` look-up: the live process holds an `flock` on its own
//! `korvus.<incarnation>` directory for as long as it runs (flock works on
//! cgroupfs directories, and the kernel drops it when the process dies,
//! however it dies). The sweep takes that lock without waiting; only when
//! it gets it — the owner is gone — does it kill what the owner's runs
//! left and remove the directory. A directory of the older `korvus.<pid>`
//! form, whose owner took no lock, is swept only when its PID is also
//! gone, as before.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use rustix::fs::{FlockOperation, Mode, OFlags};

use super::{Hierarchy, Kind, RunCgroup, V1Dirs};

/// The prefix of every korvus process's directory beneath a parent cgroup.
const PREFIX: &str = "korvus.";

/// This process's incarnation: `<pid>-<16 random hex digits>`.
pub(crate) fn incarnation() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let mut bytes = [0u8; 8];
        let random = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
        let nonce = match random {
            Ok(()) => u64::from_ne_bytes(bytes),
            // No urandom: the clock still tells two incarnations apart.
            Err(_) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        format!("{}-{nonce:016x}", std::process::id())
    })
}

/// `korvus.<incarnation>` beneath `base`, this process's part of the
/// parent: made if need be and locked for the life of the process.
///
/// The lock is taken, then the directory checked to be the one locked: a
/// sweep by another process that found it made but not yet locked may
/// have removed it in between, and then it is made again.
pub(crate) fn own_dir(base: &Path) -> Result<PathBuf, String> {
    static HELD: Mutex<Vec<(PathBuf, OwnedFd)>> = Mutex::new(Vec::new());
    let dir = base.join(format!("{PREFIX}{}", incarnation()));
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    if held.iter().any(|(d, _)| *d == dir) {
        return Ok(dir);
    }
    let cannot =
        |e: &dyn std::fmt::Display| format!("cannot make the cgroup {}: {e}", dir.display());
    for _ in 0..8 {
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(cannot(&e)),
        }
        let Ok(fd) = open_dir(&dir) else { continue };
        rustix::fs::flock(&fd, FlockOperation::LockExclusive).map_err(|e| cannot(&e))?;
        let locked = rustix::fs::fstat(&fd).map_err(|e| cannot(&e))?;
        let now = rustix::fs::stat(&dir);
        if now.is_ok_and(|s| s.st_ino == locked.st_ino && s.st_dev == locked.st_dev) {
            held.push((dir.clone(), fd));
            return Ok(dir);
        }
    }
    Err(cannot(&"it was removed each time it was made"))
}

fn open_dir(dir: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Sweeps, once per process and parent, the `korvus.*` cgroups whose
/// owner is gone (see the module docs).
pub(crate) fn sweep_once(hierarchy: &Hierarchy) {
    static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let parents: Vec<PathBuf> = match hierarchy {
        Hierarchy::V2 { base } => vec![base.clone()],
        Hierarchy::V1(dirs) => dirs.distinct().into_iter().map(Path::to_path_buf).collect(),
    };
    let mut swept = SWEPT.lock().unwrap_or_else(PoisonError::into_inner);
    for parent in parents {
        if swept.contains(&parent) {
            continue;
        }
        sweep(&parent);
        swept.push(parent);
    }
}

/// Sweeps the `korvus.*` cgroups beneath `parent` whose owner is gone.
pub(crate) fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        if id == incarnation() || !entry.path().is_dir() {
            continue;
        }
        let dir = entry.path();
        // Held through the sweep, so two sweepers never sweep one dir.
        let Ok(lock) = open_dir(&dir) else { continue };
        let taken = rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive);
        if taken.is_err() || legacy_owner_lives(id) {
            continue;
        }
        sweep_dir(parent, &dir);
    }
}

/// Whether `id` is of the older `<pid>` form and that PID still runs.
fn legacy_owner_lives(id: &str) -> bool {
    id.parse::<u32>()
        .is_ok_and(|pid| pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists())
}

/// Kills what the runs in `dir` left and removes it.
fn sweep_dir(parent: &Path, dir: &Path) {
    let runs = dir.join("runs");
    for run in std::fs::read_dir(&runs).into_iter().flatten().flatten() {
        if run.path().is_dir() {
            let kind = if parent.join("cgroup.controllers").exists() {
                Kind::V2(run.path())
            } else {
                Kind::V1(V1Dirs {
                    pids: Some(run.path()),
                    ..V1Dirs::default()
                })
            };
            tracing::warn!(cgroup = %run.path().display(), "killing what a gone korvus process left running");
            drop(RunCgroup::new(kind));
        }
    }
    for d in [runs, dir.join("manager"), dir.to_path_buf()] {
        let _ = std::fs::remove_dir(d);
    }
}
