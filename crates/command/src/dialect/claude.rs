//! Claude Code `-p --output-format stream-json --verbose`: one JSON
//! object per line. One invocation is one korvus turn.
//!
//! | line | events |
//! |---|---|
//! | `system` `init` | a note naming the session (kept for resume), `turn_start` |
//! | other `system` lines | a note |
//! | `assistant` | per content block: `text` → assistant `message`, `thinking` → note `thinking: …`, `tool_use` → `tool_call` |
//! | `user` | per content block: `tool_result` → `tool_result`, `text` → user `message` |
//! | `result` | usage (this invocation's), a note when it is an error (the run's failure), `turn_end` |
//! | anything else | a note holding the line |

use korvus_log::{EventKind, Role};
use serde_json::Value;

use super::{count_of, str_of, Decoded, Start, Turns, Usage};

/// One run's Claude Code decoder.
#[derive(Debug)]
pub(crate) struct Claude {
    turns: Turns,
    pub(crate) session: Option<String>,
    pub(crate) total: Usage,
    pub(crate) failure: Option<String>,
}

impl Claude {
    pub(crate) fn new(start: Start) -> Self {
        Self {
            turns: Turns::new(start.first_turn),
            session: None,
            total: start.previous_total,
            failure: None,
        }
    }

    pub(crate) fn line(&mut self, v: &Value, raw: &str, out: &mut Decoded) {
        match str_of(v, "type").unwrap_or_default() {
            "system" if str_of(v, "subtype") == Some("init") => {
                let id = str_of(v, "session_id").unwrap_or_default().to_owned();
                out.note(format!(
                    "claude-code session {id} (model {})",
                    str_of(v, "model").unwrap_or("unknown")
                ));
                self.session = Some(id);
                self.turns.start(out);
            }
            "assistant" => {
                let turn = self.turns.current(out);
                for block in content(v) {
                    assistant_block(turn, block, out);
                }
            }
            "user" => {
                let turn = self.turns.current(out);
                match v.get("message").and_then(|m| m.get("content")) {
                    Some(Value::String(text)) => out.message(Role::User, text.clone()),
                    _ => {
                        for block in content(v) {
                            user_block(turn, block, out);
                        }
                    }
                }
            }
            "result" => self.result(v, out),
            _ => out.note(format!("claude-code: {raw}")),
        }
    }

    fn result(&mut self, v: &Value, out: &mut Decoded) {
        self.turns.current(out);
        if let Some(usage) = v.get("usage") {
            // Claude Code reports each invocation's own usage; cache reads
            // and writes are input too (Codex counts cached input inside
            // its input_tokens).
            out.usage = Usage {
                input: count_of(usage, "input_tokens")
                    .saturating_add(count_of(usage, "cache_read_input_tokens"))
                    .saturating_add(count_of(usage, "cache_creation_input_tokens")),
                output: count_of(usage, "output_tokens"),
            };
            self.total = Usage {
                input: self.total.input.saturating_add(out.usage.input),
                output: self.total.output.saturating_add(out.usage.output),
            };
        }
        let subtype = str_of(v, "subtype").unwrap_or("unknown");
        let is_error = v.get("is_error").and_then(Value::as_bool) == Some(true);
        if is_error || subtype != "success" {
            let why = str_of(v, "result")
                .filter(|r| !r.is_empty())
                .map_or_else(|| subtype.to_owned(), str::to_owned);
            out.note(format!("turn failed: {why}"));
            self.failure = Some(why);
        }
        self.turns.end(out);
    }
}

