//! Reading a model call's usage from its answer: the last usage figures of
//! a streamed answer (server-sent events) or the `usage` of a JSON body.
//! One meter reads the shapes of all three APIs the gateway serves
//! (Responses, Chat Completions, Messages), whatever path the call took:
//! an agent cannot dodge it by calling a path korvus does not know. Pure:
//! bytes in, figures out.

use serde_json::Value;

/// The model APIs the gateway meters, told apart by the request's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// OpenAI Responses: `…/responses`.
    Responses,
    /// OpenAI Chat Completions: `…/chat/completions`.
    Chat,
    /// Anthropic Messages: `…/messages`.
    Messages,
}

impl Api {
    /// The API a request path calls, if it is a model call (`count_tokens`
    /// and model lists are not).
    pub(crate) fn of_path(path: &str) -> Option<Self> {
        let path = decoded(path.split('?').next().unwrap_or_default());
        let path = path.trim_end_matches('/');
        if path.ends_with("/responses") || path == "responses" {
            Some(Self::Responses)
        } else if path.ends_with("/chat/completions") {
            Some(Self::Chat)
        } else if path.ends_with("/messages") {
            Some(Self::Messages)
        } else {
            None
        }
    }
}

/// `path` with its `%XX` escapes decoded (for telling APIs apart only: an
/// upstream may decode `/v1/message%73` as `/v1/messages`).
fn decoded(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What one call used.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Used {
    pub(crate) input: u64,
    pub(crate) output: u64,
    pub(crate) model: Option<String>,
}

/// The longest SSE line or JSON body read for usage; a longer line is
/// skipped (usage lines are small), a longer JSON body is not metered.
pub(super) const MAX_HELD: usize = 16 * 1024 * 1024;

/// Reads one answer as it streams past.
#[derive(Debug)]
pub(crate) struct Meter {
    streamed: bool,
    /// The unfinished line (streamed) or the whole body so far (JSON).
    held: Vec<u8>,
    /// A line past [`MAX_HELD`] being skipped to its end.
    skipping: bool,
    used: Option<Used>,
}

impl Meter {
    /// A meter for an answer; `streamed` when it is `text/event-stream`.
    pub(crate) fn new(streamed: bool) -> Self {
        Self {
            streamed,
            held: Vec::new(),
            skipping: false,
            used: None,
        }
    }

    /// The next bytes of the answer.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        if !self.streamed {
            if self.held.len() + bytes.len() > MAX_HELD {
                self.skipping = true;
                self.held = Vec::new();
            }
            if !self.skipping {
                self.held.extend_from_slice(bytes);
            }
            return;
        }
        while let Some(at) = bytes.iter().position(|b| *b == b'\n') {
            if self.skipping {
                self.skipping = false;
            } else {
                self.held.extend_from_slice(&bytes[..at]);
                let line = std::mem::take(&mut self.held);
                self.line(&line);
            }
            bytes = &bytes[at + 1..];
        }
        if !self.skipping {
            if self.held.len() + bytes.len() > MAX_HELD {
                self.skipping = true;
                self.held = Vec::new();
            } else {
                self.held.extend_from_slice(bytes);
            }
        }
    }

    /// The answer ended: what it used, if it said.
    pub(crate) fn finish(mut self) -> Option<Used> {
        if self.streamed {
            let line = std::mem::take(&mut self.held);
            if !self.skipping {
                self.line(&line);
            }
            return self.used;
        }
        if self.skipping {
            return None;
        }
        let body: Value = serde_json::from_slice(&self.held).ok()?;
        let mut used = usage_of(body.get("usage")?)?;
        used.model = model_of(&body);
        Some(used)
    }

    /// Whether it reads a whole (not streamed) answer it can still meter:
    /// one worth reading to its end when the agent hangs up.
    pub(crate) fn reads_whole(&self) -> bool {
        !self.streamed && !self.skipping
    }

    /// The bytes it holds (a whole answer read so far).
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// What was read so far (a cut answer's figures: a lower bound).
    pub(crate) fn partial(&self) -> Option<Used> {
        self.used.clone()
    }

    /// One SSE line: only `data:` lines carry JSON.
    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.strip_suffix(b"\r").unwrap_or(data);
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        match event.get("type").and_then(Value::as_str) {
            Some("message_start" | "message_delta") => self.message_event(&event),
            // Responses: `response.completed` (or `.incomplete`/`.failed`,
            // which also carry what was used).
            _ => match event.get("response") {
                Some(response) => {
                    if let Some(mut used) = response.get("usage").and_then(usage_of) {
                        used.model = model_of(response);
                        self.used = Some(used);
                    }
                }
                // Chat Completions: the last chunk's `usage`.
                None => {
                    if let Some(mut used) = event.get("usage").and_then(usage_of) {
                        used.model = model_of(&event);
                        self.used = Some(used);
                    }
                }
            },
        }
    }

    /// `message_start` gives the input (and a first output count),
    /// `message_delta` the output so far: both cumulative.
    fn message_event(&mut self, event: &Value) {
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                let Some(message) = event.get("message") else {
                    return;
                };
                if let Some(mut used) = message.get("usage").and_then(|u| messages(u, None)) {
                    used.model = model_of(message);
                    self.used = Some(used);
                }
            }
            Some("message_delta") => {
                let before = self.used.clone();
                if let Some(now) = event
                    .get("usage")
                    .and_then(|u| messages(u, before.as_ref()))
                {
                    self.used = Some(now);
                }
            }
            _ => {}
        }
    }
}

