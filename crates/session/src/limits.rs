//! What dsh's own reader reads back, and so what the writer may write: the limits of an event
//! line, of a group commit, and of a line the readers hold. An event outside them is refused
//! before it takes a seq, so every event the writer accepts reads back identical (SPEC.md,
//! "Oversized arguments").

use crate::error::SessionError;
use dsh_core::event::{
    CodeDispatchData, MAX_EVENT_BYTES, MAX_SEQ, MAX_STEP, ToolCallData, ToolResultData,
    UserMessageData,
};
use dsh_core::{ContentBlock, EventBody, SessionEvent, ToolError};
use serde_json::Value;
use std::io::{self, Write};

/// The deepest nesting of arrays and objects in an event line that the reader accepts,
/// counting the event's own object as one and its `data` as two: serde_json's reader stops at
/// its 128th nested level (`tests::the_readers_nesting_limit_is_max_depth` holds it to this).
pub(crate) const MAX_DEPTH: usize = 127;

/// The most one group commit writes: one largest event line and its newline, or several
/// smaller lines together no longer. Written and synced a group at a time, so this is also
/// the most a crash under `batch` or `always` can leave half-written: the bound of a torn tail.
pub(crate) const MAX_GROUP_BYTES: usize = MAX_EVENT_BYTES + 1;

/// The longest line a reader holds: an event line, or the unterminated tail of a group whose
/// pages were lost (zeros, with no newline left in them).
pub(crate) const MAX_LINE: usize = MAX_GROUP_BYTES;

/// Bytes an encoded JSON string takes at most: quotes, and every byte escaped as `\u00XX`.
fn str_bound(s: &str) -> usize {
    s.len().saturating_mul(6).saturating_add(2)
}

/// The nesting depth and an upper bound of the encoded size of a value whose container (if it
/// is one) sits at nesting level `level`. Walks with its own stack: a value nested a million
/// deep must be measured (and refused), not overflow this thread's stack.
fn value_shape(value: &Value, level: usize) -> (usize, usize) {
    let mut depth = level.saturating_sub(1);
    let mut bytes = 0usize;
    let mut stack = vec![(value, level)];
    while let Some((v, at)) = stack.pop() {
        let add = match v {
            Value::Null => 4,
            Value::Bool(_) => 5,
            // The longest is an f64 such as -2.2250738585072014e-308.
            Value::Number(_) => 24,
            Value::String(s) => str_bound(s),
            Value::Array(items) => {
                depth = depth.max(at);
                stack.extend(items.iter().map(|i| (i, at + 1)));
                2 + items.len()
            }
            Value::Object(map) => {
                depth = depth.max(at);
                let mut keys = 2 + 2 * map.len();
                for (k, item) in map {
                    keys = keys.saturating_add(str_bound(k));
                    stack.push((item, at + 1));
                }
                keys
            }
        };
        bytes = bytes.saturating_add(add);
    }
    (depth, bytes)
}

fn blocks_bound(blocks: &[ContentBlock]) -> usize {
    blocks.iter().fold(2, |sum, b| {
        sum.saturating_add(64).saturating_add(match b {
            ContentBlock::Text { text } => str_bound(text),
            ContentBlock::Image { media_type, data } => {
                str_bound(media_type).saturating_add(str_bound(data))
            }
        })
    })
}

fn error_bound(error: Option<&ToolError>) -> usize {
    error.map_or(0, |e| 64usize.saturating_add(str_bound(&e.message)))
}

