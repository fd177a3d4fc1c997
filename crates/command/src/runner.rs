//! [`CommandRunner`]: runs a configured program as a session's agent.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use korvus_log::{Event, EventKind, LogHandle, Role};
use korvus_runner::{exit, ExitReason, RunContext, RunError, RunOutcome, Runner};
use korvus_store::Counters;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::manifest::Manifest;
use crate::CommandError;

/// The exit code that means "waiting for the user" (`EX_TEMPFAIL` from
/// `sysexits.h`): the session's row stays `running` with exit reason
/// [`exit::AWAITING_USER`].
pub const AWAITING_USER_CODE: i32 = 75;

/// Default number of stderr lines kept (the last ones) and logged as notes.
pub const DEFAULT_STDERR_LINES: usize = 64;

/// Default longest stdout or stderr line kept; the rest of a longer line is
/// dropped and the event says so.
pub const DEFAULT_MAX_LINE_BYTES: usize = 256 * 1024;

/// Longest stderr line kept (at most [`CommandRunner::max_line_bytes`]), so
/// the kept tail stays small: 64 lines of 4 KiB by default.
pub const STDERR_LINE_BYTES: usize = 4 * 1024;

/// Default time between `SIGTERM` and `SIGKILL` when the runner stops a
/// process group.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

/// How long output left in the pipes is still read after the program exited.
const DRAIN: Duration = Duration::from_secs(2);

/// Events appended to the log in one call at most.
const BATCH: usize = 64;

/// A [`Runner`] that runs any command-line agent in the session's scratch
/// dir. The protocol (stdin, environment, stdout lines, exit codes) is in
/// `docs/command-runner.md` and in the [crate docs](crate).
///
/// Built with [`CommandRunner::new`] and the `with`-style methods below;
/// cheap to clone.
#[derive(Debug, Clone)]
pub struct CommandRunner {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    timeout: Option<Duration>,
    kill_grace: Duration,
    stderr_lines: usize,
    max_line_bytes: usize,
}