fn count(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn model_of(v: &Value) -> Option<String> {
    v.get("model")
        .and_then(Value::as_str)
        .map(|m| m.chars().take(200).collect())
}

/// A `usage` object of any of the three APIs: Chat's `prompt_tokens` and
/// `completion_tokens`, or `input_tokens` (plus Messages' cache reads and
/// writes; Responses counts cached input inside `input_tokens`) and
/// `output_tokens`.
fn usage_of(usage: &Value) -> Option<Used> {
    if usage.get("prompt_tokens").is_some() {
        return chat(usage);
    }
    count(usage, "output_tokens")?;
    messages(usage, None)
}

/// Chat usage: `prompt_tokens` (cached ones inside), `completion_tokens`.
fn chat(usage: &Value) -> Option<Used> {
    Some(Used {
        input: count(usage, "prompt_tokens")?,
        output: count(usage, "completion_tokens")?,
        model: None,
    })
}

/// Messages usage: input is `input_tokens` plus cache reads and writes;
/// a `message_delta`'s figures replace those before it where it has them.
fn messages(usage: &Value, before: Option<&Used>) -> Option<Used> {
    let output = count(usage, "output_tokens");
    let input_parts = [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ];
    let any_input = input_parts.iter().any(|k| count(usage, k).is_some());
    let input = input_parts
        .iter()
        .filter_map(|k| count(usage, k))
        .fold(0u64, u64::saturating_add);
    match before {
        None => Some(Used {
            input: if any_input { input } else { return None },
            output: output.unwrap_or(0),
            model: None,
        }),
        Some(before) => Some(Used {
            input: if any_input {
                input.max(before.input)
            } else {
                before.input
            },
            output: output.unwrap_or(before.output),
            model: before.model.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(api: Api, text: &str, cut: usize) -> Option<Used> {
        let _ = api;
        let mut m = Meter::new(true);
        // Fed in pieces of `cut` bytes: a line may span any two.
        for piece in text.as_bytes().chunks(cut) {
            m.feed(piece);
        }
        m.finish()
    }

    fn used(input: u64, output: u64, model: &str) -> Option<Used> {
        Some(Used {
            input,
            output,
            model: Some(model.to_owned()),
        })
    }

    #[test]
    fn apis_are_told_by_their_paths() {
        assert_eq!(Api::of_path("/v1/responses"), Some(Api::Responses));
        assert_eq!(Api::of_path("/responses?x=1"), Some(Api::Responses));
        assert_eq!(Api::of_path("/v1/chat/completions"), Some(Api::Chat));
        assert_eq!(Api::of_path("/v1/messages"), Some(Api::Messages));
        assert_eq!(Api::of_path("/v1/messages/count_tokens"), None);
        assert_eq!(Api::of_path("/v1/models"), None);
    }

    #[test]
    fn a_streamed_responses_answer_is_metered_at_its_completion() {
        let text = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n\
            event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"usage\"}\n\n\
            event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-x\",\"usage\":{\"input_tokens\":120,\"output_tokens\":7}}}\r\n\r\n";
        for cut in [1, 7, 64, 4096] {
            assert_eq!(
                sse(Api::Responses, text, cut),
                used(120, 7, "gpt-x"),
                "{cut}"
            );
        }
    }

    #[test]
    fn a_cut_stream_is_not_metered() {
        let text = "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\ndata: {\"type\":\"response.output_text.delta\"";
        assert_eq!(sse(Api::Responses, text, 5), None);
        assert_eq!(sse(Api::Messages, "data: {\"type\":\"ping\"}\n", 5), None);
    }

    #[test]
    fn chat_usage_comes_in_its_last_chunk() {
        let text = "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n\
            data: {\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"completion_tokens\":4,\"total_tokens\":34}}\n\ndata: [DONE]\n\n";
        assert_eq!(sse(Api::Chat, text, 3), used(30, 4, "m"));
    }

    #[test]
    fn messages_take_input_from_the_start_and_output_from_the_last_delta() {
        let text = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":50,\"cache_read_input_tokens\":25,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"x\"}}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        assert_eq!(sse(Api::Messages, text, 11), used(80, 15, "claude-x"));
    }

    #[test]
    fn json_bodies_are_metered_whole() {
        let whole = |api, body: &str| {
            let _ = api;
            let mut m = Meter::new(false);
            for piece in body.as_bytes().chunks(3) {
                m.feed(piece);
            }
            m.finish()
        };
        assert_eq!(
            whole(
                Api::Responses,
                r#"{"model":"a","output":[],"usage":{"input_tokens":100,"output_tokens":10}}"#
            ),
            used(100, 10, "a")
        );
        assert_eq!(
            whole(
                Api::Chat,
                r#"{"model":"b","usage":{"prompt_tokens":3,"completion_tokens":2}}"#
            ),
            used(3, 2, "b")
        );
        assert_eq!(
            whole(
                Api::Messages,
                r#"{"model":"c","usage":{"input_tokens":8,"output_tokens":1}}"#
            ),
            used(8, 1, "c")
        );
        assert_eq!(whole(Api::Chat, r#"{"error":{"message":"no"}}"#), None);
        assert_eq!(
            whole(
                Api::Chat,
                r#"{"usage":{"prompt_tokens":-1,"completion_tokens":2}}"#
            ),
            None
        );
        assert_eq!(whole(Api::Responses, "{\"usage\":"), None);
    }

    #[test]
    fn an_overlong_line_is_skipped_not_held() {
        let mut m = Meter::new(true);
        let big = vec![b'x'; MAX_HELD + 10];
        m.feed(b"data: ");
        m.feed(&big);
        m.feed(
            b"\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n",
        );
        assert_eq!(
            m.finish(),
            Some(Used {
                input: 1,
                output: 1,
                model: None
            })
        );
    }
}
