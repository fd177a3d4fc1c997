//! Agent dialects: how an agent's stdout lines become turn-log events.
//!
//! korvus's own protocol (`docs/command-runner.md`) is one dialect; the
//! JSON lines of `codex exec --json` and of Claude Code's
//! `-p --output-format stream-json --verbose` are two more. A [`Decoder`]
//! holds what one run's dialect needs to remember between lines: the next
//! turn number (turns are numbered by korvus, uniquely across a session's
//! iterations, whatever the agent numbers), the agent's thread id, the
//! running usage total, and the last failure it reported.
//!
//! Nothing is dropped: a line a dialect does not know becomes a note
//! holding the line.

mod beneath;
mod claude;
mod codex;
pub(crate) mod state;
pub(crate) mod thread;

use korvus_log::{EventKind, LogHandle, Role};

/// The language an agent speaks on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Dialect {
    /// korvus's own protocol: a line of the `korvus_log::Event` shape is
    /// that event, `{"type":"usage",…}` adds tokens, any other line is an
    /// assistant message.
    #[default]
    Korvus,
    /// `codex exec --json`: `thread.started`, `turn.started`,
    /// `item.started`/`item.completed`, `turn.completed` (usage is the
    /// thread's running total), `turn.failed`, `error`.
    Codex,
    /// Claude Code `-p --output-format stream-json --verbose`: `system`,
    /// `assistant`, `user` and `result` lines.
    ClaudeCode,
}

impl Dialect {
    /// The name used on the command line and in notes: `korvus`, `codex`,
    /// `claude-code`.
    pub fn name(&self) -> &'static str {
        match self {
            Dialect::Korvus => "korvus",
            Dialect::Codex => "codex",
            Dialect::ClaudeCode => "claude-code",
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Dialect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "korvus" => Ok(Dialect::Korvus),
            "codex" => Ok(Dialect::Codex),
            "claude-code" => Ok(Dialect::ClaudeCode),
            other => Err(format!(
                "unknown dialect {other:?}: expected korvus, codex or claude-code"
            )),
        }
    }
}

/// Token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Usage {
    pub(crate) input: u64,
    pub(crate) output: u64,
}

/// What a run's decoder starts from.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Start {
    /// The first turn number this run may use (one above the log's
    /// highest).
    pub(crate) first_turn: u64,
    /// The agent's running usage total when this run starts (for agents
    /// that report running totals of a resumed thread).
    pub(crate) previous_total: Usage,
}

/// What one line became.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub(crate) events: Vec<EventKind>,
    /// Tokens this line adds to the run's counters.
    pub(crate) usage: Usage,
}

impl Decoded {
    fn push(&mut self, kind: EventKind) {
        self.events.push(kind);
    }

    fn note(&mut self, text: impl Into<String>) {
        self.events.push(EventKind::Note { text: text.into() });
    }

    fn message(&mut self, role: Role, text: impl Into<String>) {
        self.events.push(EventKind::Message {
            role,
            text: text.into(),
        });
    }
}

/// The turn bookkeeping both agent dialects share.
#[derive(Debug)]
struct Turns {
    next: u64,
    open: Option<u64>,
}

impl Turns {
    fn new(first: u64) -> Self {
        Self {
            next: first.max(1),
            open: None,
        }
    }

    /// Opens a turn (closing none: agents open one at a time).
    fn start(&mut self, out: &mut Decoded) -> u64 {
        if let Some(turn) = self.open {
            return turn;
        }
        let turn = self.next;
        self.next = self.next.saturating_add(1);
        self.open = Some(turn);
        out.push(EventKind::TurnStart { turn });
        turn
    }

    /// The open turn, opening one for an event that came outside any.
    fn current(&mut self, out: &mut Decoded) -> u64 {
        match self.open {
            Some(turn) => turn,
            None => self.start(out),
        }
    }

    fn end(&mut self, out: &mut Decoded) {
        if let Some(turn) = self.open.take() {
            out.push(EventKind::TurnEnd {
                turn,
                interrupted: false,
            });
        }
    }
}

/// One run's decoder of an agent dialect.
#[derive(Debug)]
pub(crate) enum Decoder {
    /// Codex's JSON lines.
    Codex(codex::Codex),
    /// Claude Code's stream-json lines.
    Claude(claude::Claude),
}

impl Decoder {
    /// A decoder for `dialect`; `None` for korvus's own protocol, which
    /// the output sink reads itself.
    pub(crate) fn new(dialect: Dialect, start: Start) -> Option<Self> {
        match dialect {
            Dialect::Korvus => None,
            Dialect::Codex => Some(Decoder::Codex(codex::Codex::new(start))),
            Dialect::ClaudeCode => Some(Decoder::Claude(claude::Claude::new(start))),
        }
    }

    /// The decoder of one run of `dialect` (`None` for korvus's own
    /// protocol): turns above the log's highest, usage counted from a
    /// resumed thread's total.
    pub(crate) async fn for_run(
        dialect: Dialect,
        log: &LogHandle,
        resume: Option<&state::Resume>,
    ) -> Option<Self> {
        if dialect == Dialect::Korvus {
            return None;
        }
        let start = Start {
            first_turn: last_turn(log).await.saturating_add(1),
            previous_total: resume.map(|r| r.total).unwrap_or_default(),
        };
        Self::new(dialect, start)
    }

