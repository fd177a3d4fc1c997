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
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use rustix::event::poll;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{mount, mount_change, MountFlags, MountPropagationFlags};
use rustix::process::{DumpableBehavior, Pid, Signal, WaitOptions};
use rustix::thread::UnshareFlags;

use super::errno;
use super::sys::{block_stop_signals, close_all_but, end_as, exit, fork, forward, wait_for, TICK};
use crate::network::netns::loopback_up;

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
    /// Where this process's command line lies in its memory
    /// (`arg_start..arg_end` of `/proc/self/stat`): the init zeroes its
    /// copy, as `/proc/1/cmdline` is readable by every process of the
    /// namespace however undumpable the init is (its `environ` is not).
    pub(crate) argv: Option<(usize, usize)>,
}

/// This process's `arg_start` and `arg_end` (fields 48 and 49 of
/// `/proc/self/stat`), read before any fork.
pub(crate) fn argv_range() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // Field n (1-based) is `fields[n - 3]` after the command name.
    let start: usize = fields.get(48 - 3)?.parse().ok()?;
    let end: usize = fields.get(49 - 3)?.parse().ok()?;
    (start > 0 && end > start && end - start < (1 << 24)).then_some((start, end))
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
    let made = LIFELINE.get_or_init(|| {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // Never 0, 1 or 2 (a process started with one closed): the child's
        // stdio would replace them.
        let high = |fd: OwnedFd| -> Result<OwnedFd, Errno> {
            if fd.as_raw_fd() > 2 {
                Ok(fd)
            } else {
                rustix::io::fcntl_dupfd_cloexec(&fd, 3)
            }
        };
        Ok((high(read)?, high(write)?))
    });
    match made {
        Ok((read, _write)) => Ok(read.as_raw_fd()),
        Err(e) => Err(errno(*e)),
    }
}

/// In the forked child: the namespaces, the mounts and the split into
/// keeper, init and agent. Returns only in the agent's process; the keeper
/// and the init end inside.
pub(super) fn enter(
    contain: Contain,
    own_network: bool,
    gateway: Option<(std::os::fd::BorrowedFd<'_>, u16)>,
) -> std::io::Result<()> {
    // An embedding process that ignores `SIGCHLD` would have the kernel
    // reap the init and the agent before the keeper and the init could.
    // SAFETY: resetting one signal's disposition is a system call.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
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
        super::gateway_listener(gateway)?;
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
    if let Some((start, end)) = contain.argv {
        // SAFETY: `start..end` is this process's own argument strings (read
        // from `/proc/self/stat` before the fork; the memory is this
        // process's private copy), which nothing here or in the agent's
        // process reads again (std executes from arrays of its own).
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
    }
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
    let mut killed = false;
    let init_status = loop {
        match rustix::process::waitpid(Some(init), WaitOptions::NOHANG) {
            Ok(Some((_, st))) => break st.as_raw(),
            Ok(None) => {}
            // Reaped by someone else: gone, status unknown.
            Err(_) => break 1 << 8,
        }
        if killed {
            // The lifeline stays broken: wait for the init's end alone.
            let _ = poll(&mut [], Some(&TICK));
            continue;
        }
        let block = signals.is_some() && pidfd.is_some();
        let woke = wait_for(lifeline, signals.as_ref(), pidfd.as_ref(), block);
        if woke.lifeline {
            let _ = rustix::process::kill_process(init, Signal::KILL);
            killed = true;
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
