//! cgroup v2: one directory per run, controllers enabled down the path,
//! `memory.max` with no swap, `memory.oom.group`, `pids.max`, `cpu.max` or
//! `cpu.weight`, and `cgroup.kill`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::owner::own_dir;
use super::{kill_each, write, Kind, RunCgroup};
use crate::limits::{Cpu, Limits};

/// The CFS period a CPU quota is expressed in, in microseconds.
const PERIOD_US: u64 = 100_000;

/// Makes `base/korvus.<incarnation>/runs/<name>` with `limits` written
/// into it.
pub(crate) fn make(
    base: &Path,
    name: &str,
    limits: &Limits,
) -> Result<(RunCgroup, Vec<String>), String> {
    let mine = own_dir(base)?;
    let runs = mine.join("runs");
    let dir = runs.join(name);
    std::fs::create_dir_all(&runs)
        .map_err(|e| format!("cannot make the cgroup {}: {e}", runs.display()))?;
    let mut cpu = limits.cpu.is_some();
    let mut gaps = Vec::new();
    for parent in [base, mine.as_path(), runs.as_path()] {
        let path = parent.join("cgroup.subtree_control");
        for controller in ["memory", "pids"] {
            write(&path, &format!("+{controller}")).map_err(|e| {
                format!(
                    "cannot enable the {controller} controller for korvus's cgroups ({e}); \
                     another process may live in {}",
                    parent.display()
                )
            })?;
        }
        if cpu {
            if let Err(e) = write(&path, "+cpu") {
                gaps.push(format!("CPU limit not in force ({e})"));
                cpu = false;
            }
        }
    }
    if let Some(bytes) = limits.all_runs_memory {
        write(&runs.join("memory.max"), &bytes.to_string()).map_err(|e| e.to_string())?;
    }
    if let Some(tasks) = limits.all_runs_tasks {
        write(&runs.join("pids.max"), &tasks.to_string()).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir(&dir)
        .map_err(|e| format!("cannot make the cgroup {}: {e}", dir.display()))?;
    let cgroup = RunCgroup::new(Kind::V2(dir.clone()));
    write_limits(&dir, limits, cpu, &mut gaps).map_err(|e| e.to_string())?;
    Ok((cgroup, gaps))
}

pub(super) fn write_limits(
    dir: &Path,
    limits: &Limits,
    cpu: bool,
    gaps: &mut Vec<String>,
) -> std::io::Result<()> {
    if let Some(bytes) = limits.memory {
        write(&dir.join("memory.max"), &bytes.to_string())?;
        // Resident plus swap stays within the limit: no swap at all.
        if dir.join("memory.swap.max").exists() {
            write(&dir.join("memory.swap.max"), "0")?;
        }
        // The run's processes end together, not one by one.
        if let Err(e) = write(&dir.join("memory.oom.group"), "1") {
            gaps.push(format!("memory.oom.group not set ({e})"));
        }
    }
    if let Some(tasks) = limits.tasks {
        write(&dir.join("pids.max"), &tasks.to_string())?;
    }
    match limits.cpu {
        Some(Cpu::Cores(cores)) if cpu => {
            write(
                &dir.join("cpu.max"),
                &format!("{} {PERIOD_US}", quota_us(cores)),
            )?;
        }
        Some(Cpu::Weight(weight)) if cpu => {
            write(
                &dir.join("cpu.weight"),
                &weight.clamp(1, 10_000).to_string(),
            )?;
        }
        _ => {}
    }
    Ok(())
}

/// The quota of `cores` CPUs per [`PERIOD_US`] (at least 1 ms).
pub(crate) fn quota_us(cores: f64) -> u64 {
    // A float of a few cores times 100,000 fits u64; negative and NaN
    // values become the floor.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let quota = (cores * PERIOD_US as f64).round() as u64;
    quota.max(1000)
}

/// `cgroup.kill` (Linux 5.14), then killing what is listed until the
/// cgroup is empty or `deadline` passes.
pub(crate) fn kill(dir: &Path, procs: impl Fn() -> Vec<i32>, deadline: Instant) {
    let _ = write(&dir.join("cgroup.kill"), "1");
    loop {
        let left = procs();
        if left.is_empty() || Instant::now() >= deadline {
            return;
        }
        kill_each(&left);
        std::thread::sleep(Duration::from_millis(5));
    }
}
