//! Session events: the envelope and the four event types of SPEC.md ("The session log").
//!
//! ```text
//! {"seq":1,"step":1,"type":"tool/call","data":{"callId":"c1","name":"read_file","arguments":{..},"agent":"main","parent":null}}
//! {"seq":2,"step":1,"type":"tool/result","data":{"callId":"c1","message":[..]},"surfaceOp":"append","sourceEventSeqs":[1]}
//! ```
//! The format is read by outside checks: field names and type strings never change.

use crate::content::ContentBlock;
use crate::error::CoreError;
use crate::result::{FrozenResult, ToolError};
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::fmt;

/// `tool/call`: recorded before the call is prepared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallData {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model gave them (raw text, as a string, when they were not JSON;
    /// the `{"$dsh": "omitted", …}` marker when they passed a limit).
    pub arguments: Value,
    /// The exact text the model sent as its arguments, present only when serializing
    /// `arguments` again would not give the same bytes (SPEC.md's "Exact arguments").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_text: Option<String>,
    /// The agent that made the call.
    pub agent: String,
    /// The parent call's id, or null. The key is always written, and required when read: a
    /// `tool/call` without it is not an event of this format.
    #[serde(deserialize_with = "present_or_null")]
    pub parent: Option<String>,
}

/// Reads a field that may be `null` but must be there: with `deserialize_with`, serde reports a
/// missing key as an error instead of defaulting an `Option` to `None`.
fn present_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

/// `tool/result`: the single result the model sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultData {
    /// The call's id.
    pub call_id: String,
    /// The presentation content.
    pub message: Vec<ContentBlock>,
    /// Absent for a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// Metadata that is kept but not shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
    /// When the tool's body started, in milliseconds since the Unix epoch (SPEC.md's "Time");
    /// absent when it never started. For people and tools that show time: replay ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
}

impl ToolResultData {
    /// The persisted part of a frozen result: content, error and meta, never the value.
    pub fn from_frozen(result: &FrozenResult) -> ToolResultData {
        ToolResultData {
            call_id: result.call_id().to_string(),
            message: result.content().to_vec(),
            error: result.error_info().cloned(),
            meta: result.meta().cloned(),
            started_at: None,
        }
    }
}

/// `tool/code-dispatch`: one sub-call made by code mode, with its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeDispatchData {
    /// The sub-call's id.
    pub call_id: String,
    /// The `run_code` call it belongs to.
    pub parent_call_id: String,
    /// The tool it called.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
    /// The presentation content it produced.
    pub message: Vec<ContentBlock>,
    /// Absent for a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

/// `user/message`: deferred context, after the step's results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessageData {
    /// The text.
    pub content: String,
    /// The call whose `additionalContexts` it came from.
    pub origin: String,
}

/// The type-specific part of an event.
#[derive(Debug, Clone, PartialEq)]
pub enum EventBody {
    /// `tool/call`.
    ToolCall(ToolCallData),
    /// `tool/result`, with the top-level `surfaceOp` and `sourceEventSeqs`.
    ToolResult {
        /// The result.
        data: ToolResultData,
        /// Always `append` when written by dsh; kept as read so checks can verify it.
        surface_op: String,
        /// The seq of the call's `tool/call`.
        source_event_seqs: Vec<u64>,
    },
    /// `tool/code-dispatch`.
    CodeDispatch(CodeDispatchData),
    /// `user/message`.
    UserMessage(UserMessageData),
}

impl EventBody {
    /// The `type` string.
    pub fn type_str(&self) -> &'static str {
        match self {
            EventBody::ToolCall(_) => TOOL_CALL,
            EventBody::ToolResult { .. } => TOOL_RESULT,
            EventBody::CodeDispatch(_) => CODE_DISPATCH,
            EventBody::UserMessage(_) => USER_MESSAGE,
        }
    }

    /// A `tool/result` body pointing back at `call_seq`.
    pub fn result(data: ToolResultData, call_seq: u64) -> EventBody {
        EventBody::ToolResult {
            data,
            surface_op: SURFACE_APPEND.to_string(),
            source_event_seqs: vec![call_seq],
        }
    }
}