impl CommandRunner {
    /// Runs `program` (looked up in `PATH` when it has no `/`; a relative
    /// path with a `/` is resolved against the **scratch dir**, so pass an
    /// absolute path).
    pub fn new(program: impl Into<OsString>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            stderr_lines: DEFAULT_STDERR_LINES,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the program (on top of the
    /// inherited environment; the `KORVUS_*` session variables win).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The runner's own ceiling on one run: when it expires, the process
    /// group is stopped and the run fails with [`CommandError::TimedOut`].
    /// Without it (the default) only the manager's run timeout applies,
    /// which ends the session `failed` / `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Time between `SIGTERM` and `SIGKILL` when the group is stopped
    /// (default [`DEFAULT_KILL_GRACE`]). Keep it below the manager's
    /// cancel grace, so the run still returns its outcome.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// How many of the last stderr lines are kept as notes (default
    /// [`DEFAULT_STDERR_LINES`]).
    pub fn stderr_lines(mut self, lines: usize) -> Self {
        self.stderr_lines = lines;
        self
    }

    /// The longest line kept from stdout or stderr (default
    /// [`DEFAULT_MAX_LINE_BYTES`]).
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes.max(1);
        self
    }

    /// The program this runner starts.
    pub fn program(&self) -> &OsString {
        &self.program
    }

    async fn execute(
        &self,
        ctx: RunContext,
        message: Option<String>,
    ) -> Result<RunOutcome, CommandError> {
        let scratch = ctx.scratch.clone().ok_or(CommandError::NoScratchDir)?;
        if ctx.cancel.is_cancelled() {
            // Cancelled before it started: nothing to stop, nothing written.
            return Ok(RunOutcome {
                exit_reason: ExitReason::CANCELLED,
                author_finished: report_exists(&scratch).await,
                counters: Counters::default(),
            });
        }
        let manifest = Manifest::for_run(&ctx, message.as_deref())
            .write(&scratch)
            .await?;
        let program = self.program.to_string_lossy().into_owned();
        let input = message
            .clone()
            .unwrap_or_else(|| ctx.session.prompt.clone());

        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .current_dir(&scratch)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("KORVUS_SESSION_ID", ctx.session.id.to_string())
            .env("KORVUS_INCIDENT_ID", ctx.incident.id.to_string())
            .env("KORVUS_REVISION", ctx.revision.to_string())
            .env("KORVUS_RESUME", if message.is_some() { "1" } else { "0" })
            .env("KORVUS_MANIFEST", &manifest)
            .env("KORVUS_WORKSPACE", &scratch)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so the whole tree can be stopped, and
            // the terminal's Ctrl-C reaches the caller, not the agent.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| CommandError::Spawn {
            program: program.clone(),
            source,
        })?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| CommandError::Wait {
                program: program.clone(),
                source: std::io::Error::other("the started program has no pid"),
            })?;
        // Declared after `child`, so dropped before it: if this future is
        // dropped mid-run, the whole group is killed, not only the leader.
        let mut group = Group {
            pgid: Pid::from_raw(pid),
            armed: true,
        };
        info!(pid, program = %program, "agent started");

        let stdin = child.stdin.take();
        let stdin_task = tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // An agent that never reads its stdin is not an error.
                let _ = stdin.write_all(input.as_bytes()).await;
                let _ = stdin.shutdown().await;
            }
        });
        let (out_tx, mut out_rx) = mpsc::channel(256);
        let (err_tx, mut err_rx) = mpsc::channel(64);
        let readers = [
            child
                .stdout
                .take()
                .map(|s| tokio::spawn(read_lines(s, self.max_line_bytes, out_tx))),
            child.stderr.take().map(|s| {
                let max = self.max_line_bytes.min(STDERR_LINE_BYTES);
                tokio::spawn(read_lines(s, max, err_tx))
            }),
        ];
        // Resolves when the leader has exited but is not yet reaped, so its
        // pid — the group id — cannot be reused while the group is killed.
        let mut exited = tokio::task::spawn_blocking(move || loop {
            match waitid(
                Id::Pid(Pid::from_raw(pid)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Err(Errno::EINTR) => continue,
                _ => return,
            }
        });

        let mut sink = Sink::new(&ctx, self.stderr_lines);
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut stop: Option<Stop> = None;
        let mut kill_at: Option<Instant> = None;
        let (mut out_open, mut err_open) = (true, true);
        loop {
            tokio::select! {
                line = out_rx.recv(), if out_open => match line {
                    Some(line) => {
                        let mut batch = vec![line];
                        while batch.len() < BATCH {
                            match out_rx.try_recv() {
                                Ok(l) => batch.push(l),
                                Err(_) => break,
                            }
                        }
                        sink.stdout(batch).await;
                    }
                    None => out_open = false,
                },
                line = err_rx.recv(), if err_open => match line {
                    Some(line) => sink.stderr(line),
                    None => err_open = false,
                },
                _ = &mut exited => break,
                _ = ctx.cancel.cancelled(), if stop.is_none() => {
                    info!("run cancelled; stopping the agent's process group");
                    stop = Some(Stop::Cancelled);
                    group.signal(Signal::SIGTERM);
                    kill_at = Some(Instant::now() + self.kill_grace);
                }
                _ = sleep_until(deadline), if stop.is_none() && deadline.is_some() => {
                    warn!(timeout = ?self.timeout, "agent timed out; stopping its process group");
                    stop = Some(Stop::TimedOut);
                    group.signal(Signal::SIGTERM);
                    kill_at = Some(Instant::now() + self.kill_grace);
                }
                _ = sleep_until(kill_at), if kill_at.is_some() => {
                    warn!("agent ignored SIGTERM; killing its process group");
                    group.signal(Signal::SIGKILL);
                    kill_at = None;
                }
            }
        }
        // The leader is gone: nothing of its group may outlive it.
        group.signal(Signal::SIGKILL);
        let status = child.wait().await.map_err(|source| CommandError::Wait {
            program: program.clone(),
            source,
        });
        group.armed = false;

        // What is left in the pipes (a process that escaped the group could
        // hold them open: read for a bounded time only).
        let drain_until = Instant::now() + DRAIN;
        while out_open || err_open {
            tokio::select! {
                line = out_rx.recv(), if out_open => match line {
                    Some(line) => sink.stdout(vec![line]).await,
                    None => out_open = false,
                },
                line = err_rx.recv(), if err_open => match line {
                    Some(line) => sink.stderr(line),
                    None => err_open = false,
                },
                _ = tokio::time::sleep_until(drain_until) => {
                    warn!("agent output still open after it exited; no longer read");
                    break;
                }
            }
        }
        for reader in readers.into_iter().flatten() {
            reader.abort();
            let _ = reader.await;
        }
        stdin_task.abort();
        let _ = stdin_task.await;

        let status = status?;
        let author_finished = report_exists(&scratch).await;
        let result = match (stop, status.code(), status.signal()) {
            (Some(Stop::Cancelled), _, _) => Ok(exit::CANCELLED),
            (Some(Stop::TimedOut), _, _) => Err(CommandError::TimedOut {
                after: self.timeout.unwrap_or_default(),
            }),
            (None, Some(0), _) => Ok(exit::COMPLETED),
            (None, Some(AWAITING_USER_CODE), _) => Ok(exit::AWAITING_USER),
            (None, Some(code), _) => Err(CommandError::Exited { code }),
            (None, None, Some(signal)) => Err(CommandError::Signaled { signal }),
            (None, None, None) => Err(CommandError::Wait {
                program,
                source: std::io::Error::other(format!("unexpected exit status {status}")),
            }),
        };
        let summary = match &result {
            Ok(reason) => format!("agent exited ({status}); exit reason {reason}"),
            Err(e) => format!("{e} ({status}); exit reason {}", e.reason()),
        };
        info!(%summary, author_finished, "agent finished");
        sink.finish(summary).await;
        result.map(|reason| RunOutcome {
            exit_reason: reason.into(),
            author_finished,
            counters: sink.counters,
        })
    }
}

