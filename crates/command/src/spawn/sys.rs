//! The system calls korvus's keeper and init are made of (see `contain`):
//! waiting on the lifeline, a signalfd and a pidfd, passing signals on,
//! closing descriptors, a raw `fork`, and ending as another process ended.
//! Like the rest of `spawn/`, nothing here allocates or takes a lock.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::Pid;

/// The signals the keeper and the init pass on.
pub(super) const STOP_SIGNALS: [i32; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// How long a keeper or an init waits at most when it cannot watch
/// everything it waits for.
pub(super) const TICK: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 10_000_000,
};

/// What woke a keeper or an init.
pub(super) struct Woke {
    pub(super) lifeline: bool,
    pub(super) signal: Option<i32>,
}

/// Waits for the lifeline to break, a signal, or (with `pidfd`) the init
/// to end; without `block`, wakes after [`TICK`] at the latest (the
/// caller could not watch everything it waits for).
pub(super) fn wait_for(
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
    let _ = poll(&mut fds, if block { None } else { Some(&TICK) });
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
pub(super) fn read_signal(fd: &OwnedFd) -> Option<i32> {
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
pub(super) fn forward(pid: i32, signal: i32) {
    // SAFETY: `kill` is a system call on plain integers.
    let _ = unsafe { libc::kill(pid, signal) };
}

/// Blocks the stop signals (and `SIGCHLD` with `child`) and returns a
/// signalfd that reads them, or `None` where none could be made (the
/// caller then polls).
pub(super) fn block_stop_signals(child: bool) -> Option<OwnedFd> {
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
        if fd < 0 {
            // Nothing would read them: let them act as before instead.
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            return None;
        }
        Some(std::os::fd::FromRawFd::from_raw_fd(fd))
    }
}

/// Closes every descriptor of this process but `keep` (negative entries
/// are ignored). `keep` is sorted in place.
pub(super) fn close_all_but(keep: &mut [RawFd]) {
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
pub(super) fn close_range(first: u32, last: u32) {
    // SAFETY: `close_range` is a system call on plain integers; no
    // descriptor closed here is used again by this process.
    let done = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) } == 0;
    if done {
        return;
    }
    // The hard limit: korvus may hold descriptors past the soft limit the
    // hook gave back.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(1 << 20)
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
pub(super) fn fork() -> std::io::Result<Option<Pid>> {
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
        .ok_or_else(|| std::io::Error::from_raw_os_error(Errno::INVAL.raw_os_error()))
}

/// Ends this process as a process with wait status `raw` ended: with its
/// exit code, or killed by its signal (without a core file).
pub(super) fn end_as(raw: i32) -> ! {
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
pub(super) fn exit(code: i32) -> ! {
    // SAFETY: `_exit` ends the process at once.
    unsafe { libc::_exit(code) }
}
