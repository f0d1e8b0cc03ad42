//! Assistant messages in, tool calls out.

use crate::Format;
use crate::error::FormatError;
use dsh_core::{Arguments, ToolCall};
use serde_json::{Map, Value};

/// One assistant message, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedMessage {
    /// The shape it was written in; results are rendered back in the same one.
    pub format: Format,
    /// Its tool-call blocks, in message order. Empty for a message that only talks.
    pub calls: Vec<ToolCall>,
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The message inside a whole chat-completions response (`choices[0].message`), or the value
/// itself. An Anthropic response already is the message.
fn message_of(value: &Value) -> Result<&Map<String, Value>, FormatError> {
    let inner = value
        .get("choices")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("message"))
        .unwrap_or(value);
    inner
        .as_object()
        .ok_or_else(|| FormatError::NotAnObject(kind(inner)))
}

fn has_tool_use_blocks(content: Option<&Value>) -> bool {
    match content {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use")),
        _ => false,
    }
}

fn detect_object(msg: &Map<String, Value>) -> Option<Format> {
    match msg.get("tool_calls") {
        // `tool_calls` with a value is the OpenAI shape, whatever `content` holds.
        Some(v) if !v.is_null() => return Some(Format::OpenAi),
        // `"tool_calls": null` is what some clients put on every message; `tool_use` blocks
        // then say it is an Anthropic message, and their absence leaves it OpenAI's.
        Some(_) if !has_tool_use_blocks(msg.get("content")) => return Some(Format::OpenAi),
        _ => {}
    }
    match msg.get("content") {
        Some(Value::Array(_)) => Some(Format::Anthropic),
        Some(Value::String(_)) | Some(Value::Null) => Some(Format::OpenAi),
        _ => None,
    }
}

/// The format of an assistant message: OpenAI/DeepSeek when it has a non-null `tool_calls`
/// (or plain text content), Anthropic when its `content` is an array of blocks. A
/// `"tool_calls": null` decides nothing when `content` holds `tool_use` blocks (Anthropic);
/// without them the message stays OpenAI's. `None` when neither fits.
///
/// ```
/// use dsh_formats::{Format, detect};
/// use serde_json::json;
/// assert_eq!(detect(&json!({"role": "assistant", "tool_calls": []})), Some(Format::OpenAi));
/// assert_eq!(detect(&json!({"role": "assistant", "content": [{"type": "tool_use"}]})), Some(Format::Anthropic));
/// assert_eq!(
///     detect(&json!({"role": "assistant", "tool_calls": null, "content": [{"type": "tool_use"}]})),
///     Some(Format::Anthropic)
/// );
/// assert_eq!(detect(&json!({"role": "assistant", "tool_calls": null, "content": null})), Some(Format::OpenAi));
/// assert_eq!(detect(&json!({"hello": 1})), None);
/// ```
pub fn detect(value: &Value) -> Option<Format> {
    message_of(value).ok().and_then(detect_object)
}

/// Parses one line of a transcript (one assistant message, in either format).
///
/// ```
/// use dsh_formats::{Format, FormatError, parse_line};
/// let m = parse_line(r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"glob","input":{"pattern":"*.rs"}}]}"#).unwrap();
/// assert_eq!((m.format, m.calls.len()), (Format::Anthropic, 1));
/// assert!(matches!(parse_line("{oops"), Err(FormatError::NotJson(_))));
/// assert_eq!(
///     parse_line("[1,2").unwrap_err().to_string(),
///     "not JSON: EOF while parsing a list at column 4"
/// );
/// ```
pub fn parse_line(line: &str) -> Result<ParsedMessage, FormatError> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| FormatError::NotJson(at_column(&e)))?;
    parse_message(&value)
}

/// serde_json's message with the position as a column of the line (`expected value at column
/// 3`): the line number it counts is always 1 for one line of a transcript, and would be
/// mistaken for the transcript's.
fn at_column(e: &serde_json::Error) -> String {
    let full = e.to_string();
    if e.line() == 1 {
        let position = format!(" at line 1 column {}", e.column());
        if let Some(bare) = full.strip_suffix(&position) {
            return format!("{bare} at column {}", e.column());
        }
    }
    full
}

