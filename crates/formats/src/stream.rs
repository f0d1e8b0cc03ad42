//! Tool calls out of a streamed model response, each handed over the moment its block is
//! complete, so a safe call can start while the model is still writing later ones.
//!
//! | format | a call starts | its arguments grow | it is complete |
//! | --- | --- | --- | --- |
//! | OpenAI/DeepSeek chat-completions chunks | a `delta.tool_calls[]` entry with a new `index` | `function.arguments` pieces of that `index` | a later `index` starts, a `finish_reason` arrives, or the stream ends |
//! | Anthropic messages events | `content_block_start` of a `tool_use` block | `content_block_delta` with `input_json_delta.partial_json` | its `content_block_stop` |
//!
//! [`ToolCallStream::push_bytes`] takes the raw server-sent-event bytes, split anywhere (even
//! inside a UTF-8 sequence); [`ToolCallStream::push_event`] takes one decoded event. A call's
//! arguments go through [`Arguments::parse`], so text that is not JSON, or is past the limits,
//! becomes the matching `TOOL_INPUT_ERROR` in the pipeline: a malformed block never panics and
//! never goes unanswered. Memory stays bounded: one call's argument text is kept up to
//! [`MAX_ARGUMENT_BYTES`](dsh_core::MAX_ARGUMENT_BYTES), and one event line up to
//! [`MAX_EVENT_LINE_BYTES`].

use crate::Format;
use dsh_core::{Arguments, MAX_ARGUMENT_BYTES, ToolCall};
use serde_json::Value;
use std::collections::BTreeMap;

/// The longest server-sent-event line kept; a longer one is counted as malformed and skipped.
pub const MAX_EVENT_LINE_BYTES: usize = MAX_ARGUMENT_BYTES + 64 * 1024;

/// A call being streamed.
#[derive(Debug, Default)]
struct Partial {
    id: String,
    name: String,
    text: String,
    /// Bytes of argument text dropped past the limit (the call then ends oversized).
    dropped: usize,
    /// The text is the `input` an Anthropic block started with (a server that does not
    /// stream its input); the first delta replaces it.
    given_at_start: bool,
}

impl Partial {
    fn grow(&mut self, piece: &str) {
        if self.dropped > 0 || self.text.len() + piece.len() > MAX_ARGUMENT_BYTES {
            self.dropped += piece.len();
        } else {
            self.text.push_str(piece);
        }
    }

    fn finish(self) -> ToolCall {
        let arguments = if self.dropped > 0 {
            let bytes = self.text.len() + self.dropped;
            Arguments::Oversized {
                bytes,
                reason: format!(
                    "the arguments are {bytes} bytes or more, past the limit of {MAX_ARGUMENT_BYTES} bytes"
                ),
            }
        } else {
            Arguments::parse(&self.text)
        };
        ToolCall {
            call_id: self.id,
            name: self.name,
            arguments,
        }
    }
}

/// Assembles streamed tool-call blocks into [`ToolCall`]s.
///
/// ```
/// use dsh_formats::{Format, ToolCallStream};
/// let mut stream = ToolCallStream::new(Format::Anthropic);
/// let sse = concat!(
///     "event: content_block_start\n",
///     "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"read_file\",\"input\":{}}}\n\n",
///     "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \\\"a\"}}\n\n",
///     "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\".txt\\\"}\"}}\n\n",
/// );
/// assert!(stream.push_bytes(sse.as_bytes()).is_empty(), "not complete yet");
/// let done = stream.push_bytes(b"data: {\"type\":\"content_block_stop\",\"index\":1}\n\n");
/// assert_eq!(done[0].call_id, "t1");
/// assert_eq!(done[0].arguments.value().unwrap()["path"], "a.txt");
/// assert!(stream.finish().is_empty());
/// ```
#[derive(Debug)]
pub struct ToolCallStream {
    format: Format,
    open: BTreeMap<u64, Partial>,
    /// Bytes of the current line, before its newline arrives.
    line: Vec<u8>,
    /// The current line passed [`MAX_EVENT_LINE_BYTES`]: skip to its end.
    skipping: bool,
    malformed: usize,
    done: bool,
    /// The highest OpenAI `index` seen: a lower one that is not open belongs to a call
    /// already handed over.
    highest_started: Option<u64>,
}

impl ToolCallStream {
    /// A stream in `format`'s events.
    pub fn new(format: Format) -> ToolCallStream {
        ToolCallStream {
            format,
            open: BTreeMap::new(),
            line: Vec::new(),
            skipping: false,
            malformed: 0,
            done: false,
            highest_started: None,
        }
    }

    /// Events that could not be read (not JSON, or an overlong line). They are skipped: the
    /// calls they belonged to end with whatever arguments arrived.
    pub fn malformed_events(&self) -> usize {
        self.malformed
    }

