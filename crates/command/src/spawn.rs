//! What the agent's process does between `fork` and `exec`: the one module
//! of the workspace allowed to contain `unsafe` code (tidy fails on any
//! other).
//!
//! These things must happen in the child before the agent's program runs,
//! and stable std offers none of them safely:
//!
//! - **joining its cgroups**, so no instruction of the agent runs outside
//!   its memory, task and CPU limits (a fork bomb has no window);
//! - **`setsid`**, so the agent has a session of its own and no
//!   controlling terminal (std's `process_group` would run `setpgid`
//!   first, after which `setsid` fails with `EPERM`, so it is not used);
//! - **restoring the soft `RLIMIT_NOFILE`** the embedding process started
//!   with, when it raised its own ([`raise_open_file_limit`]);
//! - **a user and network namespace of its own** when korvus is not root
//!   and the run's [`Network`](crate::Network) policy isolates it (only a
//!   single-threaded process may create a user namespace), with its
//!   loopback brought up;
//! - **dropping capabilities a root agent does not need** from its
//!   bounding set ([`ROOT_AGENT_DROPS`]: `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`,
//!   so it cannot `setns` back into the host's network or take over a
//!   terminal with `TIOCSTI`; `CAP_SYS_PTRACE`, `CAP_DAC_READ_SEARCH`,
//!   `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`, `CAP_SYS_BOOT`, `CAP_BPF`,
//!   `CAP_PERFMON`), whatever its network policy: `exec` then gives it none
//!   of them, and a process with fewer capabilities than korvus cannot
//!   trace korvus or read its `/proc/<pid>/environ`.
//!
//! It also holds the two other `unshare` calls: the starting thread's
//! move into a new network namespace (as root), and the once-per-process
//! probe of whether user namespaces work.
//!
//! # The audit
//!
//! `CommandExt::pre_exec` runs a closure in the forked child, where only
//! async-signal-safe functions may be called: another thread of the parent
//! may have held the allocator's lock at the fork. The closure below
//! therefore:
//!
//! - allocates nothing and takes no lock: it writes a constant one-byte
//!   buffer to descriptors opened **before** the fork, and makes the
//!   `setsid`, `setrlimit`, `unshare`, `socket`, `sendto` and `recvfrom`
//!   system calls through `rustix` (plain syscalls, no libc state; the
//!   netlink request is a fixed array on the stack, see
//!   `network::netns::loopback_up`);
//! - builds its errors with `std::io::Error::from_raw_os_error`, which
//!   stores the errno inline (no allocation);
//! - touches only data moved into it, which nothing else can change.
//!
//! The descriptors are `O_CLOEXEC`, so the agent's program never inherits
//! them; the parent's copies close when the `Command` is dropped.

#![allow(unsafe_code)] // This module is the audited exception; see above.

use std::os::fd::OwnedFd;
use std::sync::OnceLock;

use rustix::process::{Resource, Rlimit};
use rustix::thread::{CapabilitySet, UnshareFlags};

use crate::network::netns::loopback_up;

/// What the child does before `exec`.
#[derive(Debug)]
pub(crate) struct ChildSetup {
    /// Start a new session (and process group) with no controlling
    /// terminal.
    pub(crate) new_session: bool,
    /// `cgroup.procs` files to write `0` to (the writer joins the cgroup),
    /// opened for writing before the fork.
    pub(crate) join: Vec<OwnedFd>,
    /// Create a user and a network namespace (after joining the cgroups
    /// and `setsid`) and bring up the new loopback.
    pub(crate) own_network: bool,
    /// Capabilities removed from the bounding set before `exec`
    /// ([`ROOT_AGENT_DROPS`] for an agent running as root).
    pub(crate) drop_caps: CapabilitySet,
}

impl Default for ChildSetup {
    /// Nothing to do before `exec`.
    fn default() -> Self {
        Self {
            new_session: false,
            join: Vec::new(),
            own_network: false,
            drop_caps: CapabilitySet::empty(),
        }
    }
}

/// What an agent running as root loses: administration (`setns` back to
/// the host's network, `TIOCSTI` into a terminal, mounts), tracing and
/// reading other processes, bypassing directory search checks by handle,
/// kernel modules, raw I/O, reboot, BPF and performance monitoring.
pub(crate) const ROOT_AGENT_DROPS: CapabilitySet = CapabilitySet::SYS_ADMIN
    .union(CapabilitySet::NET_ADMIN)
    .union(CapabilitySet::SYS_PTRACE)
    .union(CapabilitySet::DAC_READ_SEARCH)
    .union(CapabilitySet::SYS_MODULE)
    .union(CapabilitySet::SYS_RAWIO)
    .union(CapabilitySet::SYS_BOOT)
    .union(CapabilitySet::BPF)
    .union(CapabilitySet::PERFMON);

/// The note a root agent's run gets: what it lost and which of the
/// capabilities this process has it keeps.
pub(crate) fn capabilities_note(dropped: CapabilitySet) -> String {
    let name = |n: &str| format!("CAP_{n}");
    let lost: Vec<String> = dropped.iter_names().map(|(n, _)| name(n)).collect();
    let kept: Vec<String> = CapabilitySet::all()
        .iter_names()
        .filter(|(_, c)| !dropped.contains(*c))
        .filter(|(_, c)| rustix::thread::capability_is_in_bounding_set(*c).unwrap_or(false))
        .map(|(n, _)| name(n))
        .collect();
    format!(
        "the agent runs as root without {}; it keeps {}",
        lost.join(", "),
        if kept.is_empty() {
            "none".to_owned()
        } else {
            kept.join(", ")
        }
    )
}