/// The content blocks of an `assistant` or `user` line.
fn content(v: &Value) -> &[Value] {
    v.get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A call id unique within the session's log: a model's tool-use ids are
/// not guaranteed to be unique across invocations, korvus's turns are.
fn call_id(turn: u64, id: &str) -> String {
    format!("t{turn}-{id}")
}

fn assistant_block(turn: u64, block: &Value, out: &mut Decoded) {
    match str_of(block, "type").unwrap_or_default() {
        "text" => out.message(Role::Assistant, str_of(block, "text").unwrap_or_default()),
        "thinking" => out.note(format!(
            "thinking: {}",
            str_of(block, "thinking").unwrap_or_default()
        )),
        "tool_use" | "server_tool_use" => out.push(EventKind::ToolCall {
            call_id: call_id(turn, str_of(block, "id").unwrap_or_default()),
            tool: str_of(block, "name").unwrap_or_default().to_owned(),
            input: block.get("input").cloned().unwrap_or(Value::Null),
        }),
        _ => out.note(format!("claude-code: {block}")),
    }
}

fn user_block(turn: u64, block: &Value, out: &mut Decoded) {
    match str_of(block, "type").unwrap_or_default() {
        "tool_result" => out.push(EventKind::ToolResult {
            call_id: call_id(turn, str_of(block, "tool_use_id").unwrap_or_default()),
            ok: block.get("is_error").and_then(Value::as_bool) != Some(true),
            output: block.get("content").cloned().unwrap_or(Value::Null),
        }),
        "text" => out.message(Role::User, str_of(block, "text").unwrap_or_default()),
        _ => out.note(format!("claude-code: {block}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Decoder, Dialect};
    use super::*;
    use serde_json::json;

    /// What Claude Code 2.1.332 printed for one tool call and a message
    /// (long fields cut).
    const RUN: &str = r#"{"type":"system","subtype":"init","cwd":"/tmp/cws","session_id":"bc0ccf44-7c8d-4e16-aa6d-82c4fdb05a08","tools":["Bash"],"model":"claude-opus-5-5","permissionMode":"bypassPermissions"}
{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo done","description":"write report"}}],"usage":{"input_tokens":100,"output_tokens":1}},"session_id":"bc0ccf44-7c8d-4e16-aa6d-82c4fdb05a08"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"done","is_error":false}]},"session_id":"bc0ccf44-7c8d-4e16-aa6d-82c4fdb05a08"}
{"type":"assistant","message":{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"done?"},{"type":"text","text":"Report written."}]},"session_id":"bc0ccf44-7c8d-4e16-aa6d-82c4fdb05a08"}
{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"Report written.","session_id":"bc0ccf44-7c8d-4e16-aa6d-82c4fdb05a08","usage":{"input_tokens":200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":20}}"#;

    fn decode(start: Start, lines: &str) -> (Vec<EventKind>, Usage, Decoder) {
        super::super::tests::decode(Dialect::ClaudeCode, start, lines)
    }

    #[test]
    fn an_invocation_is_one_turn_with_its_calls_messages_and_usage() {
        let start = Start {
            first_turn: 3,
            previous_total: Usage {
                input: 200,
                output: 20,
            },
        };
        let (events, usage, d) = decode(start, RUN);
        assert_eq!(
            events,
            vec![
                EventKind::Note {
                    text: "claude-code session bc0ccf44-7c8d-4e16-aa6d-82c4fdb05a08 (model claude-opus-5-5)".into()
                },
                EventKind::TurnStart { turn: 3 },
                EventKind::ToolCall {
                    call_id: "t3-toolu_1".into(),
                    tool: "Bash".into(),
                    input: json!({"command": "echo done", "description": "write report"}),
                },
                EventKind::ToolResult {
                    call_id: "t3-toolu_1".into(),
                    ok: true,
                    output: json!("done"),
                },
                EventKind::Note {
                    text: "thinking: done?".into()
                },
                EventKind::Message {
                    role: Role::Assistant,
                    text: "Report written.".into()
                },
                EventKind::TurnEnd {
                    turn: 3,
                    interrupted: false
                },
            ]
        );
        // Its own usage, whatever came before.
        assert_eq!(
            usage,
            Usage {
                input: 200,
                output: 20
            }
        );
        assert_eq!(
            d.total(),
            Usage {
                input: 400,
                output: 40
            }
        );
        assert_eq!(d.thread(), Some("bc0ccf44-7c8d-4e16-aa6d-82c4fdb05a08"));
        assert_eq!(d.failure(), None);
    }

    #[test]
    fn an_error_result_is_the_runs_failure_and_unknown_lines_are_kept() {
        let lines = r#"{"type":"system","subtype":"api_retry","attempt":1}
{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 stub failure","usage":{"input_tokens":0,"output_tokens":0}}
{"type":"stream_event","event":{}}"#;
        let (events, _, d) = decode(Start::default(), lines);
        let EventKind::Note { text } = &events[0] else {
            panic!("{events:?}");
        };
        assert!(text.contains("api_retry"), "{text}");
        assert_eq!(events[1], EventKind::TurnStart { turn: 1 });
        assert_eq!(
            events[2],
            EventKind::Note {
                text: "turn failed: API Error: 500 stub failure".into()
            }
        );
        assert_eq!(
            events[3],
            EventKind::TurnEnd {
                turn: 1,
                interrupted: false
            }
        );
        let EventKind::Note { text } = &events[4] else {
            panic!("{events:?}");
        };
        assert!(text.contains("stream_event"), "{text}");
        assert_eq!(d.failure(), Some("API Error: 500 stub failure"));
    }
}
