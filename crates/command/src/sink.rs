//! The [`Sink`]: turns the agent's output lines into log events and
//! counters, keeps the stderr tail, and writes korvus's notes about the run.

use std::collections::VecDeque;

use korvus_log::{Author, Event, EventKind, Role, TokenTally, DROPPED_PREFIX};
use korvus_runner::RunContext;
use korvus_store::Counters;
use tracing::{debug, warn};

use crate::dialect::thread::Published;
use crate::dialect::Decoder;

/// One line of output, cut at the line limit.
#[derive(Debug)]
pub(crate) struct Line {
    pub(crate) text: String,
    pub(crate) truncated: bool,
}

/// What one read of the pipes yields.
#[derive(Debug)]
pub(crate) enum Chunk {
    /// Consecutive stdout lines, at most the batch size asked for.
    Stdout(Vec<Line>),
    /// One stderr line.
    Stderr(Line),
    /// A note of korvus's about the run (e.g. an egress refusal).
    Note(String),
}

/// How much of an agent's output one run stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

/// Turns output into log events and counters, and keeps the stderr tail.
pub(crate) struct Sink<'a> {
    ctx: &'a RunContext,
    caps: OutputCaps,
    /// Events and bytes of agent output stored so far.
    stored: (u64, u64),
    /// Events and bytes of agent output dropped past a cap.
    dropped: (u64, u64),
    counters: Counters,
    /// Tokens the agent reported, and those korvus measured.
    tokens: TokenTally,
    stderr: VecDeque<String>,
    stderr_cap: usize,
    stderr_dropped: u64,
    append_failures: u64,
    /// The agent's dialect, when it is not korvus's own protocol.
    decoder: Option<Decoder>,
    /// Where what the decoder learns goes for the run's checkpoints.
    published: Option<Published>,
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
            tokens: TokenTally::default(),
            stderr: VecDeque::new(),
            stderr_cap,
            stderr_dropped: 0,
            append_failures: 0,
            decoder,
            published: None,
        }
    }

    /// From now on, what the decoder learns (its thread, its running
    /// total) is also put in `published`, for the run's checkpoints.
    pub(crate) fn publish_to(&mut self, published: Published) {
        self.published = Some(published);
    }

    /// The dialect's decoder, for what it learnt (thread, failure, usage).
    pub(crate) fn decoder(&self) -> Option<&Decoder> {
        self.decoder.as_ref()
    }

    /// The counters gathered from the output; the tokens korvus measured
    /// when it measured any ([`TokenTally::tokens`]).
    pub(crate) fn into_counters(self) -> Counters {
        let mut counters = self.counters;
        (counters.input_tokens, counters.output_tokens) = self.tokens.tokens();
        counters
    }

    /// Takes what the model gateway measured (its events are in the log
    /// already): notes its summary, and a disagreement with what the agent
    /// reported beyond rounding — more than one token or 1 %, either way.
    pub(crate) async fn gateway(&mut self, t: crate::gateway::serve::Totals) {
        self.note(format!(
            "model gateway: {} call(s) metered ({} input / {} output tokens), {} not metered, {} \
             refused for a wrong token, {} could not reach the upstream, {} refused past the \
             budget",
            t.calls, t.input, t.output, t.unmetered, t.refused, t.failed, t.over_budget
        ))
        .await;
        let (calls, input, output) = (t.calls, t.input, t.output);
        if calls + t.unmetered == 0 {
            return;
        }
        self.tokens.measured = (input, output);
        self.tokens.measured_calls = calls;
        self.tokens.unmetered_calls = t.unmetered;
        let (r_in, r_out) = self.tokens.reported;
        let differs =
            |reported: u64, measured: u64| reported.abs_diff(measured) > 1.max(measured / 100);
        if differs(r_in, input) || differs(r_out, output) {
            self.note(format!(
                "usage: the agent reported {r_in} input / {r_out} output tokens; korvus measured \
                 {input} input / {output} output tokens in {calls} model call(s) and counts those"
            ))
            .await;
        }
    }

    /// Logs stdout lines as events, or keeps a stderr line in the tail.
    pub(crate) async fn take(&mut self, chunk: Chunk) {
        match chunk {
            Chunk::Stdout(lines) => self.stdout(lines).await,
            Chunk::Stderr(line) => self.stderr(line),
            Chunk::Note(text) => self.note(text).await,
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
            // The agent's, whatever the line claimed: it cannot write
            // korvus's events.
            for event in &mut of_line {
                event.by = Some(Author::Agent);
            }
            for event in &of_line {
                match &event.kind {
                    EventKind::TurnStart { .. } => {
                        self.counters.turns = self.counters.turns.saturating_add(1);
                    }
                    EventKind::ToolCall { .. } => {
                        self.counters.tool_calls = self.counters.tool_calls.saturating_add(1);
                    }
                    // Figures the agent reports: never trusted not to
                    // overflow. The event is logged, so the log's usage
                    // events sum to the counters.
                    // Only the agent's own reports: an agent cannot
                    // write korvus's measured events (its lines are
                    // decoded as agent usage or as text).
                    EventKind::Usage { .. } => self.tokens.add(event),
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

    /// The events one stdout line becomes (none for an empty line, several
    /// for some dialect lines; a usage line is a usage event).
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
            if let Some(published) = &self.published {
                published.update(decoder);
            }
            // The usage a dialect line reported (codex `turn.completed`,
            // Claude Code `result`) becomes a usage event of its own,
            // before the line's other events (a `turn_end` among them), so
            // it falls inside the turn it was used in.
            if decoded.usage.input > 0 || decoded.usage.output > 0 {
                out.push(Event::now(EventKind::Usage {
                    input_tokens: decoded.usage.input,
                    output_tokens: decoded.usage.output,
                }));
            }
            out.extend(decoded.events.into_iter().map(Event::now));
            return;
        }
        if line.text.trim_start().starts_with('{') {
            match serde_json::from_str::<Event>(&line.text) {
                // A type korvus does not know is the agent's own text, and
                // so is a measured-usage event: only korvus measures.
                Ok(event)
                    if matches!(
                        event.kind,
                        EventKind::Unknown | EventKind::MeteredUsage { .. }
                    ) => {}
                Ok(mut event) => {
                    if event.at.is_none() {
                        event = Event::now(event.kind);
                    }
                    out.push(event);
                    return;
                }
                Err(_) => {}
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

    /// Raises the decoder's running total to `total`, what the agent's
    /// thread records, and logs the growth — usage the agent made but
    /// never reported on stdout — as a usage event of its own, counted
    /// like any other, so the log's usage events still sum to the
    /// counters.
    pub(crate) async fn thread_total(&mut self, total: crate::dialect::Usage) {
        let Some(decoder) = &mut self.decoder else {
            return;
        };
        let grown = decoder.raise_total(total);
        if grown.input == 0 && grown.output == 0 {
            return;
        }
        let usage = Event::korvus(EventKind::Usage {
            input_tokens: grown.input,
            output_tokens: grown.output,
        });
        self.tokens.add(&usage);
        self.append(&[usage]).await;
    }

    /// Appends one note to the log.
    pub(crate) async fn note(&mut self, text: String) {
        self.append(&[Event::korvus(EventKind::Note { text })])
            .await;
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
        let stderr: Vec<Event> = self
            .stderr
            .drain(..)
            .map(|l| {
                Event::now(EventKind::Note {
                    text: format!("stderr: {l}"),
                })
                .by(Author::Agent)
            })
            .collect();
        let korvus = |text| Event::korvus(EventKind::Note { text });
        let mut events: Vec<Event> = notes.into_iter().map(korvus).collect();
        // The agent's own lines on stderr are the agent's.
        events.extend(stderr);
        events.push(korvus(summary));
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