    /// Feeds raw server-sent-event bytes; answers the calls they completed, in order.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Vec<ToolCall> {
        let mut completed = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let (piece, newline) = match memchr_newline(rest) {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            rest = if newline {
                &rest[piece.len() + 1..]
            } else {
                &[]
            };
            if !self.skipping {
                if self.line.len() + piece.len() > MAX_EVENT_LINE_BYTES {
                    self.skipping = true;
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(piece);
                }
            }
            if newline {
                if self.skipping {
                    self.skipping = false;
                    self.malformed += 1;
                } else {
                    let line = std::mem::take(&mut self.line);
                    completed.extend(self.line_done(&line));
                }
            }
        }
        completed
    }

    fn line_done(&mut self, line: &[u8]) -> Vec<ToolCall> {
        let line = match line.strip_suffix(b"\r") {
            Some(l) => l,
            None => line,
        };
        let Some(data) = line.strip_prefix(b"data:") else {
            // `event:`, `id:`, comments and the blank line between events carry no data.
            return Vec::new();
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if data == b"[DONE]" {
            return self.finish();
        }
        match serde_json::from_slice::<Value>(data) {
            Ok(event) => self.push_event(&event),
            Err(_) => {
                self.malformed += 1;
                Vec::new()
            }
        }
    }

    /// Feeds one decoded event (an OpenAI chunk, or an Anthropic event); answers the calls it
    /// completed, in order.
    pub fn push_event(&mut self, event: &Value) -> Vec<ToolCall> {
        if self.done {
            return Vec::new();
        }
        match self.format {
            Format::OpenAi => self.openai_chunk(event),
            Format::Anthropic => self.anthropic_event(event),
        }
    }

    fn openai_chunk(&mut self, chunk: &Value) -> Vec<ToolCall> {
        let mut completed = Vec::new();
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return completed;
        };
        if let Some(Value::Array(deltas)) = choice.get("delta").and_then(|d| d.get("tool_calls")) {
            for delta in deltas {
                let Some(index) = delta.get("index").and_then(Value::as_u64) else {
                    self.malformed += 1;
                    continue;
                };
                if !self.open.contains_key(&index)
                    && self.highest_started.is_some_and(|h| index <= h)
                {
                    // A piece of a call already handed over (or a repeated start): it cannot
                    // change what was pushed, and must not make a second call.
                    self.malformed += 1;
                    continue;
                }
                self.highest_started = Some(self.highest_started.map_or(index, |h| h.max(index)));
                // Calls stream one after another: a new index completes every earlier one.
                let earlier: Vec<u64> = self.open.range(..index).map(|(i, _)| *i).collect();
                for i in earlier {
                    if let Some(p) = self.open.remove(&i) {
                        completed.push(p.finish());
                    }
                }
                let partial = self.open.entry(index).or_default();
                if let Some(id) = delta.get("id").and_then(Value::as_str) {
                    join_piece(&mut partial.id, id);
                }
                let function = delta.get("function");
                if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                    join_piece(&mut partial.name, name);
                }
                if let Some(piece) = function
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                {
                    partial.grow(piece);
                }
            }
        }
        if choice.get("finish_reason").is_some_and(|r| !r.is_null()) {
            completed.extend(self.finish());
        }
        completed
    }

    fn anthropic_event(&mut self, event: &Value) -> Vec<ToolCall> {
        let index = event.get("index").and_then(Value::as_u64);
        match (event.get("type").and_then(Value::as_str), index) {
            (Some("content_block_start"), Some(index)) => {
                let block = event.get("content_block");
                if block.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                    let text = |k: &str| {
                        block
                            .and_then(|b| b.get(k))
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string()
                    };
                    let mut partial = Partial {
                        id: text("id"),
                        name: text("name"),
                        ..Partial::default()
                    };
                    // A start may carry the whole input (non-streamed servers); deltas, if
                    // any, replace it.
                    if let Some(input) = block.and_then(|b| b.get("input"))
                        && input.as_object().is_some_and(|o| !o.is_empty())
                    {
                        partial.grow(&input.to_string());
                        partial.given_at_start = true;
                    }
                    self.open.insert(index, partial);
                }
                Vec::new()
            }
            (Some("content_block_delta"), Some(index)) => {
                let delta = event.get("delta");
                if let (Some(partial), Some(piece)) = (
                    self.open.get_mut(&index),
                    delta
                        .and_then(|d| d.get("partial_json"))
                        .and_then(Value::as_str),
                ) {
                    if partial.given_at_start && !piece.is_empty() {
                        // Input given at the start is superseded by streamed deltas.
                        partial.given_at_start = false;
                        partial.text.clear();
                        partial.dropped = 0;
                    }
                    partial.grow(piece);
                }
                Vec::new()
            }
            (Some("content_block_stop"), Some(index)) => self
                .open
                .remove(&index)
                .map(|p| vec![p.finish()])
                .unwrap_or_default(),
            (Some("message_stop"), _) => self.finish(),
            _ => Vec::new(),
        }
    }

    /// The end of the stream: every call still open is handed over as it stands (arguments
    /// cut short become `TOOL_INPUT_ERROR` in the pipeline). Later input is ignored.
    pub fn finish(&mut self) -> Vec<ToolCall> {
        self.done = true;
        std::mem::take(&mut self.open)
            .into_values()
            .map(Partial::finish)
            .collect()
    }
}

