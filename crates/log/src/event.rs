//! What a turn log holds: a [`LogHeader`] and a sequence of [`Event`]s.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Identifies one log. The session layer uses the session id's UUID.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LogId(Uuid);

impl LogId {
    /// Wraps a UUID.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    /// The underlying UUID.
    pub const fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl From<Uuid> for LogId {
    fn from(uuid: Uuid) -> Self {
        Self(uuid)
    }
}

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogId({})", self.0)
    }
}

impl FromStr for LogId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

/// The first line of every log: who it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHeader {
    /// Format version; currently 1.
    pub log_version: u32,
    /// The log's id.
    pub id: LogId,
    /// When the log was created.
    pub created_at: DateTime<Utc>,
    /// Free labels, e.g. `incident_id`. Sorted, so serialisation is deterministic.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl LogHeader {
    /// A version-1 header created now, without labels.
    pub fn new(id: LogId) -> Self {
        Self {
            log_version: 1,
            id,
            created_at: Utc::now(),
            labels: BTreeMap::new(),
        }
    }

    /// Adds a label.
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
}

/// One entry of a turn log.
///
/// Serialised as one JSON object: `{"at":…,"type":"turn_start","turn":1}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When the event happened, if the writer knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// The epoch of the writer that appended it (see
    /// [`LogHandle::claim_epoch`](crate::LogHandle::claim_epoch)); set by
    /// the handle, `None` for a writer that claimed none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Who wrote it: korvus or the agent. `None` in a log written before
    /// korvus recorded it, and for a runner that does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<Author>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Who wrote an [`Event`].
///
/// An agent cannot write a `korvus` event: the command runner marks every
/// event it makes of the agent's output as the agent's, whatever the line
/// said (a note that reads like korvus's own, a `system` message), and only
/// korvus's own code writes [`Author::Korvus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Author {
    /// korvus itself: its notes, the prompt and messages it records, the
    /// closers of interrupted turns.
    Korvus,
    /// The agent: what the runner made of its output.
    Agent,
}

impl Author {
    /// `korvus` or `agent`, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Author::Korvus => "korvus",
            Author::Agent => "agent",
        }
    }
}

impl Event {
    /// An event stamped with the current time.
    pub fn now(kind: EventKind) -> Self {
        Self {
            at: Some(Utc::now()),
            epoch: None,
            by: None,
            kind,
        }
    }

    /// An event korvus itself writes, stamped with the current time.
    pub fn korvus(kind: EventKind) -> Self {
        Self::now(kind).by(Author::Korvus)
    }

    /// The event, marked as written by `author`.
    #[must_use]
    pub fn by(mut self, author: Author) -> Self {
        self.by = Some(author);
        self
    }

    /// An event without a timestamp.
    pub fn new(kind: EventKind) -> Self {
        Self {
            at: None,
            epoch: None,
            by: None,
            kind,
        }
    }
}

impl From<EventKind> for Event {
    fn from(kind: EventKind) -> Self {
        Self::new(kind)
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The human (or embedding service) speaking to the agent.
    User,
    /// The agent.
    Assistant,
    /// Instructions set by the system.
    System,
}

/// The turn structure of a session: turns open and close, and inside them the
/// agent writes messages and makes tool calls that get results.
///
/// The structure is what lets the session layer repair a log after a crash: a
/// `TurnStart` without `TurnEnd`, or a `ToolCall` without `ToolResult`, is an
/// interrupted turn that gets a closer on reopen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A turn began.
    TurnStart {
        /// Turn number, unique within the log.
        turn: u64,
    },
    /// A turn ended.
    TurnEnd {
        /// The turn that ended.
        turn: u64,
        /// `true` when the turn did not finish but was closed by repair.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    /// A message.
    Message {
        /// Who wrote it.
        role: Role,
        /// The text.
        text: String,
    },
    /// The agent called a tool.
    ToolCall {
        /// Unique within the log; the result names it.
        call_id: String,
        /// Tool name.
        tool: String,
        /// Arguments.
        #[serde(default)]
        input: serde_json::Value,
    },
    /// A tool call's result.
    ToolResult {
        /// The call it answers.
        call_id: String,
        /// Whether the call succeeded.
        ok: bool,
        /// Output or error detail.
        #[serde(default)]
        output: serde_json::Value,
    },
    /// Anything else worth keeping: progress, stderr, diagnostics.
    Note {
        /// The text.
        text: String,
    },
    /// Tokens the model used, as the agent reported them: one event per
    /// report. A run's token counters are the sum of its usage events —
    /// unless korvus measured the run's model calls itself
    /// ([`MeteredUsage`](EventKind::MeteredUsage)); see [`TokenTally`](crate::TokenTally).
    Usage {
        /// Input (prompt) tokens.
        #[serde(default)]
        input_tokens: u64,
        /// Output (completion) tokens.
        #[serde(default)]
        output_tokens: u64,
    },
    /// Tokens one model call used, as korvus's model gateway read them
    /// from the upstream's answer (always written by korvus, never taken
    /// from an agent's output). When a run has any, its token counters are
    /// the sum of these and the agent's own usage events are kept beside
    /// them for comparison.
    MeteredUsage {
        /// Input (prompt) tokens, cache reads and writes included.
        #[serde(default)]
        input_tokens: u64,
        /// Output (completion) tokens.
        #[serde(default)]
        output_tokens: u64,
        /// The model the answer named, when it named one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The call could not be metered whole (its answer was cut, or
        /// said no usage): the figures are what was read of it, a lower
        /// bound.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unmetered: bool,
    },
    /// An event of a type this release does not know, written by a newer
    /// one: read and skipped, never an error, so an older reader keeps
    /// working on a log a newer writer extended. Its fields are not kept;
    /// a writer never appends it.
    #[serde(other)]
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_wire_shape_is_flat() {
        let e = Event::new(EventKind::TurnStart { turn: 3 });
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"turn_start","turn":3}"#
        );
        let back: Event = serde_json::from_str(r#"{"type":"turn_end","turn":3}"#).unwrap();
        assert_eq!(
            back.kind,
            EventKind::TurnEnd {
                turn: 3,
                interrupted: false
            }
        );
    }

    #[test]
    fn usage_round_trips_and_an_unknown_type_is_read_as_unknown() {
        let e = Event::new(EventKind::Usage {
            input_tokens: 7,
            output_tokens: 3,
        });
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(
            text,
            r#"{"type":"usage","input_tokens":7,"output_tokens":3}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), e);
        // A type from a newer release, with fields this one does not know.
        let newer: Event = serde_json::from_str(
            r#"{"at":"2026-12-04T00:00:00Z","epoch":2,"type":"budget_reached","limit":{"usd":5}}"#,
        )
        .unwrap();
        assert_eq!(newer.kind, EventKind::Unknown);
        assert_eq!(newer.epoch, Some(2));
        assert!(newer.at.is_some());
    }
}
