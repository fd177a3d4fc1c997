//! The agent's output: the line readers of its stdout and stderr, and the
//! channels they feed, read in batches while the agent runs and drained
//! after it exits (into a [`Sink`]).

use std::time::Duration;

use korvus_log::DROPPED_PREFIX;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{ChildStderr, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

use crate::sink::{Chunk, Line, Sink};

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
/// own last words are always stored (up to the [`OutputCaps`](crate::OutputCaps)). Only a
/// process that left the agent's process group can hold a pipe open after
/// the group was killed; for that case two bounds apply, and when one ends
/// the drain, the log gets a note (beginning with
/// [`DROPPED_PREFIX`](korvus_log::DROPPED_PREFIX)) saying the output was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExitDrain {
    /// The longest wait for more output: time spent storing what was read
    /// does not count (default [`DEFAULT_DRAIN_IDLE`]).
    pub idle: Duration,
    /// The longest whole drain, storing included (default
    /// [`DEFAULT_DRAIN_MAX`]).
    pub max: Duration,
}

impl ExitDrain {
    /// Bounds of `idle` and `max` (see the fields).
    pub const fn new(idle: Duration, max: Duration) -> Self {
        Self { idle, max }
    }
}

impl Default for ExitDrain {
    fn default() -> Self {
        Self {
            idle: DEFAULT_DRAIN_IDLE,
            max: DEFAULT_DRAIN_MAX,
        }
    }
}

/// The agent's stdout and stderr, each read by a task of its own into a
/// channel, so a slow log never blocks the program on a full pipe.
#[derive(Debug)]
pub(crate) struct Output {
    out_rx: mpsc::Receiver<Line>,
    err_rx: mpsc::Receiver<Line>,
    out_open: bool,
    err_open: bool,
    notes: Option<mpsc::Receiver<String>>,
    readers: [Option<JoinHandle<()>>; 2],
}

impl Output {
    /// Starts reading both pipes; stdout lines are cut at `max_line_bytes`,
    /// stderr lines also at [`STDERR_LINE_BYTES`]. Notes sent to `notes`
    /// come between them, as they arrive.
    pub(crate) fn start(
        stdout: Option<ChildStdout>,
        stderr: Option<ChildStderr>,
        max_line_bytes: usize,
        notes: mpsc::Receiver<String>,
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
            notes: Some(notes),
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
                note = next_note(&mut self.notes), if self.notes.is_some() && self.is_open() => {
                    match note {
                        Some(note) => return Some(Chunk::Note(note)),
                        None => self.notes = None,
                    }
                }
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
        if let Some(mut notes) = self.notes.take() {
            while let Ok(note) = notes.try_recv() {
                sink.note(note).await;
            }
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

/// The next note, or `None` once every sender is gone.
async fn next_note(notes: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match notes {
        Some(rx) => rx.recv().await,
        None => None,
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