/// The event's nesting depth and an upper bound of its line's length.
fn shape(event: &SessionEvent) -> (usize, usize) {
    // `{"seq":…,"step":…,"type":"tool/code-dispatch","data":{…}}` and the keys of `data`,
    // with `"at":…` and `"startedAt":…` (two u64s and their keys, at most 64 bytes).
    const ENVELOPE: usize = 320;
    // The event's object is level 1, `data` level 2: containers in data start at level 3.
    let (depth, bytes) = match &event.body {
        // Every field is named (no `..`): a field added to an event must be counted here.
        EventBody::ToolCall(ToolCallData {
            call_id,
            name,
            arguments,
            arguments_text,
            agent,
            parent,
        }) => {
            let (depth, args) = value_shape(arguments, 3);
            let strings = [call_id, name, agent]
                .iter()
                .fold(0usize, |s, t| s.saturating_add(str_bound(t)));
            let parent = parent.as_deref().map_or(4, str_bound);
            let text = arguments_text.as_deref().map_or(0, |t| {
                str_bound(t).saturating_add("\"argumentsText\":,".len())
            });
            let parent = parent.saturating_add(text);
            (
                depth.max(2),
                args.saturating_add(strings).saturating_add(parent),
            )
        }
        EventBody::ToolResult {
            data:
                ToolResultData {
                    call_id,
                    message,
                    error,
                    meta,
                    // A u64: its bytes are in the envelope's bound.
                    started_at: _,
                },
            surface_op,
            source_event_seqs,
        } => {
            let (meta_depth, meta) = match meta {
                Some(map) => {
                    let (depth, bytes) = map.iter().fold((3, 2usize), |(d, b), (k, v)| {
                        let (vd, vb) = value_shape(v, 4);
                        (
                            d.max(vd),
                            b.saturating_add(str_bound(k))
                                .saturating_add(vb)
                                .saturating_add(2),
                        )
                    });
                    (depth, bytes)
                }
                None => (2, 0),
            };
            let message_depth = if message.is_empty() { 3 } else { 4 };
            let error_depth = if error.is_some() { 3 } else { 2 };
            (
                meta_depth.max(message_depth).max(error_depth),
                meta.saturating_add(str_bound(call_id))
                    .saturating_add(blocks_bound(message))
                    .saturating_add(error_bound(error.as_ref()))
                    .saturating_add(str_bound(surface_op))
                    .saturating_add(source_event_seqs.len().saturating_mul(21)),
            )
        }
        EventBody::CodeDispatch(CodeDispatchData {
            call_id,
            parent_call_id,
            name,
            arguments,
            message,
            error,
        }) => {
            let (depth, args) = value_shape(arguments, 3);
            let message_depth = if message.is_empty() { 3 } else { 4 };
            let error_depth = if error.is_some() { 3 } else { 2 };
            let strings = [call_id, parent_call_id, name]
                .iter()
                .fold(0usize, |s, t| s.saturating_add(str_bound(t)));
            (
                depth.max(message_depth).max(error_depth),
                args.saturating_add(strings)
                    .saturating_add(blocks_bound(message))
                    .saturating_add(error_bound(error.as_ref())),
            )
        }
        EventBody::UserMessage(UserMessageData { content, origin }) => {
            (2, str_bound(content).saturating_add(str_bound(origin)))
        }
    };
    (depth, bytes.saturating_add(ENVELOPE))
}

