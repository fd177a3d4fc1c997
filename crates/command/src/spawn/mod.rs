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
//! - **containing it** ([`contain`]): PID, mount and IPC namespaces of its
//!   own (in a user namespace when korvus is not root), a private `devpts`
//!   and `/proc`, and korvus's minimal init as the namespace's process 1,
//!   which ends the namespace when korvus dies;
//! - **a user and network namespace of its own** when korvus is not root
//!   and the run's [`Network`](crate::Network) policy isolates it (only a
//!   single-threaded process may create a user namespace), with its
//!   loopback brought up;
//! - **dropping capabilities a root agent does not need** from its
//!   bounding set ([`root_agent_drops`]: all but [`ROOT_AGENT_KEEPS`]),
//!   whatever its network policy: `exec` then gives it none of them;
//! - **switching to the agent's user** (after the namespaces and mounts,
//!   which need korvus's privileges) and **entering the Landlock domain**
//!   last: a restricted process may not change mounts, so the ruleset is
//!   built before the fork and only `landlock_restrict_self` runs here.
//!
//! It also holds the two other `unshare` calls: the starting thread's
//! move into a new network namespace (as root), and the once-per-process
//! probes of what the child can do.
//!
//! # The audit
//!
//! `CommandExt::pre_exec` runs a closure in the forked child, where only
//! async-signal-safe functions may be called: another thread of the parent
//! may have held the allocator's lock at the fork. The closure below
//! therefore:
//!
//! - allocates nothing and takes no lock: it writes a constant one-byte
//!   buffer to descriptors opened **before** the fork, and makes system
//!   calls directly through `rustix` (no libc state), or through `libc`'s
//!   thin wrappers where rustix has none (`clone` as a raw system call,
//!   never libc's `fork`, whose `atfork` handlers take locks); paths and
//!   mount options are C string literals; the netlink request is a fixed
//!   array on the stack (see `network::netns::loopback_up`);
//! - builds its errors with `std::io::Error::from_raw_os_error`, which
//!   stores the errno inline (no allocation);
//! - touches only data moved into it, which nothing else can change.
//!
//! The descriptors are `O_CLOEXEC`, so the agent's program never inherits
//! them; the parent's copies close when the `Command` is dropped. The
//! contained run's keeper and init, which never `exec`, close every
//! descriptor they do not need themselves.

#![allow(unsafe_code)] // This module is the audited exception; see above.

pub(crate) mod contain;
mod sys;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
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
    /// With `own_network`: the child's end of the channel the model
    /// gateway's listener is sent over, and its port (see
    /// `netns::send_listener`).
    pub(crate) gateway: Option<(OwnedFd, u16)>,
    /// Capabilities removed from the bounding set before `exec`
    /// ([`root_agent_drops`] for an agent running as root).
    pub(crate) drop_caps: CapabilitySet,
    /// Contain the agent (namespaces, private `devpts` and `/proc`, init).
    pub(crate) contain: Option<contain::Contain>,
    /// The uid and gid to switch to, after the namespaces and mounts.
    pub(crate) user: Option<(u32, u32)>,
    /// The Landlock ruleset the agent's process enters last.
    pub(crate) landlock: Option<OwnedFd>,
}

impl Default for ChildSetup {
    /// Nothing to do before `exec`.
    fn default() -> Self {
        Self {
            new_session: false,
            join: Vec::new(),
            own_network: false,
            gateway: None,
            drop_caps: CapabilitySet::empty(),
            contain: None,
            user: None,
            landlock: None,
        }
    }
}

/// What an agent running as root keeps of korvus's capabilities: those a
/// root user installing packages and managing files needs (Docker's
/// default set without `CAP_MKNOD`, since no device cgroup stops a device
/// node made in the scratch dir, and `CAP_NET_RAW`, which on the host's
/// network would read other processes' traffic). Everything else —
/// administration (`TIOCSTI`, mounts, `setns`), tracing and reading other
/// processes, bypassing search checks by handle, modules, raw I/O, the
/// clock, the kernel log, other users' IPC objects — is dropped.
pub(crate) const ROOT_AGENT_KEEPS: CapabilitySet = CapabilitySet::CHOWN
    .union(CapabilitySet::DAC_OVERRIDE)
    .union(CapabilitySet::FOWNER)
    .union(CapabilitySet::FSETID)
    .union(CapabilitySet::KILL)
    .union(CapabilitySet::SETGID)
    .union(CapabilitySet::SETUID)
    .union(CapabilitySet::SETPCAP)
    .union(CapabilitySet::SETFCAP)
    .union(CapabilitySet::NET_BIND_SERVICE)
    .union(CapabilitySet::SYS_CHROOT)
    .union(CapabilitySet::AUDIT_WRITE);

/// What an agent running as root loses: every capability of this process's
/// bounding set but [`ROOT_AGENT_KEEPS`] (only those, since removing one
/// the kernel does not know fails).
pub(crate) fn root_agent_drops() -> CapabilitySet {
    let mut drops = CapabilitySet::empty();
    for (_, cap) in CapabilitySet::all().iter_names() {
        let bounded = rustix::thread::capability_is_in_bounding_set(cap).unwrap_or(false);
        if bounded && !ROOT_AGENT_KEEPS.contains(cap) {
            drops |= cap;
        }
    }
    drops
}