#[async_trait]
impl Runner for CommandRunner {
    /// Runs the program with the session's prompt on stdin.
    ///
    /// # Errors
    /// A [`RunError`] whose source is a [`CommandError`]: no scratch dir,
    /// manifest not written, program not started, a failing exit code, a
    /// signal, or the runner's own timeout.
    ///
    /// # Cancel safety
    /// Dropping the future kills the program's whole process group.
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
        let log = Arc::clone(&ctx.log);
        let result = self.execute(ctx, None).await;
        failed(&log, result).await
    }

    /// Runs the program again in the reopened session's fresh scratch dir,
    /// with the new message on stdin and `KORVUS_RESUME=1`.
    ///
    /// # Errors
    /// As [`CommandRunner::run`](Runner::run).
    ///
    /// # Cancel safety
    /// Dropping the future kills the program's whole process group.
    async fn resume(&self, ctx: RunContext, message: String) -> Result<RunOutcome, RunError> {
        let log = Arc::clone(&ctx.log);
        let result = self.execute(ctx, Some(message)).await;
        failed(&log, result).await
    }
}

/// Turns a [`CommandError`] into the [`RunError`] the manager expects. An
/// error raised before the program's output was closed with a note (no
/// scratch dir, manifest, start, wait) gets its note here, so the log
/// always says why a run failed.
async fn failed(
    log: &LogHandle,
    result: Result<RunOutcome, CommandError>,
) -> Result<RunOutcome, RunError> {
    let e = match result {
        Ok(outcome) => return Ok(outcome),
        Err(e) => e,
    };
    let noted = matches!(
        e,
        CommandError::Exited { .. } | CommandError::Signaled { .. } | CommandError::TimedOut { .. }
    );
    let message = format!("{} (exit reason {})", error_chain(&e), e.reason());
    if !noted {
        let note = Event::now(EventKind::Note {
            text: message.clone(),
        });
        if let Err(log_error) = log.append(&[note]).await {
            warn!(error = %log_error, "failure note not logged");
        }
    }
    let reason = e.reason();
    Err(RunError::msg(message)
        .with_exit_reason(reason)
        .with_source(e))
}

/// An error and its sources, joined with `: `.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Cancelled,
    TimedOut,
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn report_exists(scratch: &Path) -> bool {
    tokio::fs::symlink_metadata(scratch.join("report.md"))
        .await
        .is_ok_and(|m| m.is_file())
}

/// The agent's process group. Dropped while armed, it kills the group.
#[derive(Debug)]
struct Group {
    pgid: Pid,
    armed: bool,
}