/// Counts bytes written, failing once there are more than `limit`.
struct Counter {
    written: usize,
    limit: usize,
}

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written = self.written.saturating_add(buf.len());
        if self.written > self.limit {
            return Err(io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether dsh's reader can read `event` back identical; if not, why, as the error the writer
/// answers its append with. Cheap for every real event: the exact length is counted only when
/// the upper bound passes the limit.
pub(crate) fn admit(event: &SessionEvent) -> Result<(), SessionError> {
    admit_within(event, MAX_EVENT_BYTES)
}

fn admit_within(event: &SessionEvent, max_bytes: usize) -> Result<(), SessionError> {
    if event.seq > MAX_SEQ {
        return Err(SessionError::Refused(format!(
            "the log has reached the largest seq, {MAX_SEQ} (2^63 - 1): no event can follow"
        )));
    }
    if event.step > MAX_STEP {
        return Err(SessionError::Refused(format!(
            "its step {} is past the largest step a log may hold, {MAX_STEP} (2^63 - 1)",
            event.step
        )));
    }
    let (depth, bound) = shape(event);
    if depth > MAX_DEPTH {
        return Err(SessionError::Refused(format!(
            "its {} nests arrays and objects {depth} levels deep, and dsh's reader reads at \
             most {MAX_DEPTH} (the event's own object and its data count two)",
            event.body.type_str()
        )));
    }
    if bound > max_bytes {
        let mut counter = Counter {
            written: 0,
            limit: max_bytes,
        };
        if serde_json::to_writer(&mut counter, event).is_err() {
            return Err(SessionError::Refused(format!(
                "its {} line would be more than {max_bytes} bytes, the longest line dsh's \
                 reader reads",
                event.body.type_str()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for i in 0..levels {
            v = if i % 2 == 0 {
                Value::Array(vec![v])
            } else {
                json!({ "k": v })
            };
        }
        v
    }

    fn call(arguments: Value) -> SessionEvent {
        // Read from JSON, so fields added to a call later take their defaults here.
        let data = serde_json::from_value::<ToolCallData>(json!({
            "callId": "c", "name": "t", "arguments": arguments, "agent": "main", "parent": null
        }))
        .unwrap();
        SessionEvent {
            at: None,
            seq: 1,
            step: 1,
            body: EventBody::ToolCall(data),
        }
    }

    fn result_with_meta(value: Value) -> SessionEvent {
        let mut meta = serde_json::Map::new();
        meta.insert("m".into(), value);
        SessionEvent {
            at: None,
            seq: 2,
            step: 1,
            body: EventBody::result(
                ToolResultData {
                    started_at: None,
                    call_id: "c".into(),
                    message: vec![ContentBlock::text("x")],
                    error: None,
                    meta: Some(meta),
                },
                1,
            ),
        }
    }

    #[test]
    fn the_readers_nesting_limit_is_max_depth() {
        // What admit calls the depth is what serde_json's reader counts: the deepest admitted
        // event reads back, and one level more does not.
        for make in [call as fn(Value) -> SessionEvent, result_with_meta] {
            let mut last_ok = None;
            for levels in 110..140 {
                let event = make(nested(levels));
                let line = event.to_json_line();
                let reads = SessionEvent::from_json_line(&line).is_ok_and(|e| e == event);
                assert_eq!(admit(&event).is_ok(), reads, "{levels} levels");
                if reads {
                    last_ok = Some(shape(&event).0);
                }
            }
            assert_eq!(last_ok, Some(MAX_DEPTH));
        }
    }

    #[test]
    fn the_size_bound_is_never_below_the_encoded_length() {
        let texts = ["", "plain", "\u{1}\u{2}\"\\", "日本語 \u{1F600}", "\n\t\r"];
        for text in texts {
            let events = [
                call(json!({ text: [text, 1.5e-300, -12, u64::MAX, null, true] })),
                result_with_meta(json!([text, {"a": text}])),
                SessionEvent {
                    at: None,
                    seq: u64::MAX,
                    step: u64::MAX,
                    body: EventBody::UserMessage(UserMessageData {
                        content: text.repeat(50),
                        origin: text.into(),
                    }),
                },
            ];
            for event in events {
                let (_, bound) = shape(&event);
                assert!(bound >= event.to_json_line().len(), "{event:?}");
            }
        }
    }

    #[test]
    fn the_line_length_is_counted_exactly_escapes_and_all() {
        // Control characters are written as six-byte escapes: the raw length says little.
        let event = SessionEvent {
            at: None,
            seq: 1,
            step: 1,
            body: EventBody::UserMessage(UserMessageData {
                content: "\u{1}\"é".repeat(100),
                origin: "c".into(),
            }),
        };
        let len = event.to_json_line().len();
        assert!(len > 800, "{len}");
        assert!(shape(&event).1 > len, "the bound alone would not decide");
        assert!(admit_within(&event, len).is_ok());
        let refused = admit_within(&event, len - 1).unwrap_err();
        assert!(refused.to_string().contains("bytes"), "{refused}");
    }

    #[test]
    fn a_value_nested_a_million_deep_is_measured_not_overflowing_the_stack() {
        let mut v = json!(0);
        for _ in 0..1_000_000 {
            v = Value::Array(vec![v]);
        }
        let mut event = call(Value::Null);
        if let EventBody::ToolCall(d) = &mut event.body {
            d.arguments = v;
        }
        assert!(matches!(admit(&event), Err(SessionError::Refused(_))));
        // serde_json's Value drops recursively; take it apart here instead.
        let EventBody::ToolCall(mut d) = event.body else {
            unreachable!()
        };
        let mut next = Some(std::mem::take(&mut d.arguments));
        while let Some(Value::Array(mut items)) = next {
            next = items.pop();
        }
    }
}
