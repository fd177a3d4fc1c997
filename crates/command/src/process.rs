//! The agent's process: started in a session of its own, waited for,
//! stopped as a whole group on cancellation or timeout, and its exit
//! classified into an exit reason or a [`CommandError`].

use std::future::Future;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use korvus_runner::exit;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::cgroup::{Peaks, RunCgroup};
use crate::isolate::{self, Isolation};
use crate::network::Network;
use crate::output::{Output, BATCH};
use crate::sandbox::{Confinement, Sandbox};
use crate::sink::Sink;
use crate::spawn::ChildSetup;
use crate::watch::{Hit, Watch};
use crate::CommandError;

/// The exit code that means "waiting for the user" (`EX_TEMPFAIL` from
/// `sysexits.h`): the session's row stays `running` with exit reason
/// [`exit::AWAITING_USER`].
pub const AWAITING_USER_CODE: i32 = 75;

/// Why the runner stopped the program, when it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The run was cancelled (`ctx.cancel`).
    Cancelled,
    /// The runner's own timeout expired.
    TimedOut,
    /// The run went past one of its [`Limits`](crate::Limits).
    Limit(Hit),
    /// The run's budget is reached ([`CommandRunner::budgets`](crate::CommandRunner::budgets)).
    Budget,
}

/// When the runner stops the program on its own, and how gently.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    /// The runner's own ceiling on the run, if any.
    pub(crate) timeout: Option<Duration>,
    /// Time between `SIGTERM` and `SIGKILL`.
    pub(crate) kill_grace: Duration,
}

/// What the agent is isolated by: its filesystem sandbox (writes allowed
/// in `scratch`) and its network policy, whose refusals go to `notes`.
pub(crate) struct Isolate<'a> {
    pub(crate) sandbox: &'a Sandbox,
    pub(crate) network: &'a Network,
    pub(crate) scratch: &'a Path,
    pub(crate) notes: tokio::sync::mpsc::Sender<String>,
    /// The model gateway and the vault, served on the agent's network.
    pub(crate) served: crate::isolate::Served,
}

/// A started agent: its process, its process group, and the tasks that feed
/// its stdin and wait for it to exit.
#[derive(Debug)]
pub(crate) struct Agent {
    // Declared before `child`, so dropped before it: if the run's future is
    // dropped mid-run, every process of the run is killed (the cgroup's,
    // wherever they went, then the group's), not only the leader.
    cgroup: Option<Arc<RunCgroup>>,
    group: Group,
    child: Child,
    /// Resolves when the leader has exited but is not yet reaped.
    exited: JoinHandle<()>,
    stdin: JoinHandle<()>,
    program: String,
}