    /// What one stdout line (not empty, not truncated) becomes.
    pub(crate) fn line(&mut self, text: &str) -> Decoded {
        let mut out = Decoded::default();
        let value = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) if v.is_object() => v,
            _ => {
                out.note(format!("{}: {text}", self.dialect()));
                return out;
            }
        };
        match self {
            Decoder::Codex(c) => c.line(&value, text, &mut out),
            Decoder::Claude(c) => c.line(&value, text, &mut out),
        }
        out
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Decoder::Codex(_) => Dialect::Codex,
            Decoder::Claude(_) => Dialect::ClaudeCode,
        }
    }

    /// The last failure the agent reported (a failed turn, an error
    /// result), if any.
    pub(crate) fn failure(&self) -> Option<&str> {
        match self {
            Decoder::Codex(c) => c.failure.as_deref(),
            Decoder::Claude(c) => c.failure.as_deref(),
        }
    }

    /// The agent's own thread (Codex) or session (Claude Code) id.
    pub(crate) fn thread(&self) -> Option<&str> {
        match self {
            Decoder::Codex(c) => c.thread.as_deref(),
            Decoder::Claude(c) => c.session.as_deref(),
        }
    }

    /// The agent's running usage total after this run (what the next run
    /// of the same thread starts from).
    pub(crate) fn total(&self) -> Usage {
        match self {
            Decoder::Codex(c) => c.total,
            Decoder::Claude(c) => c.total,
        }
    }

    /// Raises the running total to `total`, the thread's own record of
    /// it (see [`state`]), and returns the growth: usage this run made
    /// that the agent did not report on stdout.
    pub(crate) fn raise_total(&mut self, total: Usage) -> Usage {
        let now = match self {
            Decoder::Codex(c) => &mut c.total,
            Decoder::Claude(c) => &mut c.total,
        };
        let grown = Usage {
            input: total.input.saturating_sub(now.input),
            output: total.output.saturating_sub(now.output),
        };
        now.input = now.input.max(total.input);
        now.output = now.output.max(total.output);
        grown
    }
}

/// The highest turn number in the session's log so far (0 for none): an
/// agent dialect's turns are numbered above it. Reads the log in pages.
pub(crate) async fn last_turn(log: &LogHandle) -> u64 {
    const PAGE: u64 = 4096;
    let mut last = 0;
    let mut offset = 0;
    loop {
        let events = match log.read(offset, Some(PAGE)).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "the log was not read to the end for turn numbers; they may repeat earlier ones"
                );
                return last;
            }
        };
        for event in &events {
            if let EventKind::TurnStart { turn } = event.kind {
                last = last.max(turn);
            }
        }
        if (events.len() as u64) < PAGE {
            return last;
        }
        offset += PAGE;
    }
}

/// The arguments of a run that resumes `thread`: Codex's `exec … resume
/// <thread> -` (the prompt, `-`, moves behind the subcommand), Claude
/// Code's `… --resume <thread>`.
pub(crate) fn resume_args(
    dialect: Dialect,
    args: &[std::ffi::OsString],
    thread: &str,
) -> Vec<std::ffi::OsString> {
    let mut out = args.to_vec();
    match dialect {
        Dialect::Codex => {
            let stdin = out.last().is_some_and(|a| a == "-");
            if stdin {
                out.pop();
            }
            out.extend(["resume".into(), thread.into()]);
            if stdin {
                out.push("-".into());
            }
        }
        Dialect::ClaudeCode => out.extend(["--resume".into(), thread.into()]),
        Dialect::Korvus => {}
    }
    out
}

/// A string field of a JSON object.
fn str_of<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(serde_json::Value::as_str)
}

/// A count field of a JSON object (0 when absent).
fn count_of(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every line of `lines` through one decoder of `dialect`: the events,
    /// the usage summed, and the decoder.
    pub(crate) fn decode(
        dialect: Dialect,
        start: Start,
        lines: &str,
    ) -> (Vec<EventKind>, Usage, Decoder) {
        let mut d = Decoder::new(dialect, start).unwrap();
        let mut events = Vec::new();
        let mut usage = Usage::default();
        for line in lines.lines() {
            let out = d.line(line);
            events.extend(out.events);
            usage.input += out.usage.input;
            usage.output += out.usage.output;
        }
        (events, usage, d)
    }

    #[test]
    fn names_round_trip() {
        for d in [Dialect::Korvus, Dialect::Codex, Dialect::ClaudeCode] {
            assert_eq!(d.name().parse::<Dialect>(), Ok(d));
        }
        assert!("gpt".parse::<Dialect>().unwrap_err().contains("codex"));
    }

    #[test]
    fn a_line_that_is_not_json_is_a_note() {
        let mut d = Decoder::new(Dialect::Codex, Start::default()).unwrap();
        let out = d.line("Reading prompt from stdin...");
        assert_eq!(
            out.events,
            vec![EventKind::Note {
                text: "codex: Reading prompt from stdin...".into()
            }]
        );
    }
}