/// `tool/call`.
pub const TOOL_CALL: &str = "tool/call";
/// `tool/result`.
pub const TOOL_RESULT: &str = "tool/result";
/// `tool/code-dispatch`.
pub const CODE_DISPATCH: &str = "tool/code-dispatch";
/// `user/message`.
pub const USER_MESSAGE: &str = "user/message";
/// The only `surfaceOp` dsh writes.
pub const SURFACE_APPEND: &str = "append";
/// The largest `seq` a log may hold: 2^63 − 1 (SPEC.md, "Limits of numbers"), so that every
/// store can hold it (a signed 64-bit column, too). A log that would pass it is refused, never
/// wrapped.
pub const MAX_SEQ: u64 = i64::MAX as u64;
/// The largest `step` a log may hold: 2^63 − 1, like [`MAX_SEQ`].
pub const MAX_STEP: u64 = i64::MAX as u64;
/// The largest event line, in bytes and without its newline, that the session writer writes
/// and dsh's log readers read. The writer refuses a longer event (nothing is written), and the
/// readers refuse a longer line before holding more of it, so no file can make them grow
/// without bound. Real events stay far below it: arguments are bounded where they are parsed
/// and results where they are normalized.
pub const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// The wall-clock time now, in milliseconds since the Unix epoch: what `at` and `startedAt`
/// hold. A clock before 1970 reads as 0.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One line of the session log.
///
/// ```
/// use dsh_core::event::{EventBody, SessionEvent, UserMessageData};
/// let e = SessionEvent { at: None,
///     seq: 3,
///     step: 1,
///     body: EventBody::UserMessage(UserMessageData { content: "hi".into(), origin: "c1".into() }),
/// };
/// let line = e.to_json_line();
/// assert_eq!(line, r#"{"seq":3,"step":1,"type":"user/message","data":{"content":"hi","origin":"c1"}}"#);
/// assert_eq!(SessionEvent::from_json_line(&line).unwrap(), e);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// From 1, +1 per event, no gaps.
    pub seq: u64,
    /// The step the event belongs to.
    pub step: u64,
    /// When the pipeline made the event, in milliseconds since the Unix epoch (SPEC.md's
    /// "Time"); absent in older logs. No invariant depends on it: wall clocks may step back.
    pub at: Option<u64>,
    /// Type and data.
    pub body: EventBody,
}

impl SessionEvent {
    /// The event as one JSON line, without the newline.
    pub fn to_json_line(&self) -> String {
        // Serializing plain data to a String cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses one line.
    pub fn from_json_line(line: &str) -> Result<SessionEvent, CoreError> {
        serde_json::from_str(line).map_err(|e| CoreError::MalformedEvent(e.to_string()))
    }

    /// The call id this event is about (the sub-call's, for a code dispatch).
    pub fn call_id(&self) -> Option<&str> {
        match &self.body {
            EventBody::ToolCall(d) => Some(&d.call_id),
            EventBody::ToolResult { data, .. } => Some(&data.call_id),
            EventBody::CodeDispatch(d) => Some(&d.call_id),
            EventBody::UserMessage(_) => None,
        }
    }
}

impl Serialize for SessionEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let extra = matches!(self.body, EventBody::ToolResult { .. });
        let len = 4 + if extra { 2 } else { 0 } + usize::from(self.at.is_some());
        let mut map = s.serialize_map(Some(len))?;
        map.serialize_entry("seq", &self.seq)?;
        map.serialize_entry("step", &self.step)?;
        map.serialize_entry("type", self.body.type_str())?;
        if let Some(at) = self.at {
            map.serialize_entry("at", &at)?;
        }
        match &self.body {
            EventBody::ToolCall(d) => map.serialize_entry("data", d)?,
            EventBody::ToolResult {
                data,
                surface_op,
                source_event_seqs,
            } => {
                map.serialize_entry("data", data)?;
                map.serialize_entry("surfaceOp", surface_op)?;
                map.serialize_entry("sourceEventSeqs", source_event_seqs)?;
            }
            EventBody::CodeDispatch(d) => map.serialize_entry("data", d)?,
            EventBody::UserMessage(d) => map.serialize_entry("data", d)?,
        }
        map.end()
    }
}

enum Data {
    Call(ToolCallData),
    Result(ToolResultData),
    Dispatch(CodeDispatchData),
    User(UserMessageData),
    Raw(Value),
}

fn typed_from_value<E: de::Error>(ty: &str, v: Value) -> Result<Data, E> {
    let out = match ty {
        TOOL_CALL => serde_json::from_value(v).map(Data::Call),
        TOOL_RESULT => serde_json::from_value(v).map(Data::Result),
        CODE_DISPATCH => serde_json::from_value(v).map(Data::Dispatch),
        USER_MESSAGE => serde_json::from_value(v).map(Data::User),
        other => return Err(E::custom(format!("unknown event type `{other}`"))),
    };
    out.map_err(|e| E::custom(format!("bad data for `{ty}`: {e}")))
}