/// An id or name piece: OpenAI sends each once, in the call's first delta; some compatible
/// servers repeat it in every delta, which must not double it.
fn join_piece(whole: &mut String, piece: &str) {
    if whole != piece {
        whole.push_str(piece);
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn openai_sse() -> String {
        let chunk = |v: Value| format!("data: {v}\n\n");
        let mut s = String::new();
        s += &chunk(json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}));
        s += &chunk(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}}]}),
        );
        s += &chunk(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": \"é.txt\""}}]}}]}),
        );
        s += &chunk(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}}]}),
        );
        s += &chunk(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "glob", "arguments": "{\"pattern\":"}}]}}]}),
        );
        s += &chunk(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "\"*\"}"}}]}}]}),
        );
        s += &chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
        s += "data: [DONE]\n\n";
        s
    }

    #[test]
    fn openai_calls_complete_when_the_next_starts() {
        let mut stream = ToolCallStream::new(Format::OpenAi);
        let sse = openai_sse();
        let cut = sse.find("\"index\":1").unwrap();
        let first = stream.push_bytes(&sse.as_bytes()[..cut]);
        assert!(first.is_empty());
        let rest = stream.push_bytes(&sse.as_bytes()[cut..]);
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[0].call_id, "c1");
        assert_eq!(rest[0].arguments.value().unwrap()["path"], "é.txt");
        assert_eq!(rest[1].name, "glob");
        assert_eq!(stream.malformed_events(), 0);
    }

    #[test]
    fn any_split_of_the_bytes_gives_the_same_calls() {
        let sse = openai_sse();
        let whole = ToolCallStream::new(Format::OpenAi).push_bytes(sse.as_bytes());
        let bytes = sse.as_bytes();
        for cut in 0..=bytes.len() {
            let mut stream = ToolCallStream::new(Format::OpenAi);
            let mut calls = stream.push_bytes(&bytes[..cut]);
            calls.extend(stream.push_bytes(&bytes[cut..]));
            calls.extend(stream.finish());
            assert_eq!(calls, whole, "split at {cut}");
        }
        // One byte at a time.
        let mut stream = ToolCallStream::new(Format::OpenAi);
        let calls: Vec<ToolCall> = bytes
            .iter()
            .flat_map(|b| stream.push_bytes(std::slice::from_ref(b)))
            .collect();
        assert_eq!(calls, whole);
    }

    #[test]
    fn malformed_blocks_become_calls_with_bad_arguments_never_panics() {
        let mut stream = ToolCallStream::new(Format::Anthropic);
        let mut calls = stream.push_bytes(
            b"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"grep\",\"input\":{}}}\n\
              data: {not json\n\
              data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"pattern\\\": \"}}\n\
              data: {\"type\":\"content_block_stop\",\"index\":0}\n",
        );
        assert_eq!(stream.malformed_events(), 1);
        assert_eq!(calls.len(), 1);
        assert!(matches!(calls[0].arguments, Arguments::Malformed { .. }));
        // A delta for a block that never started, and a stop for one that is not open.
        calls = stream.push_event(
            &json!({"type": "content_block_delta", "index": 9, "delta": {"partial_json": "x"}}),
        );
        assert!(calls.is_empty());
        assert!(
            stream
                .push_event(&json!({"type": "content_block_stop", "index": 9}))
                .is_empty()
        );
    }

    #[test]
    fn a_stream_cut_short_hands_over_what_it_has() {
        let mut stream = ToolCallStream::new(Format::OpenAi);
        stream.push_event(&json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "glob", "arguments": "{\"pat"}}]}}]}));
        let calls = stream.finish();
        assert_eq!(calls.len(), 1);
        assert!(matches!(calls[0].arguments, Arguments::Malformed { .. }));
    }

    #[test]
    fn argument_text_past_the_limit_is_counted_not_kept() {
        let mut stream = ToolCallStream::new(Format::OpenAi);
        let piece = "x".repeat(1024 * 1024);
        for i in 0..6 {
            let start = if i == 0 { "{\"a\":\"" } else { "" };
            stream.push_event(&json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "t", "arguments": format!("{start}{piece}")}}]}}]}));
        }
        let calls = stream.finish();
        match &calls[0].arguments {
            Arguments::Oversized { bytes, .. } => assert!(*bytes > 6 * 1024 * 1024),
            other => panic!("{other:?}"),
        }
    }

    fn anthropic_sse() -> String {
        let event = |name: &str, v: Value| format!("event: {name}\r\ndata: {v}\r\n\r\n");
        let mut s = String::new();
        s += &event(
            "message_start",
            json!({"type": "message_start", "message": {"role": "assistant"}}),
        );
        s += &event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        );
        s += &event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        );
        for (index, id, name, pieces) in [
            (1, "t1", "read_file", vec!["{\"path\":", " \"ü.txt\" ", "}"]),
            (2, "t2", "glob", vec!["{\"pattern\"", ":\"*\",\"n\":1.50}"]),
        ] {
            s += &event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            );
            for piece in pieces {
                s += &event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                );
            }
            s += &event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            );
        }
        s += &event("message_stop", json!({"type": "message_stop"}));
        s
    }

    #[test]
    fn anthropic_any_split_of_the_bytes_gives_the_same_calls() {
        let sse = anthropic_sse();
        let whole = ToolCallStream::new(Format::Anthropic).push_bytes(sse.as_bytes());
        assert_eq!(whole.len(), 2);
        // Arguments exactly as the model wrote them.
        assert_eq!(
            whole[0].arguments.logged_text(),
            Some("{\"path\": \"ü.txt\" }")
        );
        assert_eq!(
            whole[1].arguments.logged_text(),
            Some("{\"pattern\":\"*\",\"n\":1.50}")
        );
        let bytes = sse.as_bytes();
        for cut in 0..=bytes.len() {
            let mut stream = ToolCallStream::new(Format::Anthropic);
            let mut calls = stream.push_bytes(&bytes[..cut]);
            calls.extend(stream.push_bytes(&bytes[cut..]));
            calls.extend(stream.finish());
            assert_eq!(calls, whole, "split at {cut}");
            assert_eq!(stream.malformed_events(), 0);
        }
    }

    #[test]
    fn openai_arguments_are_kept_exactly_as_sent() {
        let mut stream = ToolCallStream::new(Format::OpenAi);
        for piece in ["{\"b\": 1,", " \"a\":2.0", "}"] {
            stream.push_event(&json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "t", "arguments": piece}}]}}]}));
        }
        let calls = stream.finish();
        assert_eq!(
            calls[0].arguments.logged_text(),
            Some("{\"b\": 1, \"a\":2.0}")
        );
        assert_eq!(calls[0].arguments.value().unwrap()["a"], 2.0);
    }

    #[test]
    fn anthropic_input_given_at_start_is_replaced_by_deltas_only_once() {
        let mut stream = ToolCallStream::new(Format::Anthropic);
        stream.push_event(&json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "grep", "input": {"pattern": "old"}}}));
        // The first delta replaces the start's input; the second completes it, although the
        // text before it is already a whole object.
        for piece in ["{\"pattern\":\"x\"}", " "] {
            stream.push_event(&json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}));
        }
        let calls = stream.push_event(&json!({"type": "content_block_stop", "index": 0}));
        assert_eq!(
            calls[0].arguments.logged_text(),
            Some("{\"pattern\":\"x\"} ")
        );
        // Without deltas, the start's input stands.
        stream.push_event(&json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "u", "name": "grep", "input": {"pattern": "y"}}}));
        let calls = stream.push_event(&json!({"type": "content_block_stop", "index": 1}));
        assert_eq!(calls[0].arguments.value().unwrap()["pattern"], "y");
    }

    #[test]
    fn openai_repeated_ids_and_stray_pieces_do_not_make_new_calls() {
        let mut stream = ToolCallStream::new(Format::OpenAi);
        let delta = |index: u64, args: &str| json!({"choices": [{"delta": {"tool_calls": [{"index": index, "id": format!("c{index}"), "function": {"name": "t", "arguments": args}}]}}]});
        // Some compatible servers repeat the id and name in every delta.
        assert!(stream.push_event(&delta(0, "{\"a\":")).is_empty());
        assert!(stream.push_event(&delta(0, "1}")).is_empty());
        let first = stream.push_event(&delta(1, "{}"));
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].call_id.as_str(), first[0].name.as_str()),
            ("c0", "t")
        );
        // A late piece of call 0 cannot change what was pushed and makes no second call.
        assert!(stream.push_event(&delta(0, "x")).is_empty());
        assert_eq!(stream.malformed_events(), 1);
        let rest = stream.finish();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].call_id, "c1");
    }
}
