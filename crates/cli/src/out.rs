//! Printing that never abandons a run: `say!` and `tell!` write a line to
//! stdout and stderr like `println!` and `eprintln!`, but a closed stream
//! (`korvus run … | head -1`, or a `tee` that Ctrl-C killed) is recorded
//! instead of ending the process, and nothing more is written to it. The
//! commands that drive a session print only through them, so the session
//! goes on to its terminal row (Ctrl-C still cancels it and its report
//! still lands); the process then exits 141, as a shell reports a process
//! ended by `SIGPIPE` (`main` checks [`closed`]).

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write found stdout closed.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
/// Set once a write found stderr closed.
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether stdout or stderr went away while this process wrote to it.
pub(crate) fn closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed) || STDERR_CLOSED.load(Ordering::Relaxed)
}

/// Writes one line to stdout, unless it is closed; a broken pipe is
/// recorded, never a panic.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    write_line(&STDOUT_CLOSED, &mut std::io::stdout().lock(), args);
}

/// Writes one line to stderr, as the writer of stdout above does.
pub(crate) fn err_line(args: std::fmt::Arguments<'_>) {
    write_line(&STDERR_CLOSED, &mut std::io::stderr().lock(), args);
}

fn write_line(closed: &AtomicBool, out: &mut dyn std::io::Write, args: std::fmt::Arguments<'_>) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    // Any error stops the output: a stream that failed once (closed pipe,
    // full disk under a redirect) is not written to again.
    if out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .is_err()
    {
        closed.store(true, Ordering::Relaxed);
    }
}

/// `println!` that survives a closed stdout (see the module docs).
macro_rules! say {
    () => { $crate::out::line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::line(format_args!($($arg)*)) };
}
pub(crate) use say;

/// `eprintln!` that survives a closed stderr (see the module docs).
macro_rules! tell {
    ($($arg:tt)*) => { $crate::out::err_line(format_args!($($arg)*)) };
}
pub(crate) use tell;

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader went away.
    struct Broken;

    impl std::io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_broken_pipe_is_recorded_and_nothing_more_is_written() {
        let closed = AtomicBool::new(false);
        write_line(&closed, &mut Broken, format_args!("first"));
        assert!(closed.load(Ordering::Relaxed));
        let mut after = Vec::new();
        write_line(&closed, &mut after, format_args!("second"));
        assert!(after.is_empty(), "a closed stream is not written to again");
        let open = AtomicBool::new(false);
        let mut fine = Vec::new();
        write_line(&open, &mut fine, format_args!("{} {}", "one", 1));
        assert_eq!(fine, b"one 1\n");
        assert!(!open.load(Ordering::Relaxed));
    }
}