/// Parses an assistant message (or a whole chat-completions response, whose
/// `choices[0].message` is taken).
///
/// A tool call with a problem is still returned, so the pipeline answers it: OpenAI
/// `arguments` that are not JSON become [`Arguments::Malformed`] (`TOOL_INPUT_ERROR`); a missing
/// name becomes the empty name (`UNKNOWN_TOOL`); a missing id becomes the empty id (the
/// scheduler assigns a fresh one). Missing arguments or `input` are `{}`, as an empty OpenAI
/// argument string is.
///
/// ```
/// use dsh_core::Arguments;
/// use dsh_formats::parse_message;
/// use serde_json::json;
/// let m = parse_message(&json!({"role": "assistant", "tool_calls": [
///     {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{not json"}}
/// ]})).unwrap();
/// assert!(matches!(m.calls[0].arguments, Arguments::Malformed { .. }));
/// ```
pub fn parse_message(value: &Value) -> Result<ParsedMessage, FormatError> {
    let msg = message_of(value)?;
    match msg.get("role") {
        None => {}
        Some(Value::String(r)) if r == "assistant" => {}
        Some(Value::String(r)) => return Err(FormatError::NotAssistant(r.clone())),
        Some(other) => return Err(FormatError::NotAssistant(other.to_string())),
    }
    match detect_object(msg) {
        Some(Format::OpenAi) => Ok(ParsedMessage {
            format: Format::OpenAi,
            calls: openai_calls(msg)?,
        }),
        Some(Format::Anthropic) => Ok(ParsedMessage {
            format: Format::Anthropic,
            calls: anthropic_calls(msg),
        }),
        None => match msg.get("content") {
            Some(_) => Err(FormatError::BadField {
                field: "content",
                expected: "a string, null, or an array of content blocks",
            }),
            None => Err(FormatError::Unrecognized),
        },
    }
}

fn text_field(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn openai_calls(msg: &Map<String, Value>) -> Result<Vec<ToolCall>, FormatError> {
    let entries = match msg.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(FormatError::BadField {
                field: "tool_calls",
                expected: "an array",
            });
        }
    };
    Ok(entries
        .iter()
        .map(|entry| {
            let function = entry.get("function");
            let arguments = match function.and_then(|f| f.get("arguments")) {
                Some(Value::String(raw)) => Arguments::parse(raw),
                None | Some(Value::Null) => Arguments::Json(empty_object()),
                // Some OpenAI-compatible servers send the object itself.
                Some(other) => Arguments::from_value(other.clone()),
            };
            ToolCall {
                call_id: text_field(entry.get("id")),
                name: text_field(function.and_then(|f| f.get("name"))),
                arguments,
            }
        })
        .collect())
}

fn anthropic_calls(msg: &Map<String, Value>) -> Vec<ToolCall> {
    let Some(Value::Array(blocks)) = msg.get("content") else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .map(|b| ToolCall {
            call_id: text_field(b.get("id")),
            name: text_field(b.get("name")),
            arguments: Arguments::from_value(match b.get("input") {
                None | Some(Value::Null) => empty_object(),
                Some(input) => input.clone(),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_whole_chat_completion_response_is_unwrapped() {
        let m = parse_message(
            &json!({"choices": [{"message": {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "glob", "arguments": "{}"}}
            ]}}]}),
        )
        .unwrap();
        assert_eq!(m.calls[0].call_id, "c1");
    }

    #[test]
    fn non_objects_and_other_roles_are_refused() {
        assert_eq!(
            parse_message(&json!([1])),
            Err(FormatError::NotAnObject("an array"))
        );
        assert_eq!(
            parse_message(&json!({"role": "user", "content": "hi"})),
            Err(FormatError::NotAssistant("user".into()))
        );
        assert_eq!(
            parse_message(&json!({"foo": 1})),
            Err(FormatError::Unrecognized)
        );
        assert!(matches!(
            parse_message(&json!({"tool_calls": {"id": 1}})),
            Err(FormatError::BadField { .. })
        ));
    }
}