impl Group {
    fn signal(&self, signal: Signal) {
        if !self.armed {
            return;
        }
        match killpg(self.pgid, signal) {
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

/// One line of output, cut at the line limit.
#[derive(Debug)]
struct Line {
    text: String,
    truncated: bool,
}

/// Reads `\n`-separated lines, never holding more than `max` bytes of one.
async fn read_lines<R: AsyncRead + Unpin>(reader: R, max: usize, tx: mpsc::Sender<Line>) {
    let mut reader = BufReader::new(reader);
    let mut line: Vec<u8> = Vec::new();
    let mut truncated = false;
    loop {
        let (consumed, complete) = match reader.fill_buf().await {
            Ok([]) | Err(_) => {
                if !line.is_empty() {
                    let _ = tx.send(to_line(&line, truncated)).await;
                }
                return;
            }
            Ok(buf) => {
                let (chunk, consumed, complete) = match buf.iter().position(|&b| b == b'\n') {
                    Some(i) => (&buf[..i], i + 1, true),
                    None => (buf, buf.len(), false),
                };
                let room = max.saturating_sub(line.len());
                if chunk.len() > room {
                    truncated = true;
                }
                line.extend_from_slice(&chunk[..chunk.len().min(room)]);
                (consumed, complete)
            }
        };
        reader.consume(consumed);
        if complete {
            if tx.send(to_line(&line, truncated)).await.is_err() {
                return;
            }
            line.clear();
            truncated = false;
        }
    }
}

fn to_line(bytes: &[u8], truncated: bool) -> Line {
    let text = String::from_utf8_lossy(bytes);
    Line {
        text: text.strip_suffix('\r').unwrap_or(&text).to_owned(),
        truncated,
    }
}

/// A usage line: `{"type":"usage","input_tokens":…,"output_tokens":…}`.
#[derive(Debug, Deserialize)]
struct Usage {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

/// Turns output into log events and counters.
struct Sink<'a> {
    ctx: &'a RunContext,
    counters: Counters,
    stderr: VecDeque<String>,
    stderr_cap: usize,
    stderr_dropped: u64,
    append_failures: u64,
}

impl<'a> Sink<'a> {
    fn new(ctx: &'a RunContext, stderr_cap: usize) -> Self {
        Self {
            ctx,
            counters: Counters::default(),
            stderr: VecDeque::new(),
            stderr_cap,
            stderr_dropped: 0,
            append_failures: 0,
        }
    }

    async fn stdout(&mut self, lines: Vec<Line>) {
        let mut events = Vec::with_capacity(lines.len());
        for line in lines {
            if let Some(event) = self.event_for(line) {
                events.push(event);
            }
        }
        self.append(&events).await;
    }

    fn event_for(&mut self, line: Line) -> Option<Event> {
        if line.text.trim().is_empty() {
            return None;
        }
        if line.truncated {
            return Some(Event::now(EventKind::Message {
                role: Role::Assistant,
                text: format!("{} [line truncated]", line.text),
            }));
        }
        if line.text.trim_start().starts_with('{') {
            if let Ok(mut event) = serde_json::from_str::<Event>(&line.text) {
                match &event.kind {
                    EventKind::TurnStart { .. } => self.counters.turns += 1,
                    EventKind::ToolCall { .. } => self.counters.tool_calls += 1,
                    _ => {}
                }
                if event.at.is_none() {
                    event = Event::now(event.kind);
                }
                return Some(event);
            }
            if let Ok(usage) = serde_json::from_str::<Usage>(&line.text) {
                if usage.kind == "usage" {
                    self.counters.input_tokens += usage.input_tokens;
                    self.counters.output_tokens += usage.output_tokens;
                    return None;
                }
            }
        }
        Some(Event::now(EventKind::Message {
            role: Role::Assistant,
            text: line.text,
        }))
    }

    fn stderr(&mut self, line: Line) {
        debug!(line = %line.text, "agent stderr");
        if self.stderr_cap == 0 {
            self.stderr_dropped += 1;
            return;
        }
        if self.stderr.len() == self.stderr_cap {
            self.stderr.pop_front();
            self.stderr_dropped += 1;
        }
        let suffix = if line.truncated {
            " [line truncated]"
        } else {
            ""
        };
        self.stderr.push_back(format!("{}{suffix}", line.text));
    }

    /// Appends the stderr tail and the exit summary as notes.
    async fn finish(&mut self, summary: String) {
        let mut notes = Vec::new();
        if self.stderr_dropped > 0 {
            notes.push(format!(
                "stderr: {} earlier line(s) not kept",
                self.stderr_dropped
            ));
        }
        notes.extend(self.stderr.drain(..).map(|l| format!("stderr: {l}")));
        notes.push(summary);
        let events: Vec<Event> = notes
            .into_iter()
            .map(|text| Event::now(EventKind::Note { text }))
            .collect();
        self.append(&events).await;
        if self.append_failures > 0 {
            warn!(
                failures = self.append_failures,
                "some agent events could not be logged"
            );
        }
    }

    async fn append(&mut self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        // A failing log must not stop the agent (its pipes must keep
        // draining) nor fail a run whose report may be fine: warn once, count.
        if let Err(e) = self.ctx.log.append(events).await {
            if self.append_failures == 0 {
                warn!(error = %e, "agent events not logged");
            }
            self.append_failures += events.len() as u64;
        }
    }
}
