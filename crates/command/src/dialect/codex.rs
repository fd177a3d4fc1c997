//! `codex exec --json`: one JSON object per line.
//!
//! | line | events |
//! |---|---|
//! | `thread.started` | a note naming the thread (kept for resume) |
//! | `turn.started` | `turn_start` (korvus's number) |
//! | `item.started` of a command, file change, MCP call or web search | `tool_call` |
//! | `item.completed` of the same | `tool_result` (after a `tool_call` when none was started) |
//! | `item.completed` `agent_message` | assistant `message` |
//! | `item.completed` `reasoning` | note `reasoning: …` |
//! | `item.completed` `todo_list`, `item.updated` `todo_list` | note `plan: …` |
//! | `item.completed` `error` | note `codex: …` |
//! | `turn.completed` | usage (the delta of the thread's running total), `turn_end` |
//! | `turn.failed` | note `turn failed: …`, `turn_end`; the run's failure |
//! | `error` | note `codex error: …` |
//! | anything else | a note holding the line |
//!
//! After the run, usage the thread file records beyond the last
//! `turn.completed` (a turn the run was stopped in) is one more usage
//! event (`state.rs`).

use std::collections::HashSet;

use korvus_log::{EventKind, Role};
use serde_json::{json, Value};

use super::{count_of, str_of, Decoded, Start, Turns, Usage};

/// One run's Codex decoder.
#[derive(Debug)]
pub(crate) struct Codex {
    turns: Turns,
    /// Items whose `tool_call` was logged (by Codex's item id).
    started: HashSet<String>,
    pub(crate) thread: Option<String>,
    pub(crate) total: Usage,
    pub(crate) failure: Option<String>,
}

impl Codex {
    pub(crate) fn new(start: Start) -> Self {
        Self {
            turns: Turns::new(start.first_turn),
            started: HashSet::new(),
            thread: None,
            total: start.previous_total,
            failure: None,
        }
    }

    pub(crate) fn line(&mut self, v: &Value, raw: &str, out: &mut Decoded) {
        match str_of(v, "type").unwrap_or_default() {
            "thread.started" => {
                let id = str_of(v, "thread_id").unwrap_or_default().to_owned();
                out.note(format!("codex thread {id}"));
                self.thread = Some(id);
            }
            "turn.started" => {
                self.turns.start(out);
            }
            "turn.completed" => {
                if let Some(usage) = v.get("usage") {
                    let now = Usage {
                        input: count_of(usage, "input_tokens"),
                        output: count_of(usage, "output_tokens"),
                    };
                    // A running total: this turn's share is the growth.
                    out.usage = Usage {
                        input: now.input.saturating_sub(self.total.input),
                        output: now.output.saturating_sub(self.total.output),
                    };
                    self.total = now;
                }
                self.turns.end(out);
            }
            "turn.failed" => {
                let message = v
                    .get("error")
                    .and_then(|e| str_of(e, "message"))
                    .unwrap_or("no message")
                    .to_owned();
                out.note(format!("turn failed: {message}"));
                self.failure = Some(message);
                self.turns.end(out);
            }
            "error" => {
                let message = str_of(v, "message").unwrap_or("no message");
                out.note(format!("codex error: {message}"));
            }
            "item.started" => match v.get("item") {
                Some(item) => self.item_started(item, raw, out),
                None => out.note(format!("codex: {raw}")),
            },
            "item.completed" => match v.get("item") {
                Some(item) => self.item_completed(item, raw, out),
                None => out.note(format!("codex: {raw}")),
            },
            "item.updated" => match v.get("item") {
                Some(item) if str_of(item, "type") == Some("todo_list") => plan(item, out),
                // Progress of an item whose completion is logged.
                Some(_) => {}
                None => out.note(format!("codex: {raw}")),
            },
            _ => out.note(format!("codex: {raw}")),
        }
    }

    fn item_started(&mut self, item: &Value, raw: &str, out: &mut Decoded) {
        match call_of(item) {
            Some((tool, input)) => {
                let turn = self.turns.current(out);
                let id = str_of(item, "id").unwrap_or_default().to_owned();
                out.push(EventKind::ToolCall {
                    call_id: call_id(turn, &id),
                    tool,
                    input,
                });
                self.started.insert(id);
            }
            // Other items are logged when they complete.
            None if is_known(item) => {}
            None => out.note(format!("codex: {raw}")),
        }
    }