struct EventVisitor;

impl<'de> Visitor<'de> for EventVisitor {
    type Value = SessionEvent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a session event object with seq, step, type and data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SessionEvent, A::Error> {
        let mut seq: Option<u64> = None;
        let mut step: Option<u64> = None;
        let mut ty: Option<String> = None;
        let mut at: Option<u64> = None;
        let mut data: Option<Data> = None;
        let mut surface_op: Option<String> = None;
        let mut sources: Option<Vec<u64>> = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "seq" => seq = Some(map.next_value()?),
                "step" => step = Some(map.next_value()?),
                "type" => ty = Some(map.next_value()?),
                "at" => at = Some(map.next_value()?),
                "data" => {
                    data = Some(match ty.as_deref() {
                        Some(TOOL_CALL) => Data::Call(map.next_value()?),
                        Some(TOOL_RESULT) => Data::Result(map.next_value()?),
                        Some(CODE_DISPATCH) => Data::Dispatch(map.next_value()?),
                        Some(USER_MESSAGE) => Data::User(map.next_value()?),
                        Some(other) => {
                            return Err(de::Error::custom(format!("unknown event type `{other}`")));
                        }
                        None => Data::Raw(map.next_value()?),
                    })
                }
                "surfaceOp" => surface_op = Some(map.next_value()?),
                "sourceEventSeqs" => sources = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let seq = seq.ok_or_else(|| de::Error::missing_field("seq"))?;
        let step = step.ok_or_else(|| de::Error::missing_field("step"))?;
        let ty = ty.ok_or_else(|| de::Error::missing_field("type"))?;
        let data = match data.ok_or_else(|| de::Error::missing_field("data"))? {
            Data::Raw(v) => typed_from_value(&ty, v)?,
            typed => typed,
        };
        let body = match data {
            Data::Call(d) => EventBody::ToolCall(d),
            Data::Result(d) => EventBody::ToolResult {
                data: d,
                surface_op: surface_op.ok_or_else(|| de::Error::missing_field("surfaceOp"))?,
                source_event_seqs: sources
                    .ok_or_else(|| de::Error::missing_field("sourceEventSeqs"))?,
            },
            Data::Dispatch(d) => EventBody::CodeDispatch(d),
            Data::User(d) => EventBody::UserMessage(d),
            Data::Raw(_) => return Err(de::Error::custom("unreachable raw data")),
        };
        Ok(SessionEvent {
            seq,
            step,
            at,
            body,
        })
    }
}

impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SessionEvent, D::Error> {
        d.deserialize_map(EventVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;
    use serde_json::json;

    #[test]
    fn result_envelope_has_surface_op_and_sources() {
        let e = SessionEvent {
            at: None,
            seq: 2,
            step: 1,
            body: EventBody::result(
                ToolResultData {
                    started_at: None,
                    call_id: "c1".into(),
                    message: vec![ContentBlock::text("no")],
                    error: Some(ToolError::new(ErrorCode::Denied, "no")),
                    meta: None,
                },
                1,
            ),
        };
        let v: Value = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(v["type"], "tool/result");
        assert_eq!(v["surfaceOp"], "append");
        assert_eq!(v["sourceEventSeqs"], json!([1]));
        assert_eq!(v["data"]["error"]["code"], "DENIED");
        assert_eq!(v["data"]["callId"], "c1");
        assert_eq!(SessionEvent::from_json_line(&e.to_json_line()).unwrap(), e);
    }

    #[test]
    fn call_parent_is_null_not_absent() {
        let e = SessionEvent {
            at: None,
            seq: 1,
            step: 1,
            body: EventBody::ToolCall(ToolCallData {
                call_id: "c1".into(),
                name: "t".into(),
                arguments: json!({}),
                arguments_text: None,
                agent: "main".into(),
                parent: None,
            }),
        };
        let v: Value = serde_json::from_str(&e.to_json_line()).unwrap();
        assert!(v["data"].as_object().unwrap().contains_key("parent"));
        assert_eq!(v["data"]["parent"], Value::Null);
    }

    #[test]
    fn data_before_type_still_parses_and_bad_lines_fail() {
        let line =
            r#"{"data":{"content":"x","origin":"c"},"type":"user/message","step":1,"seq":1}"#;
        assert!(SessionEvent::from_json_line(line).is_ok());
        assert!(
            SessionEvent::from_json_line(r#"{"seq":1,"step":1,"type":"x","data":{}}"#).is_err()
        );
        assert!(
            SessionEvent::from_json_line(
                r#"{"seq":1,"step":1,"type":"tool/result","data":{"callId":"c","message":[]}}"#
            )
            .is_err()
        );
        assert!(SessionEvent::from_json_line("{\"seq\":1").is_err());
    }
    /// The golden wire format: each event type serializes to exactly this line (field names,
    /// their order, null versus absent), and the line reads back to the same event.
    fn golden(event: SessionEvent, line: &str) {
        assert_eq!(event.to_json_line(), line);
        assert_eq!(SessionEvent::from_json_line(line).unwrap(), event);
    }

    fn keys(line: &str, at: Option<&str>) -> Vec<String> {
        let v: Value = serde_json::from_str(line).unwrap();
        let obj = match at {
            Some(k) => v[k].as_object().unwrap().clone(),
            None => v.as_object().unwrap().clone(),
        };
        let mut keys: Vec<String> = obj.keys().cloned().collect();
        keys.sort();
        keys
    }

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        keys.sort();
        keys
    }

    #[test]
    fn golden_tool_call_with_parent_null_and_with_a_parent() {
        let call = |parent: Option<&str>| SessionEvent {
            at: None,
            seq: 1,
            step: 2,
            body: EventBody::ToolCall(ToolCallData {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: json!({"path": "a.txt"}),
                arguments_text: None,
                agent: "main".into(),
                parent: parent.map(str::to_string),
            }),
        };
        let top = r#"{"seq":1,"step":2,"type":"tool/call","data":{"callId":"c1","name":"read_file","arguments":{"path":"a.txt"},"agent":"main","parent":null}}"#;
        golden(call(None), top);
        let child = r#"{"seq":1,"step":2,"type":"tool/call","data":{"callId":"c1","name":"read_file","arguments":{"path":"a.txt"},"agent":"main","parent":"c0"}}"#;
        golden(call(Some("c0")), child);
        for line in [top, child] {
            assert_eq!(keys(line, None), sorted(&["seq", "step", "type", "data"]));
            assert_eq!(
                keys(line, Some("data")),
                sorted(&["callId", "name", "arguments", "agent", "parent"])
            );
        }
    }

    #[test]
    fn golden_tool_result_with_error_and_meta_and_without() {
        let mut meta = Map::new();
        meta.insert("dsh.recovered".into(), json!(true));
        let failed = SessionEvent {
            at: None,
            seq: 2,
            step: 2,
            body: EventBody::result(
                ToolResultData {
                    started_at: None,
                    call_id: "c1".into(),
                    message: vec![ContentBlock::text("outside the workspace")],
                    error: Some(ToolError::new(ErrorCode::Denied, "outside the workspace")),
                    meta: Some(meta),
                },
                1,
            ),
        };
        let line = r#"{"seq":2,"step":2,"type":"tool/result","data":{"callId":"c1","message":[{"type":"text","text":"outside the workspace"}],"error":{"code":"DENIED","message":"outside the workspace"},"meta":{"dsh.recovered":true}},"surfaceOp":"append","sourceEventSeqs":[1]}"#;
        golden(failed, line);
        assert_eq!(
            keys(line, None),
            sorted(&[
                "seq",
                "step",
                "type",
                "data",
                "surfaceOp",
                "sourceEventSeqs"
            ])
        );
        assert_eq!(
            keys(line, Some("data")),
            sorted(&["callId", "message", "error", "meta"])
        );
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            keys(&v["data"]["error"].to_string(), None),
            sorted(&["code", "message"])
        );

        // A success has neither `error` nor `meta`: absent, not null.
        let ok = SessionEvent {
            at: None,
            seq: 2,
            step: 2,
            body: EventBody::result(
                ToolResultData {
                    started_at: None,
                    call_id: "c1".into(),
                    message: vec![ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: "AA==".into(),
                    }],
                    error: None,
                    meta: None,
                },
                1,
            ),
        };
        let line = r#"{"seq":2,"step":2,"type":"tool/result","data":{"callId":"c1","message":[{"type":"image","media_type":"image/png","data":"AA=="}]},"surfaceOp":"append","sourceEventSeqs":[1]}"#;
        golden(ok, line);
        assert_eq!(keys(line, Some("data")), sorted(&["callId", "message"]));
    }

    #[test]
    fn golden_code_dispatch_with_its_parent_and_outcome() {
        let dispatch = |error: Option<ToolError>| SessionEvent {
            at: None,
            seq: 3,
            step: 2,
            body: EventBody::CodeDispatch(CodeDispatchData {
                call_id: "c1.1".into(),
                parent_call_id: "c1".into(),
                name: "write_file".into(),
                arguments: json!({"path": "x"}),
                message: vec![ContentBlock::text("no")],
                error,
            }),
        };
        let denied = r#"{"seq":3,"step":2,"type":"tool/code-dispatch","data":{"callId":"c1.1","parentCallId":"c1","name":"write_file","arguments":{"path":"x"},"message":[{"type":"text","text":"no"}],"error":{"code":"DENIED","message":"no"}}}"#;
        golden(
            dispatch(Some(ToolError::new(ErrorCode::Denied, "no"))),
            denied,
        );
        assert_eq!(
            keys(denied, Some("data")),
            sorted(&[
                "callId",
                "parentCallId",
                "name",
                "arguments",
                "message",
                "error"
            ])
        );
        let ok = r#"{"seq":3,"step":2,"type":"tool/code-dispatch","data":{"callId":"c1.1","parentCallId":"c1","name":"write_file","arguments":{"path":"x"},"message":[{"type":"text","text":"no"}]}}"#;
        golden(dispatch(None), ok);
        assert_eq!(keys(ok, None), sorted(&["seq", "step", "type", "data"]));
    }

    #[test]
    fn golden_user_message_with_content_and_origin() {
        let e = SessionEvent {
            at: None,
            seq: 4,
            step: 2,
            body: EventBody::UserMessage(UserMessageData {
                content: "the file changed since it was read".into(),
                origin: "c1".into(),
            }),
        };
        let line = r#"{"seq":4,"step":2,"type":"user/message","data":{"content":"the file changed since it was read","origin":"c1"}}"#;
        golden(e, line);
        assert_eq!(keys(line, Some("data")), sorted(&["content", "origin"]));
    }

    /// SPEC.md's "Time": `at` between `type` and `data`, `startedAt` last in a result's data;
    /// both read back, and a line without them reads as `None`.
    #[test]
    fn golden_times_sit_after_type_and_at_the_end_of_a_results_data() {
        let e = SessionEvent {
            seq: 2,
            step: 1,
            at: Some(1_767_225_600_123),
            body: EventBody::result(
                ToolResultData {
                    call_id: "c1".into(),
                    message: vec![ContentBlock::text("ok")],
                    error: None,
                    meta: None,
                    started_at: Some(1_767_225_600_100),
                },
                1,
            ),
        };
        let line = r#"{"seq":2,"step":1,"type":"tool/result","at":1767225600123,"data":{"callId":"c1","message":[{"type":"text","text":"ok"}],"startedAt":1767225600100},"surfaceOp":"append","sourceEventSeqs":[1]}"#;
        golden(e, line);
        let old = r#"{"seq":2,"step":1,"type":"tool/result","data":{"callId":"c1","message":[]},"surfaceOp":"append","sourceEventSeqs":[1]}"#;
        let read = SessionEvent::from_json_line(old).unwrap();
        assert_eq!(read.at, None);
        let EventBody::ToolResult { data, .. } = read.body else {
            panic!("not a result")
        };
        assert_eq!(data.started_at, None);
        assert!(
            SessionEvent::from_json_line(&old.replace("\"data\"", "\"at\":-1,\"data\"")).is_err()
        );
    }

    #[test]
    fn a_tool_call_without_its_parent_key_is_refused() {
        let without = r#"{"seq":1,"step":1,"type":"tool/call","data":{"callId":"c1","name":"t","arguments":{},"agent":"main"}}"#;
        let err = SessionEvent::from_json_line(without).unwrap_err();
        assert!(err.to_string().contains("parent"), "{err}");
        // Also when `data` comes before `type` (the other reading path).
        let data_first = r#"{"data":{"callId":"c1","name":"t","arguments":{},"agent":"main"},"type":"tool/call","step":1,"seq":1}"#;
        let err = SessionEvent::from_json_line(data_first).unwrap_err();
        assert!(err.to_string().contains("parent"), "{err}");
        // null and a string are both accepted.
        for parent in ["null", "\"c0\""] {
            let line = format!(
                r#"{{"seq":1,"step":1,"type":"tool/call","data":{{"callId":"c1","name":"t","arguments":{{}},"agent":"main","parent":{parent}}}}}"#
            );
            assert!(SessionEvent::from_json_line(&line).is_ok(), "{line}");
        }
        let number = r#"{"seq":1,"step":1,"type":"tool/call","data":{"callId":"c1","name":"t","arguments":{},"agent":"main","parent":7}}"#;
        assert!(SessionEvent::from_json_line(number).is_err());
    }
}