impl Agent {
    /// Starts `cmd` with piped stdio as the leader of a new session (after
    /// `setup`'s other steps, e.g. joining its cgroups), isolated as `how`
    /// says, and writes `input` to its stdin, then closes it. Also returns
    /// how the program was confined and put on the network, and the note a
    /// run whose agent is not contained gets.
    pub(crate) async fn spawn(
        mut cmd: Command,
        program: String,
        input: String,
        how: Isolate<'_>,
        mut setup: ChildSetup,
        cgroup: Option<Arc<RunCgroup>>,
    ) -> Result<(Self, Confinement, Isolation, Option<String>), CommandError> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // A session of its own (hence a process group whose id is its pid),
        // so the whole group can be stopped, the terminal's Ctrl-C reaches
        // the caller, not the agent, and the agent has no controlling
        // terminal to read from or inject into.
        setup.new_session = true;
        let started = isolate::start(
            cmd,
            setup,
            how.sandbox,
            how.network,
            how.scratch,
            &program,
            how.notes,
            how.served,
        )
        .await?;
        let containment = started.containment_note();
        let contained = started.contained;
        let (mut child, confinement, network) =
            (started.child, started.confinement, started.network);
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| CommandError::Wait {
                program: program.clone(),
                source: std::io::Error::other("the started program has no pid"),
            })?;
        let group = Group {
            pgid: Pid::from_raw(pid),
            armed: true,
            contained,
        };
        info!(pid, program = %program, "agent started");
        let stdin = feed(child.stdin.take(), input);
        let agent = Self {
            cgroup,
            group,
            child,
            exited: exited(pid),
            stdin,
            program,
        };
        Ok((agent, confinement, network, containment))
    }

    /// The run's cgroup, if it has one.
    pub(crate) fn cgroup(&self) -> Option<&RunCgroup> {
        self.cgroup.as_deref()
    }

    /// The id of the agent's process group (its leader's pid).
    pub(crate) fn pgid(&self) -> i32 {
        self.group.pgid.as_raw()
    }

    /// The program's stdout and stderr, for [`Output::start`].
    pub(crate) fn take_pipes(&mut self) -> (Option<ChildStdout>, Option<ChildStderr>) {
        (self.child.stdout.take(), self.child.stderr.take())
    }

    /// Hands the program's output to `sink` until the leader exits. When
    /// `stopped` resolves (cancelled, past its budget), the timeout of `limits` expires or the run
    /// stalls, the group gets `SIGTERM`, then `SIGKILL` after the grace;
    /// past its memory or scratch limit every process of the run is
    /// killed at once. Returns why the runner stopped the program, if it
    /// did.
    pub(crate) async fn pump(
        &mut self,
        output: &mut Output,
        sink: &mut Sink<'_>,
        stopped: impl Future<Output = Stop>,
        limits: Deadlines,
        watch: &mut Watch,
    ) -> Option<Stop> {
        tokio::pin!(stopped);
        let deadline = limits.timeout.map(|t| Instant::now() + t);
        let mut stop: Option<Stop> = None;
        let mut kill_at: Option<Instant> = None;
        let watching = watch.has_checks() || self.cgroup.is_some();
        let mut tick = tokio::time::interval(watch.tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                chunk = output.recv(BATCH), if output.is_open() => {
                    if let Some(chunk) = chunk {
                        watch.activity();
                        sink.take(chunk).await;
                    }
                }
                _ = tick.tick(), if watching && stop.is_none() => {
                    match watch.check(self.cgroup.as_deref()).await {
                        Some(hit @ (Hit::Memory | Hit::Disk)) => {
                            warn!(?hit, "agent past a limit; killing every process of the run");
                            stop = Some(Stop::Limit(hit));
                            self.kill_tree().await;
                        }
                        Some(Hit::Stall) => {
                            warn!("agent stalled; stopping its process group");
                            stop = Some(Stop::Limit(Hit::Stall));
                            kill_at = Some(self.terminate(limits.kill_grace));
                        }
                        None => {}
                    }
                }
                _ = &mut self.exited => return stop,
                why = &mut stopped, if stop.is_none() => {
                    info!(?why, "run cancelled or past its budget; stopping the agent's process group");
                    stop = Some(why);
                    kill_at = Some(self.terminate(limits.kill_grace));
                }
                () = sleep_until(deadline), if stop.is_none() && deadline.is_some() => {
                    warn!(timeout = ?limits.timeout, "agent timed out; stopping its process group");
                    stop = Some(Stop::TimedOut);
                    kill_at = Some(self.terminate(limits.kill_grace));
                }
                () = sleep_until(kill_at), if kill_at.is_some() => {
                    warn!("agent ignored SIGTERM; killing its process group");
                    self.group.signal(Signal::SIGKILL);
                    kill_at = None;
                }
            }
        }
    }

    /// Sends `SIGTERM` to the group; returns when `SIGKILL` is due.
    fn terminate(&self, grace: Duration) -> Instant {
        self.group.signal(Signal::SIGTERM);
        Instant::now() + grace
    }

    /// Kills every process of the run: its cgroup's (wherever they went),
    /// its group's and, without a cgroup, its session's.
    async fn kill_tree(&self) {
        self.group.signal(Signal::SIGKILL);
        let cgroup = self.cgroup.clone();
        let sid = self.group.pgid.as_raw();
        let armed = self.group.armed;
        let _ = tokio::task::spawn_blocking(move || match cgroup {
            Some(cgroup) => cgroup.kill_all(),
            // The leader is not yet reaped, so its session id is still
            // the run's.
            None if armed => kill_session(sid),
            None => {}
        })
        .await;
    }

    /// Kills what is left of the run — the leader is gone, and nothing it
    /// started may outlive it — then reaps the leader.
    pub(crate) async fn reap(&mut self) -> Result<ExitStatus, CommandError> {
        self.kill_tree().await;
        let status = self
            .child
            .wait()
            .await
            .map_err(|source| CommandError::Wait {
                program: self.program.clone(),
                source,
            });
        // Reaped: the group id may belong to another process from now on.
        self.group.armed = false;
        status
    }

    /// Kills what is left in the run's cgroup, reads its peaks and removes
    /// it.
    pub(crate) async fn finish_cgroup(&mut self) -> Option<Peaks> {
        let cgroup = self.cgroup.take()?;
        tokio::task::spawn_blocking(move || cgroup.finish())
            .await
            .ok()
    }

    /// Stops feeding stdin (a program may exit without reading it all) and
    /// returns the program's name.
    pub(crate) async fn release(self) -> String {
        self.stdin.abort();
        let _ = self.stdin.await;
        self.program
    }
}

