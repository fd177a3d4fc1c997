//! Containing the agent in namespaces of its own, with korvus's minimal
//! init as their first process.
//!
//! In the forked child (the process korvus knows as the agent's leader,
//! called the *keeper* here), before anything of the agent's runs:
//!
//! 1. `unshare` a PID, mount and IPC namespace (and a user namespace first
//!    when korvus is not root; and the network namespace, when the run's
//!    policy makes one in the child);
//! 2. make every mount private (nothing of ours reaches the host's
//!    namespace) and mount a **new `devpts` instance** on `/dev/pts`: the
//!    terminals that existed before the agent are not in it, and
//!    `/dev/ptmx` opens this instance (the kernel resolves it through the
//!    sibling `pts`), so the pseudo-terminals the agent makes still work;
//! 3. fork the **init**, the new PID namespace's process 1. It mounts a
//!    `/proc` of that namespace (the agent sees only its own processes) and
//!    forks the **agent's process**, which returns from the hook: only it
//!    goes on to switch user, drop capabilities, enter Landlock and `exec`.
//!
//! The keeper and the init never `exec`; both close every descriptor they
//! do not need (the agent's pipes, the embedding process's sockets, other
//! runs' lifelines), are not dumpable (the agent cannot read their memory
//! or `/proc/<pid>/environ`, which hold the embedding process's), block the
//! stop signals and read them from a `signalfd`:
//!
//! - the **keeper** forwards `SIGTERM`, `SIGINT`, `SIGHUP`, `SIGQUIT`,
//!   `SIGUSR1` and `SIGUSR2` to the init, kills the init when the process's
//!   **lifeline** ([`lifeline`]: a pipe whose write end only the embedding
//!   process holds) reads end-of-file — korvus died, even by `SIGKILL` —
//!   and, once the init has ended, ends as the agent's process did (its
//!   exit code, or killed by its signal), which the init told it through
//!   a pipe;
//! - the **init** forwards the stop signals to every process of the
//!   namespace (a bare process 1 would ignore them), reaps every orphan, and
//!   ends when the agent's process ends or the lifeline breaks: the kernel
//!   then kills whatever is left in the namespace.
//!
//! So korvus stops a contained run by signalling the keeper (`SIGTERM`
//! then reaches every process of the run once) and kills it with the
//! process group as before (`SIGKILL` kills the keeper and the init, and
//! with the init the whole namespace). The keeper and the init stay in the
//! run's session and cgroups, so the stall clock and the limits see them.
//!
//! Every call here is a system call made directly (rustix, or `libc` for
//! what rustix does not offer: `clone`, `close_range`, the signal mask and
//! `signalfd`, `kill` of every process), on descriptors and values that exist before the
//! first fork; nothing allocates or takes a lock (see the parent module's
//! audit).

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{mount, mount_change, MountFlags, MountPropagationFlags};
use rustix::process::{DumpableBehavior, Pid, Signal, WaitOptions};
use rustix::thread::UnshareFlags;

use super::errno;
use crate::network::netns::loopback_up;

/// The signals the keeper and the init pass on.
const STOP_SIGNALS: [i32; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The exit code of an init whose lifeline broke (korvus is gone).
const ORPHANED: i32 = 137;

/// How the child contains the agent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Contain {
    /// Create a user namespace first (korvus is not root).
    pub(crate) user_ns: bool,
    /// The read end of [`lifeline`].
    pub(crate) lifeline: RawFd,
    /// The Landlock rules the new mounts need, added to the run's ruleset
    /// once they exist: a rule on `/dev/pts` or `/proc` made before the
    /// fork names the host's instance, and Landlock never looks at the
    /// directory a mount hides.
    pub(crate) rules: Option<MountRules>,
}

/// What the agent may do beneath its own `/dev/pts` and `/proc`
/// (Landlock access bits; `0`: no rule).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MountRules {
    /// The run's ruleset (open until the agent's process enters it).
    pub(crate) ruleset: RawFd,
    pub(crate) devpts: u64,
    pub(crate) proc: u64,
}

