//! The cgroup v2 code path against a fake cgroupfs directory (this
//! development host has no v2 controllers; v1 is tested for real by the
//! integration tests).

use super::*;
use crate::limits::Cpu;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

fn fake_base() -> tempfile::TempDir {
    let base = tempfile::tempdir().unwrap();
    std::fs::write(base.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    std::fs::write(base.path().join("cgroup.subtree_control"), "").unwrap();
    base
}

#[test]
fn v2_makes_the_run_cgroup_with_its_limits_and_the_controllers_enabled() {
    let base = fake_base();
    let limits = Limits::default()
        .memory(Some(256 << 20))
        .tasks(Some(64))
        .cpu(Some(Cpu::Cores(1.5)))
        .all_runs_memory(Some(1 << 30))
        .all_runs_tasks(Some(500));
    let (cgroup, gaps) = v2::make(base.path(), "run-a", &limits).expect("made");
    assert!(gaps.is_empty(), "{gaps:?}");
    let runs = process_dir(base.path()).join("runs");
    let dir = runs.join("run-a");
    assert_eq!(read(&dir.join("memory.max")), "268435456");
    assert_eq!(read(&dir.join("memory.oom.group")), "1");
    assert_eq!(read(&dir.join("pids.max")), "64");
    assert_eq!(read(&dir.join("cpu.max")), "150000 100000");
    assert_eq!(read(&runs.join("memory.max")), "1073741824");
    assert_eq!(read(&runs.join("pids.max")), "500");
    // The last controller enabled at each level (a real cgroupfs keeps
    // them all; a plain file keeps the last write).
    for parent in [base.path(), &process_dir(base.path()), &runs] {
        assert_eq!(read(&parent.join("cgroup.subtree_control")), "+cpu");
    }
    let Kind::V2(made) = &cgroup.kind else {
        panic!("v2 expected");
    };
    assert_eq!(made, &dir);
    cgroup.removed.store(true, Ordering::Release);
}

#[test]
fn v2_weight_and_no_swap() {
    let base = fake_base();
    let limits = Limits::default().cpu(Some(Cpu::Weight(50)));
    let runs = process_dir(base.path()).join("runs");
    std::fs::create_dir_all(runs.join("run-w")).unwrap();
    // A real cgroupfs offers memory.swap.max in a new cgroup.
    std::fs::write(runs.join("run-w/memory.swap.max"), "max").unwrap();
    let err = v2::make(base.path(), "run-w", &limits).unwrap_err();
    assert!(
        err.contains("cannot make the cgroup"),
        "an existing run dir is refused: {err}"
    );
    let (cgroup, _) = v2::make(base.path(), "run-x", &limits).expect("made");
    let dir = runs.join("run-x");
    assert_eq!(read(&dir.join("cpu.weight")), "50");
    assert_eq!(read(&dir.join("memory.max")), (4u64 << 30).to_string());
    cgroup.removed.store(true, Ordering::Release);
}

#[test]
fn v2_memory_limit_leaves_no_swap_and_ends_the_group_together() {
    let dir = tempfile::tempdir().unwrap();
    // What a new cgroup offers on a host with swap accounting.
    std::fs::write(dir.path().join("memory.swap.max"), "max").unwrap();
    let mut gaps = Vec::new();
    v2::write_limits(dir.path(), &Limits::default(), false, &mut gaps).unwrap();
    assert_eq!(read(&dir.path().join("memory.swap.max")), "0");
    assert_eq!(read(&dir.path().join("memory.oom.group")), "1");
    assert_eq!(read(&dir.path().join("pids.max")), "1024");
    assert!(gaps.is_empty(), "{gaps:?}");
}

#[test]
fn v2_reads_oom_kills_cpu_time_and_peaks_and_kills_through_cgroup_kill() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("memory.events"),
        "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n",
    )
    .unwrap();
    std::fs::write(d.join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\n").unwrap();
    std::fs::write(d.join("memory.peak"), "268000000\n").unwrap();
    std::fs::write(d.join("pids.peak"), "64\n").unwrap();
    std::fs::write(d.join("cgroup.procs"), "").unwrap();
    let cgroup = RunCgroup::new(Kind::V2(d.to_path_buf()));
    assert_eq!(cgroup.oom_kills(), 2);
    assert_eq!(cgroup.cpu_usage(), Some(Duration::from_micros(1500)));
    assert_eq!(
        cgroup.peaks(),
        Peaks {
            memory: Some(268_000_000),
            tasks: Some(64)
        }
    );
    cgroup.kill_all();
    assert_eq!(read(&d.join("cgroup.kill")), "1");
    cgroup.removed.store(true, Ordering::Release);
}

#[test]
fn a_quota_has_a_floor() {
    assert_eq!(v2::quota_us(0.0), 1000);
    assert_eq!(v2::quota_us(f64::NAN), 1000);
    assert_eq!(v2::quota_us(2.0), 200_000);
}