    fn item_completed(&mut self, item: &Value, raw: &str, out: &mut Decoded) {
        let kind = str_of(item, "type").unwrap_or_default();
        if let Some((tool, input)) = call_of(item) {
            let turn = self.turns.current(out);
            let id = str_of(item, "id").unwrap_or_default().to_owned();
            if !self.started.remove(&id) {
                out.push(EventKind::ToolCall {
                    call_id: call_id(turn, &id),
                    tool,
                    input,
                });
            }
            let (ok, output) = result_of(item);
            out.push(EventKind::ToolResult {
                call_id: call_id(turn, &id),
                ok,
                output,
            });
            return;
        }
        match kind {
            "agent_message" => {
                self.turns.current(out);
                out.message(Role::Assistant, str_of(item, "text").unwrap_or_default());
            }
            "reasoning" => out.note(format!(
                "reasoning: {}",
                str_of(item, "text").unwrap_or_default()
            )),
            "todo_list" => plan(item, out),
            "error" => out.note(format!(
                "codex: {}",
                str_of(item, "message").unwrap_or_default()
            )),
            _ => out.note(format!("codex: {raw}")),
        }
    }
}

/// A call id unique within the session's log: Codex numbers items per
/// process (`item_0`, `item_1`, …), korvus's turn numbers are unique.
fn call_id(turn: u64, item: &str) -> String {
    format!("t{turn}-{item}")
}

/// Item types logged only on completion, or not as calls.
fn is_known(item: &Value) -> bool {
    matches!(
        str_of(item, "type"),
        Some("agent_message" | "reasoning" | "todo_list" | "error")
    )
}

/// The tool and input of an item that is a call.
fn call_of(item: &Value) -> Option<(String, Value)> {
    match str_of(item, "type")? {
        "command_execution" => Some((
            "command".to_owned(),
            json!({ "command": item.get("command").cloned().unwrap_or(Value::Null) }),
        )),
        "file_change" => Some((
            "file_change".to_owned(),
            json!({ "changes": item.get("changes").cloned().unwrap_or(Value::Null) }),
        )),
        "mcp_tool_call" => Some((
            format!(
                "mcp:{}/{}",
                str_of(item, "server").unwrap_or_default(),
                str_of(item, "tool").unwrap_or_default()
            ),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        )),
        "web_search" => Some((
            "web_search".to_owned(),
            json!({ "query": item.get("query").cloned().unwrap_or(Value::Null) }),
        )),
        _ => None,
    }
}

/// Whether a completed call succeeded, and what it returned.
fn result_of(item: &Value) -> (bool, Value) {
    let completed = matches!(str_of(item, "status"), Some("completed") | None);
    match str_of(item, "type") {
        Some("command_execution") => {
            let code = item.get("exit_code").and_then(Value::as_i64);
            (
                completed && code == Some(0),
                json!({
                    "exit_code": code,
                    "output": item.get("aggregated_output").cloned().unwrap_or(Value::Null),
                }),
            )
        }
        Some("mcp_tool_call") => {
            let error = item.get("error").filter(|e| !e.is_null());
            (
                completed && error.is_none(),
                error
                    .or_else(|| item.get("result"))
                    .cloned()
                    .unwrap_or(Value::Null),
            )
        }
        _ => (
            completed,
            json!({ "status": item.get("status").cloned().unwrap_or(Value::Null) }),
        ),
    }
}

/// A to-do list as one note: `plan: [x] a; [ ] b`.
fn plan(item: &Value, out: &mut Decoded) {
    let items = item
        .get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    let mark = if i.get("completed").and_then(Value::as_bool) == Some(true) {
                        "[x]"
                    } else {
                        "[ ]"
                    };
                    format!("{mark} {}", str_of(i, "text").unwrap_or_default())
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    out.note(format!("plan: {items}"));
}

#[cfg(test)]
mod tests {
    use super::super::{Decoder, Dialect};
    use super::*;

