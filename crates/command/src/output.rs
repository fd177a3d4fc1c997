//! The agent's output: the line readers of its stdout and stderr, and the
//! [`Sink`] that turns lines into log events, counters and the stderr tail.

use std::collections::VecDeque;
use std::time::Duration;

use korvus_log::{Event, EventKind, Role, DROPPED_PREFIX};

use crate::dialect::Decoder;
use korvus_runner::RunContext;
use korvus_store::Counters;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{ChildStderr, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

/// Longest stderr line kept (at most [`CommandRunner::max_line_bytes`](crate::CommandRunner::max_line_bytes)),
/// so the kept tail stays small: 64 lines of 4 KiB by default.
pub const STDERR_LINE_BYTES: usize = 4 * 1024;

/// Default of [`ExitDrain::idle`].
pub const DEFAULT_DRAIN_IDLE: Duration = Duration::from_secs(2);

/// Default of [`ExitDrain::max`].
pub const DEFAULT_DRAIN_MAX: Duration = Duration::from_secs(60);

/// Stdout lines appended to the log in one call at most ([`Output::recv`]'s
/// batch), live and at exit: a batch takes only lines already waiting, so a
/// quiet agent's lines are stored one by one, a busy one's many at once.
pub(crate) const BATCH: usize = 1024;

/// Bytes of stdout lines in one batch at most (a batch also ends at
/// [`BATCH`] lines).
const BATCH_BYTES: usize = 1024 * 1024;

/// How the output still in the pipes is read after the program exited.
///
/// Everything is read until both pipes reach end of file, so the agent's
/// own last words are always stored (up to the [`OutputCaps`]). Only a
/// process that left the agent's process group can hold a pipe open after
/// the group was killed; for that case two bounds apply, and when one ends
/// the drain, the log gets a note (beginning with
/// [`DROPPED_PREFIX`](korvus_log::DROPPED_PREFIX)) saying the output was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitDrain {
    /// The longest wait for more output: time spent storing what was read
    /// does not count (default [`DEFAULT_DRAIN_IDLE`]).
    pub idle: Duration,
    /// The longest whole drain, storing included (default
    /// [`DEFAULT_DRAIN_MAX`]).
    pub max: Duration,
}

impl Default for ExitDrain {
    fn default() -> Self {
        Self {
            idle: DEFAULT_DRAIN_IDLE,
            max: DEFAULT_DRAIN_MAX,
        }
    }
}

/// One line of output, cut at the line limit.
#[derive(Debug)]
pub(crate) struct Line {
    text: String,
    truncated: bool,
}

/// What one read of the pipes yields.
#[derive(Debug)]
pub(crate) enum Chunk {
    /// Consecutive stdout lines, at most the batch size asked for.
    Stdout(Vec<Line>),
    /// One stderr line.
    Stderr(Line),
}

/// The agent's stdout and stderr, each read by a task of its own into a
/// channel, so a slow log never blocks the program on a full pipe.
#[derive(Debug)]
pub(crate) struct Output {
    out_rx: mpsc::Receiver<Line>,
    err_rx: mpsc::Receiver<Line>,
    out_open: bool,
    err_open: bool,
    readers: [Option<JoinHandle<()>>; 2],
}

impl Output {
    /// Starts reading both pipes; stdout lines are cut at `max_line_bytes`,
    /// stderr lines also at [`STDERR_LINE_BYTES`].
    pub(crate) fn start(
        stdout: Option<ChildStdout>,
        stderr: Option<ChildStderr>,
        max_line_bytes: usize,
    ) -> Self {
        let (out_tx, out_rx) = mpsc::channel(256);
        let (err_tx, err_rx) = mpsc::channel(64);
        let readers = [
            stdout.map(|s| tokio::spawn(read_lines(s, max_line_bytes, out_tx))),
            stderr.map(|s| {
                let max = max_line_bytes.min(STDERR_LINE_BYTES);
                tokio::spawn(read_lines(s, max, err_tx))
            }),
        ];
        Self {
            out_rx,
            err_rx,
            out_open: true,
            err_open: true,
            readers,
        }
    }

    /// Whether either pipe may still yield a line.
    pub(crate) fn is_open(&self) -> bool {
        self.out_open || self.err_open
    }