/// Installs `setup` as `cmd`'s pre-exec hook. Without anything to do, no
/// hook is installed (std then keeps its faster `posix_spawn` path).
pub(crate) fn install(cmd: &mut tokio::process::Command, setup: ChildSetup) {
    let nofile = ORIGINAL_NOFILE.get().copied();
    if !setup.new_session
        && setup.join.is_empty()
        && nofile.is_none()
        && !setup.own_network
        && setup.drop_caps.is_empty()
    {
        return;
    }
    let ChildSetup {
        new_session,
        join,
        own_network,
        drop_caps,
    } = setup;
    let hook = move || -> std::io::Result<()> {
        for fd in &join {
            // Writing `0` to `cgroup.procs` moves the writing process.
            let written = rustix::io::write(fd, b"0").map_err(errno)?;
            if written != 1 {
                return Err(std::io::Error::from_raw_os_error(libc_eio()));
            }
        }
        if new_session {
            rustix::process::setsid().map_err(errno)?;
        }
        if let Some(limit) = nofile {
            rustix::process::setrlimit(Resource::Nofile, limit).map_err(errno)?;
        }
        if own_network {
            own_network_namespace()?;
        }
        // One flag at a time (the iterator allocates nothing).
        for cap in drop_caps.iter() {
            rustix::thread::remove_capability_from_bounding_set(cap).map_err(errno)?;
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before `exec`. It calls
    // only `write`, `setsid`, `setrlimit`, `unshare`, `prctl` and the
    // netlink socket calls (async-signal-safe system calls, made directly by
    // rustix), on descriptors opened before the fork and values moved into
    // it; it allocates nothing (errors are inline errnos) and takes no
    // lock. See the module docs.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// In a single-threaded child: a new user namespace (the only way to get
/// a network namespace without root) and a new network namespace owned by
/// it, then its loopback up. No uid map is written (that would mean
/// writing to `/proc`, which the agent's Landlock domain forbids), so the
/// agent sees its uid as the overflow uid; the kernel still checks files
/// against its real one.
fn own_network_namespace() -> std::io::Result<()> {
    // SAFETY: `unshare` of `CLONE_NEWUSER | CLONE_NEWNET` changes only the
    // namespaces of this (single-threaded, about to `exec`) process; it
    // shares or unshares no memory, descriptor table or filesystem state,
    // which is what makes `unshare` unsafe in general.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }
        .map_err(errno)?;
    loopback_up().map_err(errno)
}

/// Moves the calling thread (only it) into a new network namespace; needs
/// `CAP_SYS_ADMIN`. Sockets it opens afterwards, and processes it starts,
/// belong to that namespace; the thread should end once it has started the
/// agent.
pub(crate) fn unshare_thread_network() -> std::io::Result<()> {
    // SAFETY: `CLONE_NEWNET` changes only which network stack this thread's
    // new sockets and children use; no memory, descriptor table or
    // filesystem state is unshared.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }.map_err(errno)
}

/// Whether a child of this process can make its own user and network
/// namespace: `/bin/sh -c 'exit 0'` started with the step the agent's child
/// takes ([`ChildSetup::own_network`]).
pub(crate) fn probe_own_network() -> std::io::Result<()> {
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "exit 0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: as in `install`: the hook makes only async-signal-safe
    // system calls and allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, own_network_namespace);
    }
    let status = cmd.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the probe ended with {status}"
        )))
    }
}

/// An errno as an `io::Error`, without allocating.
fn errno(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// `EIO`, for a short write.
fn libc_eio() -> i32 {
    rustix::io::Errno::IO.raw_os_error()
}

/// The soft open-file limit the process started with, when
/// [`raise_open_file_limit`] raised it; agents get it back.
static ORIGINAL_NOFILE: OnceLock<Rlimit> = OnceLock::new();

/// The open-file limits of this process before and after
/// [`raise_open_file_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit the process started with (what agents get).
    pub original: u64,
    /// The soft limit now (the hard limit, when raising succeeded).
    pub current: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit, so a
/// manager running many agents does not run out of descriptors, and makes
/// every agent started afterwards by a [`CommandRunner`](crate::CommandRunner)
/// start with the original soft limit again (some programs misbehave with
/// a huge one). Call it once, early in `main`; `korvus serve` and
/// `korvus run` do.
///
/// # Errors
/// The `setrlimit` error; nothing changed then.
pub fn raise_open_file_limit() -> std::io::Result<OpenFileLimit> {
    let now = rustix::process::getrlimit(Resource::Nofile);
    let original = *ORIGINAL_NOFILE.get_or_init(|| now);
    let raised = Rlimit {
        current: now.maximum,
        maximum: now.maximum,
    };
    if raised.current != now.current {
        rustix::process::setrlimit(Resource::Nofile, raised).map_err(errno)?;
    }
    let shown = |v: Option<u64>| v.unwrap_or(u64::MAX);
    Ok(OpenFileLimit {
        original: shown(original.current),
        current: shown(raised.current),
    })
}
