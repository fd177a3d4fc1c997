//! What the agent's process does between `fork` and `exec`: the one module
//! of the workspace allowed to contain `unsafe` code (tidy fails on any
//! other).
//!
//! Three things must happen in the child before the agent's program runs,
//! and stable std offers none of them safely:
//!
//! - **joining its cgroups**, so no instruction of the agent runs outside
//!   its memory, task and CPU limits (a fork bomb has no window);
//! - **`setsid`**, so the agent has a session of its own and no
//!   controlling terminal (std's `process_group` would run `setpgid`
//!   first, after which `setsid` fails with `EPERM`, so it is not used);
//! - **restoring the soft `RLIMIT_NOFILE`** the embedding process started
//!   with, when it raised its own ([`raise_open_file_limit`]).
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
//!   `setsid` and `setrlimit` system calls through `rustix` (plain
//!   syscalls, no libc state);
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

/// What the child does before `exec`.
#[derive(Debug, Default)]
pub(crate) struct ChildSetup {
    /// Start a new session (and process group) with no controlling
    /// terminal.
    pub(crate) new_session: bool,
    /// `cgroup.procs` files to write `0` to (the writer joins the cgroup),
    /// opened for writing before the fork.
    pub(crate) join: Vec<OwnedFd>,
}

/// Installs `setup` as `cmd`'s pre-exec hook. Without anything to do, no
/// hook is installed (std then keeps its faster `posix_spawn` path).
pub(crate) fn install(cmd: &mut tokio::process::Command, setup: ChildSetup) {
    let nofile = ORIGINAL_NOFILE.get().copied();
    if !setup.new_session && setup.join.is_empty() && nofile.is_none() {
        return;
    }
    let ChildSetup { new_session, join } = setup;
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
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before `exec`. It calls
    // only `write`, `setsid` and `setrlimit` (async-signal-safe system
    // calls, made directly by rustix), on descriptors opened before the
    // fork and values moved into it; it allocates nothing (errors are
    // inline errnos) and takes no lock. See the module docs.
    unsafe {
        cmd.pre_exec(hook);
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