    /// The next chunk of output, with up to `batch` stdout lines that are
    /// already waiting; `None` once both pipes are closed.
    ///
    /// Cancel safe: a line is only taken out of a channel when it is returned.
    pub(crate) async fn recv(&mut self, batch: usize) -> Option<Chunk> {
        loop {
            tokio::select! {
                line = self.out_rx.recv(), if self.out_open => match line {
                    Some(line) => {
                        let mut bytes = line.text.len();
                        let mut lines = vec![line];
                        while lines.len() < batch && bytes < BATCH_BYTES {
                            match self.out_rx.try_recv() {
                                Ok(l) => {
                                    bytes += l.text.len();
                                    lines.push(l);
                                }
                                Err(_) => break,
                            }
                        }
                        return Some(Chunk::Stdout(lines));
                    }
                    None => self.out_open = false,
                },
                line = self.err_rx.recv(), if self.err_open => match line {
                    Some(line) => return Some(Chunk::Stderr(line)),
                    None => self.err_open = false,
                },
                else => return None,
            }
        }
    }

    /// Hands what is left in the pipes to `sink` after the program exited,
    /// in batches like the live path, until both pipes reach end of file —
    /// or a bound of `limits` ends it, which the log then notes. Stops the
    /// readers.
    pub(crate) async fn drain(mut self, sink: &mut Sink<'_>, limits: ExitDrain) {
        let started = Instant::now();
        let deadline = started + limits.max;
        let mut cut = None;
        while self.is_open() {
            // The idle bound starts after each store: only waiting counts.
            let wake = (Instant::now() + limits.idle).min(deadline);
            tokio::select! {
                biased;
                chunk = self.recv(BATCH) => match chunk {
                    Some(chunk) => sink.take(chunk).await,
                    None => break,
                },
                () = tokio::time::sleep_until(wake) => {
                    cut = Some(if Instant::now() >= deadline {
                        format!("still printing {:?} after the agent exited", limits.max)
                    } else {
                        format!("silent but open for {:?}", limits.idle)
                    });
                    break;
                }
            }
        }
        for reader in self.readers.into_iter().flatten() {
            reader.abort();
            let _ = reader.await;
        }
        if let Some(why) = cut {
            warn!(%why, "agent output cut: a process outside the agent's group holds its pipes");
            sink.note(format!(
                "{DROPPED_PREFIX}output cut: the agent's stdout/stderr were {why} \
                 (a process that left its process group holds them); \
                 anything printed after this was not stored"
            ))
            .await;
        }
    }
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

/// Turns output into log events and counters, and keeps the stderr tail.
/// How much of an agent's output one run stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputCaps {
    /// Events stored from stdout at most.
    pub max_events: u64,
    /// Bytes of stdout lines stored at most.
    pub max_bytes: u64,
}

