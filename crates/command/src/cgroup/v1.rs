//! cgroup v1: the run's directory in each controller's hierarchy,
//! `memory.limit_in_bytes` with `memory.memsw.limit_in_bytes` (resident
//! plus swap), `pids.max`, `cpu.cfs_quota_us` or `cpu.shares`; killing
//! through the freezer where there is one (v1 has no `cgroup.kill`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::owner::own_dir;
use super::{kill_each, write, Kind, RunCgroup, V1Dirs};
use crate::limits::{Cpu, Limits};

/// Makes `<controller>/korvus.<incarnation>/runs/<name>` in each hierarchy there
/// is, with `limits` written into them.
pub(crate) fn make(
    parents: &V1Dirs,
    name: &str,
    limits: &Limits,
) -> Result<(RunCgroup, Vec<String>), String> {
    let run_of = |parent: &Option<PathBuf>| -> Result<Option<PathBuf>, String> {
        let Some(parent) = parent else {
            return Ok(None);
        };
        let dir = own_dir(parent)?.join("runs").join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot make the cgroup {}: {e}", dir.display()))?;
        Ok(Some(dir))
    };
    let mut gaps = Vec::new();
    let wants_memory = limits.memory.is_some() || limits.all_runs_memory.is_some();
    let wants_tasks = limits.tasks.is_some() || limits.all_runs_tasks.is_some();
    if wants_memory && parents.memory.is_none() {
        gaps.push("memory limit not in force (no cgroup v1 memory hierarchy)".to_owned());
    }
    if wants_tasks && parents.pids.is_none() {
        gaps.push("task limit not in force (no cgroup v1 pids hierarchy)".to_owned());
    }
    if limits.cpu.is_some() && parents.cpu.is_none() {
        gaps.push("CPU limit not in force (no cgroup v1 cpu hierarchy)".to_owned());
    }
    let dirs = V1Dirs {
        memory: run_of(&parents.memory)?,
        pids: run_of(&parents.pids)?,
        cpu: run_of(&parents.cpu)?,
        cpuacct: run_of(&parents.cpuacct)?,
        freezer: run_of(&parents.freezer)?,
    };
    // From here on, dropping the cgroup removes what was made.
    let cgroup = RunCgroup::new(Kind::V1(dirs.clone()));
    if let Some(dir) = &dirs.memory {
        if let Some(bytes) = limits.all_runs_memory {
            memory_limit(dir.parent().unwrap_or(dir), bytes, &mut gaps)?;
        }
        if let Some(bytes) = limits.memory {
            memory_limit(dir, bytes, &mut gaps)?;
        }
    }
    if let Some(dir) = &dirs.pids {
        if let Some(tasks) = limits.all_runs_tasks {
            write(
                &dir.parent().unwrap_or(dir).join("pids.max"),
                &tasks.to_string(),
            )
            .map_err(|e| e.to_string())?;
        }
        if let Some(tasks) = limits.tasks {
            write(&dir.join("pids.max"), &tasks.to_string()).map_err(|e| e.to_string())?;
        }
    }
    if let (Some(dir), Some(cpu)) = (&dirs.cpu, limits.cpu) {
        cpu_limit(dir, cpu).map_err(|e| e.to_string())?;
    }
    Ok((cgroup, gaps))
}

/// `memory.limit_in_bytes` and, where the kernel accounts swap,
/// `memory.memsw.limit_in_bytes` (which may never be below the first:
/// the order of the two writes depends on the direction).
fn memory_limit(dir: &Path, bytes: u64, gaps: &mut Vec<String>) -> Result<(), String> {
    let value = bytes.to_string();
    let memory = dir.join("memory.limit_in_bytes");
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    if !memsw.exists() {
        gaps.push("swap not limited (no memory.memsw.limit_in_bytes)".to_owned());
        return write(&memory, &value).map_err(|e| e.to_string());
    }
    if write(&memory, &value).is_ok() {
        write(&memsw, &value).map_err(|e| e.to_string())
    } else {
        write(&memsw, &value).map_err(|e| e.to_string())?;
        write(&memory, &value).map_err(|e| e.to_string())
    }
}

fn cpu_limit(dir: &Path, cpu: Cpu) -> std::io::Result<()> {
    match cpu {
        Cpu::Cores(cores) => {
            write(&dir.join("cpu.cfs_period_us"), "100000")?;
            write(
                &dir.join("cpu.cfs_quota_us"),
                &super::v2::quota_us(cores).to_string(),
            )
        }
        Cpu::Weight(weight) => {
            let shares = u64::from(weight.clamp(1, 10_000)) * 1024 / 100;
            write(&dir.join("cpu.shares"), &shares.max(2).to_string())
        }
    }
}

/// Freezes the run (where there is a freezer), kills every task listed,
/// thaws it, until the cgroups are empty or `deadline` passes.
pub(crate) fn kill(dirs: &V1Dirs, procs: impl Fn() -> Vec<i32>, deadline: Instant) {
    let state = dirs.freezer.as_ref().map(|d| d.join("freezer.state"));
    loop {
        let frozen = state.as_deref().is_some_and(|s| freeze(s, deadline));
        let left = procs();
        kill_each(&left);
        if let Some(state) = &state {
            let _ = write(state, "THAWED");
        }
        if left.is_empty() || Instant::now() >= deadline {
            return;
        }
        if !frozen {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Freezes the cgroup whose `freezer.state` is `state`; whether it
/// reached `FROZEN` before `deadline`.
fn freeze(state: &Path, deadline: Instant) -> bool {
    if write(state, "FROZEN").is_err() {
        return false;
    }
    loop {
        match std::fs::read_to_string(state) {
            Ok(s) if s.trim() == "FROZEN" => return true,
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            _ => return false,
        }
    }
}
