//! The cgroup v2 code path against a fake cgroupfs directory (this
//! development host has no v2 controllers; v1 is tested for real by the
//! integration tests), and the sweep of gone owners' cgroups: by their
//! locks in a plain directory, and on the real v1 pids hierarchy.

use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

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
    let runs = owner::own_dir(base.path()).unwrap().join("runs");
    let dir = runs.join("run-a");
    assert_eq!(read(&dir.join("memory.max")), "268435456");
    assert_eq!(read(&dir.join("memory.oom.group")), "1");
    assert_eq!(read(&dir.join("pids.max")), "64");
    assert_eq!(read(&dir.join("cpu.max")), "150000 100000");
    assert_eq!(read(&runs.join("memory.max")), "1073741824");
    assert_eq!(read(&runs.join("pids.max")), "500");
    // The last controller enabled at each level (a real cgroupfs keeps
    // them all; a plain file keeps the last write).
    for parent in [base.path(), &owner::own_dir(base.path()).unwrap(), &runs] {
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
    let runs = owner::own_dir(base.path()).unwrap().join("runs");
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

/// Holds the lock a live owner holds on its directory: another open file
/// description, so it conflicts with the sweep's even in this process.
/// Close-on-exec: a child another test spawns meanwhile would otherwise
/// inherit the descriptor, and the lock with it, past `drop`.
fn hold(dir: &Path) -> OwnedFd {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty()).unwrap();
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive).unwrap();
    fd
}

#[test]
fn the_sweep_takes_only_cgroups_whose_owners_lock_is_free() {
    let parent = tempfile::tempdir().unwrap();
    let p = parent.path();
    let make = |name: &str| {
        std::fs::create_dir_all(p.join(name).join("runs/run-x")).unwrap();
        p.join(name)
    };
    // A live korvus in another PID namespace: its PID means nothing here,
    // its lock is what tells.
    let live = make("korvus.4194399-00000000000000aa");
    let gone = make("korvus.4194398-00000000000000bb");
    // The older form: its owner took no lock; swept when its PID is gone.
    let legacy_live = make("korvus.1");
    let legacy_gone = make("korvus.4194397");
    // An older-form name whose PID is not visible, but whose lock is held.
    let legacy_locked = make("korvus.4194396");
    let mine = owner::own_dir(p).unwrap();
    std::fs::create_dir_all(mine.join("runs/run-mine")).unwrap();
    let held = [hold(&live), hold(&legacy_locked)];

    owner::sweep(p);
    for kept in [&live, &legacy_live, &legacy_locked, &mine] {
        assert!(kept.join("runs").exists(), "{} was swept", kept.display());
    }
    for swept in [&gone, &legacy_gone] {
        assert!(!swept.exists(), "{} was not swept", swept.display());
    }
    // Once the owner is gone (its lock released), the next sweep takes it.
    drop(held);
    owner::sweep(p);
    assert!(!live.exists() && !legacy_locked.exists());
    assert!(legacy_live.exists() && mine.join("runs/run-mine").exists());
}

#[test]
fn the_incarnation_names_the_pid_and_a_nonce_and_own_dir_is_locked() {
    let id = owner::incarnation();
    let (pid, nonce) = id.split_once('-').unwrap();
    assert_eq!(pid, std::process::id().to_string());
    assert_eq!(nonce.len(), 16);
    let parent = tempfile::tempdir().unwrap();
    let mine = owner::own_dir(parent.path()).unwrap();
    assert_eq!(mine, parent.path().join(format!("korvus.{id}")));
    assert_eq!(owner::own_dir(parent.path()).unwrap(), mine, "made once");
    let other = rustix::fs::open(&mine, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let taken = rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    assert!(taken.is_err(), "this process holds its own dir's lock");
}

/// On a real cgroup v1 pids hierarchy (root on the development and CI
/// hosts): the sweep kills the processes a gone owner's run left and
/// removes its cgroup; a live owner's (its lock held) keeps running.
#[test]
fn on_a_real_hierarchy_the_sweep_kills_only_a_gone_owners_runs() {
    let pids = match discover::own() {
        Ok(Hierarchy::V1(V1Dirs { pids: Some(p), .. })) if rustix::process::geteuid().is_root() => {
            p
        }
        // Under `cargo xtask test` (`KORVUS_REQUIRE_SERVICES=1`, as root on
        // a cgroup v1 host) this fails instead, like `tests/limits.rs`.
        other => {
            assert!(
                std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "this test needs root and a writable cgroup v1 pids hierarchy; found {other:?}"
            );
            eprintln!("skipped: no writable cgroup v1 pids hierarchy ({other:?})");
            return;
        }
    };
    // A parent of the test's own, so no other sweep looks into it.
    let parent = pids.join(format!("korvus-sweep-test-{}", owner::incarnation()));
    let run = |owner: &str| {
        let dir = parent.join(owner).join("runs/run-1");
        std::fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        write(&dir.join("cgroup.procs"), &child.id().to_string()).unwrap();
        (parent.join(owner), child)
    };
    let (live, mut live_child) = run("korvus.4194399-00000000000000aa");
    let (gone, mut gone_child) = run("korvus.4194398-00000000000000bb");
    let held = hold(&live);

    owner::sweep(&parent);
    let deadline = Instant::now() + Duration::from_secs(5);
    while gone_child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let gone_ended = gone_child.try_wait().unwrap();
    let live_runs = live_child.try_wait().unwrap().is_none();
    // Clean up before asserting.
    let _ = live_child.kill();
    let _ = live_child.wait();
    let _ = gone_child.kill();
    let _ = gone_child.wait();
    drop(held);
    owner::sweep(&parent);
    let _ = std::fs::remove_dir(&parent);

    assert!(gone_ended.is_some(), "the gone owner's run was not killed");
    assert!(live_runs, "the live owner's run was killed");
    assert!(!gone.exists(), "the gone owner's cgroup is left");
    assert!(!live.exists(), "swept once its lock was free");
    assert!(!parent.exists());
}