impl Default for OutputCaps {
    /// 100,000 events or 64 MiB per run, whichever comes first.
    fn default() -> Self {
        Self {
            max_events: 100_000,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

pub(crate) struct Sink<'a> {
    ctx: &'a RunContext,
    caps: OutputCaps,
    /// Events and bytes of agent output stored so far.
    stored: (u64, u64),
    /// Events and bytes of agent output dropped past a cap.
    dropped: (u64, u64),
    counters: Counters,
    stderr: VecDeque<String>,
    stderr_cap: usize,
    stderr_dropped: u64,
    append_failures: u64,
    /// The agent's dialect, when it is not korvus's own protocol.
    decoder: Option<Decoder>,
}

impl<'a> Sink<'a> {
    /// A sink for one run that keeps the last `stderr_cap` stderr lines
    /// and stores agent output up to `caps`; `decoder` reads an agent
    /// dialect (korvus's own protocol without one).
    pub(crate) fn new(
        ctx: &'a RunContext,
        stderr_cap: usize,
        caps: OutputCaps,
        decoder: Option<Decoder>,
    ) -> Self {
        Self {
            ctx,
            caps,
            stored: (0, 0),
            dropped: (0, 0),
            counters: Counters::default(),
            stderr: VecDeque::new(),
            stderr_cap,
            stderr_dropped: 0,
            append_failures: 0,
            decoder,
        }
    }

    /// The dialect's decoder, for what it learnt (thread, failure, usage).
    pub(crate) fn decoder(&self) -> Option<&Decoder> {
        self.decoder.as_ref()
    }

    /// The counters gathered from the output.
    pub(crate) fn into_counters(self) -> Counters {
        self.counters
    }

    /// Logs stdout lines as events, or keeps a stderr line in the tail.
    pub(crate) async fn take(&mut self, chunk: Chunk) {
        match chunk {
            Chunk::Stdout(lines) => self.stdout(lines).await,
            Chunk::Stderr(line) => self.stderr(line),
        }
    }

    async fn stdout(&mut self, lines: Vec<Line>) {
        let mut events = Vec::with_capacity(lines.len());
        let mut of_line = Vec::new();
        for line in lines {
            let bytes = line.text.len() as u64;
            // Counters still count past a cap; only storing stops.
            self.events_for(line, &mut of_line);
            if of_line.is_empty() {
                continue;
            }
            for event in &of_line {
                match &event.kind {
                    EventKind::TurnStart { .. } => {
                        self.counters.turns = self.counters.turns.saturating_add(1);
                    }
                    EventKind::ToolCall { .. } => {
                        self.counters.tool_calls = self.counters.tool_calls.saturating_add(1);
                    }
                    _ => {}
                }
            }
            let n = of_line.len() as u64;
            if self.stored.0 + n <= self.caps.max_events
                && self.stored.1 + bytes <= self.caps.max_bytes
            {
                self.stored = (self.stored.0 + n, self.stored.1 + bytes);
                events.append(&mut of_line);
            } else {
                self.dropped = (self.dropped.0 + n, self.dropped.1 + bytes);
                of_line.clear();
            }
        }
        self.append(&events).await;
    }

    /// The events one stdout line becomes (none for an empty line or a
    /// usage line, several for some dialect lines).
    fn events_for(&mut self, line: Line, out: &mut Vec<Event>) {
        if line.text.trim().is_empty() {
            return;
        }
        if line.truncated {
            let text = format!("{} [line truncated]", line.text);
            out.push(Event::now(match self.decoder {
                Some(_) => EventKind::Note { text },
                None => EventKind::Message {
                    role: Role::Assistant,
                    text,
                },
            }));
            return;
        }
        if let Some(decoder) = &mut self.decoder {
            let decoded = decoder.line(&line.text);
            // Figures the agent reports: never trusted not to overflow.
            let c = &mut self.counters;
            c.input_tokens = c.input_tokens.saturating_add(decoded.usage.input);
            c.output_tokens = c.output_tokens.saturating_add(decoded.usage.output);
            out.extend(decoded.events.into_iter().map(Event::now));
            return;
        }
        if line.text.trim_start().starts_with('{') {
            if let Ok(mut event) = serde_json::from_str::<Event>(&line.text) {
                if event.at.is_none() {
                    event = Event::now(event.kind);
                }
                out.push(event);
                return;
            }
            if let Ok(usage) = serde_json::from_str::<Usage>(&line.text) {
                if usage.kind == "usage" {
                    let c = &mut self.counters;
                    c.input_tokens = c.input_tokens.saturating_add(usage.input_tokens);
                    c.output_tokens = c.output_tokens.saturating_add(usage.output_tokens);
                    return;
                }
            }
        }
        out.push(Event::now(EventKind::Message {
            role: Role::Assistant,
            text: line.text,
        }));
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

    /// Appends one note to the log.
    pub(crate) async fn note(&mut self, text: String) {
        self.append(&[Event::now(EventKind::Note { text })]).await;
    }

    /// Appends the stderr tail and the exit summary as notes.
    pub(crate) async fn finish(&mut self, summary: String) {
        let mut notes = Vec::new();
        if self.dropped.0 > 0 {
            warn!(
                events = self.dropped.0,
                bytes = self.dropped.1,
                "agent output past the cap was not stored"
            );
            notes.push(format!(
                "{DROPPED_PREFIX}output cap reached: {} more event(s) ({} bytes) of agent output were not stored; \
                 the cap is {} events or {} bytes per run",
                self.dropped.0, self.dropped.1, self.caps.max_events, self.caps.max_bytes
            ));
        }
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
