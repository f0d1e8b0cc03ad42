//! The neutral transcript out, in a model's shape.
//!
//! The rules are in the crate documentation ("How a step renders").

use crate::Format;
use dsh_core::content::ContentBlock;
use dsh_core::transcript::{Transcript, TranscriptCall, TranscriptResult, TranscriptStep};
use serde_json::{Value, json};

/// Renders a whole transcript: every step's messages, in order.
///
/// ```
/// use dsh_core::transcript::Transcript;
/// use dsh_formats::{Format, render_transcript};
/// assert!(render_transcript(Format::OpenAi, &Transcript::default()).is_empty());
/// ```
pub fn render_transcript(format: Format, transcript: &Transcript) -> Vec<Value> {
    transcript
        .steps
        .iter()
        .flat_map(|s| render_step(format, s))
        .collect()
}

/// Renders one step: the assistant message with its calls, then what the model sees back.
///
/// ```
/// use dsh_core::{ContentBlock, ErrorCode, ToolError};
/// use dsh_core::transcript::{TranscriptCall, TranscriptResult, TranscriptStep};
/// use dsh_formats::{Format, render_step};
/// use serde_json::json;
///
/// let step = TranscriptStep {
///     step: 1,
///     calls: vec![TranscriptCall { call_id: "t1".into(), name: "write_file".into(), arguments: json!({"path": "/etc/x"}), arguments_text: None }],
///     results: vec![TranscriptResult {
///         call_id: "t1".into(),
///         content: vec![ContentBlock::text("outside the workspace")],
///         error: Some(ToolError::new(ErrorCode::Denied, "outside the workspace")),
///     }],
///     user_messages: vec!["note: the workspace is /w".into()],
/// };
/// let m = render_step(Format::Anthropic, &step);
/// assert_eq!(m.len(), 2);
/// assert_eq!(m[1]["content"][0]["is_error"], true);
/// assert_eq!(m[1]["content"][0]["content"][0]["text"], "DENIED: outside the workspace");
/// assert_eq!(m[1]["content"][1], json!({"type": "text", "text": "note: the workspace is /w"}));
/// ```
pub fn render_step(format: Format, step: &TranscriptStep) -> Vec<Value> {
    if step.calls.is_empty() && step.results.is_empty() && step.user_messages.is_empty() {
        return Vec::new();
    }
    match format {
        Format::OpenAi => openai_step(step),
        Format::Anthropic => anthropic_step(step),
    }
}

/// The `content` of one result as the format carries it: a string (OpenAI/DeepSeek) or an
/// array of blocks (Anthropic).
///
/// ```
/// use dsh_core::ContentBlock;
/// use dsh_core::transcript::TranscriptResult;
/// use dsh_formats::{Format, render_result_content};
/// let r = TranscriptResult {
///     call_id: "c".into(),
///     content: vec![ContentBlock::text("a"), ContentBlock::Image { media_type: "image/png".into(), data: "AA==".into() }],
///     error: None,
/// };
/// assert_eq!(render_result_content(Format::OpenAi, &r), "a\n[image omitted: image/png]");
/// assert_eq!(render_result_content(Format::Anthropic, &r)[1]["source"]["media_type"], "image/png");
/// ```
pub fn render_result_content(format: Format, result: &TranscriptResult) -> Value {
    match format {
        Format::OpenAi => Value::String(openai_content(result)),
        Format::Anthropic => Value::Array(anthropic_content(result)),
    }
}

fn openai_arguments(call: &TranscriptCall) -> String {
    if let Some(text) = &call.arguments_text {
        return text.clone();
    }
    match &call.arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn openai_content(result: &TranscriptResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::Image { media_type, .. } => format!("[image omitted: {media_type}]"),
        })
        .collect();
    let text = parts.join("\n");
    match &result.error {
        Some(e) if text.is_empty() => e.code.as_str().to_string(),
        Some(e) => with_code(e.code.as_str(), &text),
        None => text,
    }
}

/// `CODE: text`, unless the text already starts so (code mode's report does): never
/// "DENIED: DENIED: ...".
fn with_code(code: &str, text: &str) -> String {
    match text.strip_prefix(code) {
        Some(rest) if rest.starts_with(": ") => text.to_string(),
        _ => format!("{code}: {text}"),
    }
}

fn openai_step(step: &TranscriptStep) -> Vec<Value> {
    let mut out = Vec::with_capacity(1 + step.results.len() + step.user_messages.len());
    if !step.calls.is_empty() {
        let calls: Vec<Value> = step
            .calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": openai_arguments(c)},
                })
            })
            .collect();
        out.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
    }
    for r in &step.results {
        out.push(json!({"role": "tool", "tool_call_id": r.call_id, "content": openai_content(r)}));
    }
    for m in &step.user_messages {
        out.push(json!({"role": "user", "content": m}));
    }
    out
}

fn anthropic_block(block: &ContentBlock) -> Option<Value> {
    match block {
        ContentBlock::Text { text } if text.is_empty() => None,
        ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
        ContentBlock::Image { media_type, data } => Some(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        })),
    }
}

fn anthropic_content(result: &TranscriptResult) -> Vec<Value> {
    let mut blocks: Vec<Value> = result.content.iter().filter_map(anthropic_block).collect();
    if let Some(e) = &result.error {
        let code = e.code.as_str();
        match blocks
            .iter_mut()
            .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        {
            Some(first) => {
                let text = first["text"].as_str().unwrap_or_default();
                first["text"] = Value::String(with_code(code, text));
            }
            None => blocks.insert(0, json!({"type": "text", "text": code})),
        }
    }
    blocks
}

fn anthropic_step(step: &TranscriptStep) -> Vec<Value> {
    let mut out = Vec::with_capacity(2);
    if !step.calls.is_empty() {
        let uses: Vec<Value> = step
            .calls
            .iter()
            .map(|c| json!({"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments}))
            .collect();
        out.push(json!({"role": "assistant", "content": uses}));
    }
    let mut blocks: Vec<Value> = step
        .results
        .iter()
        .map(|r| {
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": r.call_id,
                "content": anthropic_content(r),
            });
            if r.error.is_some() {
                block["is_error"] = Value::Bool(true);
            }
            block
        })
        .collect();
    blocks.extend(
        step.user_messages
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| json!({"type": "text", "text": m})),
    );
    if !blocks.is_empty() {
        out.push(json!({"role": "user", "content": blocks}));
    }
    out
}