    /// What codex-cli 0.171.0 printed for one tool call and a message.
    const RUN: &str = r#"{"type":"thread.started","thread_id":"01a23b22-f6f7-7c41-8c57-42052575f413"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `stub-model` not found."}}
{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \"echo done\"","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc \"echo done\"","aggregated_output":"done\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"reasoning","text":"**Writing**"}}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Report written."}}
{"type":"turn.completed","usage":{"input_tokens":200,"cached_input_tokens":0,"output_tokens":20,"reasoning_output_tokens":0}}"#;

    fn decode(start: Start, lines: &str) -> (Vec<EventKind>, Usage, Decoder) {
        super::super::tests::decode(Dialect::Codex, start, lines)
    }

    #[test]
    fn a_run_maps_to_a_turn_with_its_command_message_and_usage() {
        let start = Start {
            first_turn: 4,
            ..Start::default()
        };
        let (events, usage, d) = decode(start, RUN);
        assert_eq!(
            events,
            vec![
                EventKind::Note {
                    text: "codex thread 01a23b22-f6f7-7c41-8c57-42052575f413".into()
                },
                EventKind::Note {
                    text: "codex: Model metadata for `stub-model` not found.".into()
                },
                EventKind::TurnStart { turn: 4 },
                EventKind::ToolCall {
                    call_id: "t4-item_1".into(),
                    tool: "command".into(),
                    input: json!({"command": "/bin/bash -lc \"echo done\""}),
                },
                EventKind::ToolResult {
                    call_id: "t4-item_1".into(),
                    ok: true,
                    output: json!({"exit_code": 0, "output": "done\n"}),
                },
                EventKind::Note {
                    text: "reasoning: **Writing**".into()
                },
                EventKind::Message {
                    role: Role::Assistant,
                    text: "Report written.".into()
                },
                EventKind::TurnEnd {
                    turn: 4,
                    interrupted: false
                },
            ]
        );
        assert_eq!(
            usage,
            Usage {
                input: 200,
                output: 20
            }
        );
        assert_eq!(d.thread(), Some("01a23b22-f6f7-7c41-8c57-42052575f413"));
        assert_eq!(d.failure(), None);
    }

    #[test]
    fn a_resumed_thread_counts_only_its_own_usage() {
        // The thread's running total was 200/20 after the first run.
        let start = Start {
            first_turn: 2,
            previous_total: Usage {
                input: 200,
                output: 20,
            },
        };
        let lines = r#"{"type":"turn.started"}
{"type":"turn.completed","usage":{"input_tokens":300,"output_tokens":30}}"#;
        let (events, usage, d) = decode(start, lines);
        assert_eq!(events[0], EventKind::TurnStart { turn: 2 });
        assert_eq!(
            usage,
            Usage {
                input: 100,
                output: 10
            }
        );
        assert_eq!(
            d.total(),
            Usage {
                input: 300,
                output: 30
            }
        );
    }

    #[test]
    fn a_failed_turn_is_closed_noted_and_remembered() {
        let lines = r#"{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 1/5"}
{"type":"turn.failed","error":{"message":"stub failure"}}"#;
        let (events, _, d) = decode(Start::default(), lines);
        assert_eq!(
            events,
            vec![
                EventKind::TurnStart { turn: 1 },
                EventKind::Note {
                    text: "codex error: Reconnecting... 1/5".into()
                },
                EventKind::Note {
                    text: "turn failed: stub failure".into()
                },
                EventKind::TurnEnd {
                    turn: 1,
                    interrupted: false
                },
            ]
        );
        assert_eq!(d.failure(), Some("stub failure"));
    }

    #[test]
    fn file_changes_calls_without_a_start_and_unknown_lines_are_kept() {
        let lines = r#"{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_5","type":"file_change","changes":[{"path":"report.md","kind":"add"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_6","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}
{"type":"item.updated","item":{"id":"item_7","type":"todo_list","items":[{"text":"look","completed":true},{"text":"write","completed":false}]}}
{"type":"item.completed","item":{"id":"item_8","type":"hologram","x":1}}
{"type":"session.configured","x":2}"#;
        let (events, _, _) = decode(Start::default(), lines);
        assert_eq!(
            events[1..5],
            [
                EventKind::ToolCall {
                    call_id: "t1-item_5".into(),
                    tool: "file_change".into(),
                    input: json!({"changes": [{"path": "report.md", "kind": "add"}]}),
                },
                EventKind::ToolResult {
                    call_id: "t1-item_5".into(),
                    ok: true,
                    output: json!({"status": "completed"}),
                },
                EventKind::ToolCall {
                    call_id: "t1-item_6".into(),
                    tool: "command".into(),
                    input: json!({"command": "false"}),
                },
                EventKind::ToolResult {
                    call_id: "t1-item_6".into(),
                    ok: false,
                    output: json!({"exit_code": 1, "output": ""}),
                },
            ]
        );
        assert_eq!(
            events[5],
            EventKind::Note {
                text: "plan: [x] look; [ ] write".into()
            }
        );
        let EventKind::Note { text } = &events[6] else {
            panic!("{:?}", events[6]);
        };
        assert!(text.contains("hologram"), "{text}");
        let EventKind::Note { text } = &events[7] else {
            panic!("{:?}", events[7]);
        };
        assert!(text.contains("session.configured"), "{text}");
    }
}