/// Writes `input` to the program's stdin, then closes it.
fn feed(stdin: Option<ChildStdin>, input: String) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            // An agent that never reads its stdin is not an error.
            let _ = stdin.write_all(input.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
    })
}

/// Resolves when the leader has exited but is not yet reaped, so its pid —
/// the group id — cannot be reused while the group is killed.
///
/// A pidfd becomes readable when the process exits and does not reap it:
/// waiting on it costs no thread, so any number of long agents leave
/// tokio's blocking pool to harvests and fsyncs. Where pidfds are missing
/// (a kernel before 5.3, a runtime without its I/O driver) the wait falls
/// back to one blocking `waitid(WNOWAIT)` per run.
fn exited(pid: i32) -> JoinHandle<()> {
    match pidfd(pid) {
        Ok(fd) => tokio::spawn(async move {
            let _ = fd.readable().await;
        }),
        Err(e) => {
            debug!(error = %e, "no pidfd; waiting for the agent on a blocking thread");
            exited_blocking(pid)
        }
    }
}

/// A pidfd of `pid` registered with the runtime's I/O driver.
fn pidfd(pid: i32) -> std::io::Result<AsyncFd<OwnedFd>> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::other("not a process id"))?;
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK)?;
    // Deprecated because a caller could close a borrowed descriptor while it
    // is registered; here the `AsyncFd` owns the `OwnedFd` and closes it
    // only after deregistering, so that cannot happen. The replacement,
    // `register_with_interest`, is `unsafe`, which this workspace allows
    // only in `spawn.rs`.
    #[allow(deprecated)]
    AsyncFd::with_interest(fd, Interest::READABLE)
}

fn exited_blocking(pid: i32) -> JoinHandle<()> {
    tokio::task::spawn_blocking(move || loop {
        match waitid(
            Id::Pid(Pid::from_raw(pid)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
        ) {
            Err(Errno::EINTR) => continue,
            _ => return,
        }
    })
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The exit reason of a program that exited with `status`, or the error it
/// failed with. A program the runner stopped ends as the stop says,
/// whatever its status.
pub(crate) fn classify(
    stop: Option<Stop>,
    status: ExitStatus,
    timeout: Option<Duration>,
    program: String,
) -> Result<&'static str, CommandError> {
    match (stop, status.code(), status.signal()) {
        (Some(Stop::Cancelled), _, _) => Ok(exit::CANCELLED),
        (Some(Stop::Budget), _, _) => Ok(exit::BUDGET_REACHED),
        (Some(Stop::TimedOut), _, _) => Err(CommandError::TimedOut {
            after: timeout.unwrap_or_default(),
        }),
        (Some(Stop::Limit(Hit::Memory)), _, _) => Err(CommandError::MemoryExceeded),
        (Some(Stop::Limit(Hit::Disk)), _, _) => Err(CommandError::DiskQuotaExceeded),
        (Some(Stop::Limit(Hit::Stall)), _, _) => Err(CommandError::Stalled),
        (None, Some(0), _) => Ok(exit::COMPLETED),
        (None, Some(AWAITING_USER_CODE), _) => Ok(exit::AWAITING_USER),
        (None, Some(code), _) => Err(CommandError::Exited { code }),
        (None, None, Some(signal)) => Err(CommandError::Signaled { signal }),
        (None, None, None) => Err(CommandError::Wait {
            program,
            source: std::io::Error::other(format!("unexpected exit status {status}")),
        }),
    }
}

/// Kills every process of session `sid` still there (a run without a
/// cgroup: what left the group but not the session).
fn kill_session(sid: i32) {
    for _ in 0..3 {
        let members = crate::watch::session_members(sid);
        if members.is_empty() {
            return;
        }
        for pid in members {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The agent's process group. Dropped while armed, it kills the group.
#[derive(Debug)]
struct Group {
    pgid: Pid,
    armed: bool,
    /// The leader is a contained run's keeper: a signal other than
    /// `SIGKILL` goes to it alone, and it passes the signal on to every
    /// process of the run once (the group's members would otherwise get it
    /// twice).
    contained: bool,
}

impl Group {
    fn signal(&self, signal: Signal) {
        if !self.armed {
            return;
        }
        let sent = if self.contained && signal != Signal::SIGKILL {
            nix::sys::signal::kill(self.pgid, signal)
        } else {
            killpg(self.pgid, signal)
        };
        match sent {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                warn!(pgid = %self.pgid, error = %e, ?signal, "could not signal the agent's process group")
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}