/// The note a root agent's run gets: what it lost and which of the
/// capabilities this process has it keeps.
pub(crate) fn capabilities_note(dropped: CapabilitySet) -> String {
    let name = |n: &str| format!("CAP_{n}");
    let lost: Vec<String> = dropped.iter_names().map(|(n, _)| name(n)).collect();
    if lost.is_empty() {
        return "the agent runs as root with every capability of this process".to_owned();
    }
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
        && setup.contain.is_none()
        && setup.user.is_none()
        && setup.landlock.is_none()
    {
        return;
    }
    let ChildSetup {
        new_session,
        join,
        own_network,
        gateway,
        drop_caps,
        contain,
        user,
        landlock,
    } = setup;
    let root = rustix::process::geteuid().is_root();
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
        let gateway = gateway.as_ref().map(|(fd, port)| (fd.as_fd(), *port));
        match contain {
            // Returns in the agent's process only.
            Some(c) => contain::enter(c, own_network, gateway)?,
            None if own_network => own_network_namespace(gateway)?,
            None => {}
        }
        // One flag at a time (the iterator allocates nothing).
        for cap in drop_caps.iter() {
            rustix::thread::remove_capability_from_bounding_set(cap).map_err(errno)?;
        }
        if !drop_caps.is_empty() {
            // `exec` gives root its inheritable set too: some container
            // runtimes fill it, which would bring dropped ones back.
            let mut caps = rustix::thread::capabilities(None).map_err(errno)?;
            caps.inheritable = CapabilitySet::empty();
            rustix::thread::set_capabilities(None, caps).map_err(errno)?;
            rustix::thread::clear_ambient_capability_set().map_err(errno)?;
        }
        if let Some((uid, gid)) = user {
            switch_user(root, uid, gid)?;
        }
        if let Some(ruleset) = &landlock {
            restrict_self(ruleset)?;
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before `exec`. It makes
    // only system calls (rustix's direct ones, libc's thin wrappers, a raw
    // `clone`), on descriptors opened before the fork and values moved
    // into it; it allocates nothing (errors are inline errnos, paths are C
    // string literals) and takes no lock. See the module docs.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Becomes `uid`/`gid` with no supplementary groups (those are dropped
/// only when this process may, i.e. is root), as std's `Command::uid`
/// would, but after the namespaces and mounts.
fn switch_user(root: bool, uid: u32, gid: u32) -> std::io::Result<()> {
    use rustix::process::{Gid, Uid};
    if root {
        rustix::thread::set_thread_groups(&[]).map_err(errno)?;
    }
    rustix::thread::set_thread_gid(Gid::from_raw(gid)).map_err(errno)?;
    rustix::thread::set_thread_uid(Uid::from_raw(uid)).map_err(errno)
}

/// Enters the Landlock domain of `ruleset` (a descriptor made before the
/// fork), with `no_new_privs` set as Landlock requires.
fn restrict_self(ruleset: &OwnedFd) -> std::io::Result<()> {
    rustix::thread::set_no_new_privs(true).map_err(errno)?;
    // SAFETY: `landlock_restrict_self` is a system call on a descriptor and
    // a flag word; it restricts only this thread (and what it starts).
    let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// In a single-threaded child: a new user namespace (the only way to get
/// a network namespace without root) and a new network namespace owned by
/// it, then its loopback up. No uid map is written (that would mean
/// writing to `/proc`, which the agent's Landlock domain forbids), so the
/// agent sees its uid as the overflow uid; the kernel still checks files
/// against its real one.
fn own_network_namespace(gateway: Option<(BorrowedFd<'_>, u16)>) -> std::io::Result<()> {
    // SAFETY: `unshare` of `CLONE_NEWUSER | CLONE_NEWNET` changes only the
    // namespaces of this (single-threaded, about to `exec`) process; it
    // shares or unshares no memory, descriptor table or filesystem state,
    // which is what makes `unshare` unsafe in general.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }
        .map_err(errno)?;
    loopback_up().map_err(errno)?;
    gateway_listener(gateway)
}

/// Sends the model gateway its listener from the namespace just made; a
/// failure fails the agent's start (before `exec`), with its errno.
pub(crate) fn gateway_listener(gateway: Option<(BorrowedFd<'_>, u16)>) -> std::io::Result<()> {
    match gateway {
        Some((channel, port)) => crate::network::netns::send_listener(channel, port).map_err(errno),
        None => Ok(()),
    }
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
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || own_network_namespace(None));
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

/// Whether a child of this process can be contained ([`contain`]): the
/// lifeline made and `/bin/sh -c 'exit 0'` started in namespaces of its
/// own, under korvus's init, once per process. The reason, where not.
pub(crate) fn probe_contain() -> Result<contain::Contain, String> {
    static PROBED: OnceLock<Result<contain::Contain, String>> = OnceLock::new();
    PROBED
        .get_or_init(|| {
            let lifeline = contain::lifeline().map_err(|e| format!("no lifeline pipe: {e}"))?;
            let c = contain::Contain {
                user_ns: !rustix::process::geteuid().is_root(),
                lifeline,
                rules: None,
                argv: contain::argv_range(),
            };
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.args(["-c", "exit 0"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            // SAFETY: as in `install`: the hook makes only system calls and
            // allocates nothing.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    contain::enter(c, false, None)
                });
            }
            match cmd.status() {
                Ok(status) if status.success() => Ok(c),
                Ok(status) => Err(format!("the probe ended with {status}")),
                Err(e) => Err(format!("namespaces, devpts or /proc refused: {e}")),
            }
        })
        .clone()
}

/// The Landlock ABI version this kernel offers (`0`: none).
pub(crate) fn landlock_kernel_abi() -> u8 {
    /// `LANDLOCK_CREATE_RULESET_VERSION`.
    const VERSION: u32 = 1;
    // SAFETY: `landlock_create_ruleset` with a null attribute, a zero size
    // and the version flag only returns a number; it reads no memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            VERSION,
        )
    };
    u8::try_from(ret.max(0)).unwrap_or(u8::MAX)
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
#[non_exhaustive]
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