/// The process's lifeline: a pipe whose write end this process holds until
/// it ends (both ends close on `exec`). A contained run's keeper and init
/// watch the read end; end-of-file means korvus is gone. Made once; the
/// read end is returned.
pub(crate) fn lifeline() -> std::io::Result<RawFd> {
    static LIFELINE: OnceLock<Result<(OwnedFd, OwnedFd), Errno>> = OnceLock::new();
    let made = LIFELINE.get_or_init(|| rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC));
    match made {
        Ok((read, _write)) => Ok(read.as_raw_fd()),
        Err(e) => Err(errno(*e)),
    }
}

/// In the forked child: the namespaces, the mounts and the split into
/// keeper, init and agent. Returns only in the agent's process; the keeper
/// and the init end inside.
pub(super) fn enter(contain: Contain, own_network: bool) -> std::io::Result<()> {
    let mut flags = UnshareFlags::NEWPID | UnshareFlags::NEWNS | UnshareFlags::NEWIPC;
    if contain.user_ns {
        flags |= UnshareFlags::NEWUSER;
    }
    if own_network {
        flags |= UnshareFlags::NEWNET;
    }
    // SAFETY: `unshare` of namespaces (no `CLONE_FILES`, `CLONE_FS` or
    // `CLONE_VM`) changes only which namespaces this single-threaded
    // process and its children belong to; no memory or descriptor state
    // is unshared, which is what makes `unshare` unsafe in general.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(errno)?;
    if own_network {
        loopback_up().map_err(errno)?;
    }
    mount_change(
        c"/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(errno)?;
    mount(
        c"devpts",
        c"/dev/pts",
        c"devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        Some(c"newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(errno)?;
    if let Some(rules) = contain.rules {
        add_rule(rules.ruleset, c"/dev/pts", rules.devpts)?;
    }
    let (status_read, status_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(errno)?;
    match fork()? {
        Some(init) => {
            drop(status_write);
            keep(init, &status_read, contain.lifeline)
        }
        None => {
            drop(status_read);
            be_init(status_write, contain)
        }
    }
}

/// The init's part: returns in the agent's process only.
fn be_init(status: OwnedFd, contain: Contain) -> std::io::Result<()> {
    // The keeper gone (killed with the group), the namespace goes too.
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(errno)?;
    // Before the agent's process exists: its memory and `environ` are the
    // embedding process's. (`exec` makes the agent's own dumpable again.)
    rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable).map_err(errno)?;
    mount(
        c"proc",
        c"/proc",
        c"proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
    .map_err(errno)?;
    if let Some(rules) = contain.rules {
        add_rule(rules.ruleset, c"/proc", rules.proc)?;
    }
    match fork()? {
        Some(agent) => init_loop(agent, &status, contain.lifeline),
        None => {
            drop(status);
            Ok(())
        }
    }
}

/// The keeper: forwards the stop signals to the init, kills it when the
/// lifeline breaks, and ends as the agent's process did.
fn keep(init: Pid, status: &OwnedFd, lifeline: RawFd) -> ! {
    let _ = rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable);
    let signals = block_stop_signals(false);
    let pidfd = rustix::process::pidfd_open(init, rustix::process::PidfdFlags::empty()).ok();
    let mut kept = [
        status.as_raw_fd(),
        lifeline,
        signals.as_ref().map_or(-1, AsRawFd::as_raw_fd),
        pidfd.as_ref().map_or(-1, AsRawFd::as_raw_fd),
    ];
    close_all_but(&mut kept);
    // SAFETY: `lifeline` is the read end of the process's lifeline, which
    // the embedding process never closes and `close_all_but` kept open.
    let lifeline = unsafe { BorrowedFd::borrow_raw(lifeline) };
    let init_status = loop {
        if let Ok(Some((_, st))) = rustix::process::waitpid(Some(init), WaitOptions::NOHANG) {
            break st.as_raw();
        }
        let block = signals.is_some() && pidfd.is_some();
        let woke = wait_for(lifeline, signals.as_ref(), pidfd.as_ref(), block);
        if woke.lifeline {
            let _ = rustix::process::kill_process(init, Signal::KILL);
        }
        if let Some(signal) = woke.signal {
            forward(init.as_raw_nonzero().get(), signal);
        }
    };
    let mut told = [0u8; 4];
    let raw = match rustix::io::read(status, &mut told) {
        Ok(4) => i32::from_ne_bytes(told),
        _ => init_status,
    };
    end_as(raw)
}

/// The init's loop: reaps every child, forwards the stop signals to the
/// whole namespace, and ends when the agent's process has (telling the
/// keeper how) or the lifeline breaks.
fn init_loop(agent: Pid, status: &OwnedFd, lifeline: RawFd) -> ! {
    let signals = block_stop_signals(true);
    let mut kept = [
        status.as_raw_fd(),
        lifeline,
        signals.as_ref().map_or(-1, AsRawFd::as_raw_fd),
    ];
    close_all_but(&mut kept);
    // SAFETY: as in `keep`.
    let lifeline = unsafe { BorrowedFd::borrow_raw(lifeline) };
    loop {
        while let Ok(Some((pid, st))) = rustix::process::waitpid(None, WaitOptions::NOHANG) {
            if pid == agent {
                let _ = rustix::io::write(status, &st.as_raw().to_ne_bytes());
                // Process 1 ending kills the rest of the namespace.
                exit(0);
            }
        }
        // `SIGCHLD` comes through the signalfd too.
        let woke = wait_for(lifeline, signals.as_ref(), None, signals.is_some());
        if woke.lifeline {
            exit(ORPHANED);
        }
        if let Some(signal) = woke.signal.filter(|s| *s != libc::SIGCHLD) {
            // Every process of the namespace but this one.
            forward(-1, signal);
        }
    }
}

/// Adds to `ruleset` a Landlock rule granting `access` beneath `path`
/// (nothing when `access` is empty).
fn add_rule(ruleset: RawFd, path: &CStr, access: u64) -> std::io::Result<()> {
    /// `struct landlock_path_beneath_attr`.
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    /// `LANDLOCK_RULE_PATH_BENEATH`.
    const PATH_BENEATH: libc::c_int = 1;
    if access == 0 {
        return Ok(());
    }
    let dir = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let attr = PathBeneath {
        allowed_access: access,
        parent_fd: dir.as_raw_fd(),
    };
    // SAFETY: `landlock_add_rule` reads `attr`, a packed struct of the
    // layout the kernel expects that lives across the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            PATH_BENEATH,
            std::ptr::from_ref(&attr),
            0u32,
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What woke a keeper or an init.
struct Woke {
    lifeline: bool,
    signal: Option<i32>,
}

/// Waits for the lifeline to break, a signal, or (with `pidfd`) the init
/// to end; without `block`, wakes after 100 ms at the latest (the caller
/// could not watch everything it waits for).
fn wait_for(
    lifeline: BorrowedFd<'_>,
    signals: Option<&OwnedFd>,
    pidfd: Option<&OwnedFd>,
    block: bool,
) -> Woke {
    let none = PollFlags::empty();
    let mut fds = [
        PollFd::new(&lifeline, PollFlags::IN),
        PollFd::from_borrowed_fd(signals.map_or(lifeline, AsFd::as_fd), PollFlags::IN),
        PollFd::from_borrowed_fd(pidfd.map_or(lifeline, AsFd::as_fd), PollFlags::IN),
    ];
    let tick = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    let _ = poll(&mut fds, if block { None } else { Some(&tick) });
    let broke = fds[0].revents() != none;
    let signal = match signals {
        Some(fd) if fds[1].revents() != none => read_signal(fd),
        _ => None,
    };
    Woke {
        lifeline: broke,
        signal,
    }
}

/// The number of the next signal a signalfd holds.
fn read_signal(fd: &OwnedFd) -> Option<i32> {
    // `struct signalfd_siginfo` is 128 bytes; `ssi_signo` is its first u32.
    let mut info = [0u8; 128];
    match rustix::io::read(fd, &mut info) {
        Ok(128) => {
            let signo = u32::from_ne_bytes([info[0], info[1], info[2], info[3]]);
            i32::try_from(signo).ok()
        }
        _ => None,
    }
}

/// Sends `signal` to `pid` (`-1`: every process this one may signal, in
/// its PID namespace, but itself).
fn forward(pid: i32, signal: i32) {
    // SAFETY: `kill` is a system call on plain integers.
    let _ = unsafe { libc::kill(pid, signal) };
}

/// Blocks the stop signals (and `SIGCHLD` with `child`) and returns a
/// signalfd that reads them, or `None` where none could be made (the
/// caller then polls).
fn block_stop_signals(child: bool) -> Option<OwnedFd> {
    // SAFETY: `sigset_t` is plain data; the libc calls below fill it,
    // change this single thread's mask and make a descriptor, all system
    // calls or pure functions on the stack value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in STOP_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        if child {
            libc::sigaddset(&mut set, libc::SIGCHLD);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        (fd >= 0).then(|| std::os::fd::FromRawFd::from_raw_fd(fd))
    }
}

/// Closes every descriptor of this process but `keep` (negative entries
/// are ignored). `keep` is sorted in place.
fn close_all_but(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut first: u32 = 0;
    for fd in keep.iter().copied() {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd > first {
            close_range(first, fd - 1);
        }
        first = fd + 1;
    }
    close_range(first, u32::MAX);
}

/// Closes the descriptors `first..=last`; one at a time where the kernel
/// has no `close_range` (before 5.9), up to the open-file limit.
fn close_range(first: u32, last: u32) {
    // SAFETY: `close_range` is a system call on plain integers; no
    // descriptor closed here is used again by this process.
    let done = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) } == 0;
    if done {
        return;
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(65_536)
        .min(1 << 20);
    let last = u64::from(last).min(limit.saturating_sub(1));
    for fd in u64::from(first)..=last {
        // SAFETY: as above, one descriptor at a time.
        let _ = unsafe { libc::close(i32::try_from(fd).unwrap_or(i32::MAX)) };
    }
}

/// `fork` as the system call (`clone` with `SIGCHLD`): no `atfork`
/// handler or other libc state runs, so a child of a multi-threaded
/// process may call it. `Some(pid)` in the parent, `None` in the child.
fn fork() -> std::io::Result<Option<Pid>> {
    // SAFETY: `clone` without `CLONE_VM` and without a new stack behaves as
    // `fork`: the child gets a copy of this (single-threaded) process and
    // continues here. Nothing after it relies on libc's cached process
    // state.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_long::from(libc::SIGCHLD),
            0,
            0,
            0,
            0,
        )
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if ret == 0 {
        return Ok(None);
    }
    let pid = i32::try_from(ret).ok().and_then(Pid::from_raw);
    pid.map(Some)
        .ok_or_else(|| std::io::Error::other("clone returned no pid"))
}

/// Ends this process as a process with wait status `raw` ended: with its
/// exit code, or killed by its signal (without a core file).
fn end_as(raw: i32) -> ! {
    if libc::WIFSIGNALED(raw) {
        let signal = libc::WTERMSIG(raw);
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Core,
            rustix::process::Rlimit {
                current: Some(0),
                maximum: Some(0),
            },
        );
        // SAFETY: resetting one signal's disposition, unblocking it and
        // sending it to this process are system calls on plain values.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
        exit(128 + signal);
    }
    exit(libc::WEXITSTATUS(raw))
}

/// `_exit`: no atexit handler, no flush of the parent's buffers.
fn exit(code: i32) -> ! {
    // SAFETY: `_exit` ends the process at once.
    unsafe { libc::_exit(code) }
}
