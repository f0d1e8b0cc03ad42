//! # dsh-formats
//!
//! The edge between model wire formats and dsh's neutral types. Two chat shapes are spoken:
//!
//! - **OpenAI/DeepSeek** ([`Format::OpenAi`]): the assistant message carries `tool_calls`, each
//!   `{"id", "type": "function", "function": {"name", "arguments"}}` with `arguments` a JSON
//!   *string*; results go back as one `{"role": "tool", "tool_call_id", "content"}` message each.
//! - **Anthropic** ([`Format::Anthropic`]): the assistant message's `content` holds
//!   `{"type": "tool_use", "id", "name", "input"}` blocks with `input` an object; results go
//!   back in one user message of `tool_result` blocks.
//!
//! [`parse_line`] / [`parse_message`] turn one assistant message into [`dsh_core::ToolCall`]s
//! (the format is detected per message); [`ToolCallStream`] does the same for a streamed
//! response, handing over each call the moment its block is complete, and [`StreamFeeder`]
//! pushes each of them into a running step (an open step of `dsh-scheduler`) right then. [`render_tools`] renders
//! the tool list a request carries, in either provider's shape. [`render_step`] turns a
//! [`dsh_core::transcript::TranscriptStep`] back into the messages of that format. Rendering
//! works from the neutral transcript only, so a live run (see [`step_from_run`]) and a replay
//! of its log render byte for byte the same.
//!
//! ## How a step renders
//!
//! | part | OpenAI/DeepSeek | Anthropic |
//! | --- | --- | --- |
//! | the calls | `{"role":"assistant","content":null,"tool_calls":[{"id","type":"function","function":{"name","arguments"}}]}` | `{"role":"assistant","content":[{"type":"tool_use","id","name","input"}]}` |
//! | arguments | the logged value re-serialized as a JSON string; a logged *string* is the raw text of arguments that were not JSON and is emitted as is | the logged value as `input` |
//! | each result | `{"role":"tool","tool_call_id","content"}`, in call order | a `tool_result` block `{"type":"tool_result","tool_use_id","content":[..]}`, in call order |
//! | text content | the text blocks joined by `\n` | `{"type":"text","text"}` blocks (empty ones dropped: the API refuses them) |
//! | image content | the text `[image omitted: MEDIA_TYPE]` in its place (tool messages carry text only) | `{"type":"image","source":{"type":"base64","media_type","data"}}` |
//! | an error result | content `"CODE: " + text` (for example `DENIED: outside the workspace`; a text that already starts with `"CODE: "` is not prefixed again) | `"is_error": true`, and the first text block starts with `"CODE: "` |
//! | deferred user messages | one `{"role":"user","content"}` each, after the tool messages | `text` blocks after the `tool_result` blocks, in the same single user message |
//!
//! An Anthropic step ends with exactly one user message (tool results, then deferred text).
//! A step without calls renders nothing. The assistant's own text is not in the session log,
//! so it is not rendered either (`content: null`, or only the `tool_use` blocks): what is
//! rendered is exactly what a replay can rebuild.
//!
//! ```
//! use dsh_core::{ErrorCode, FrozenResult, ToolError};
//! use dsh_formats::{Format, parse_line, render_step, step_from_run};
//!
//! let line = r#"{"role":"assistant","content":null,"tool_calls":[
//!     {"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]}"#;
//! let parsed = parse_line(line).unwrap();
//! assert_eq!(parsed.format, Format::OpenAi);
//! assert_eq!(parsed.calls[0].name, "read_file");
//!
//! // ... run the calls through the pipeline, then render what the model sees next:
//! let result = FrozenResult::error("call_1", "read_file", ToolError::new(ErrorCode::Denied, "outside the workspace"));
//! let step = step_from_run(1, &parsed.calls, &[result], &[]);
//! let messages = render_step(Format::OpenAi, &step);
//! assert_eq!(messages[1]["role"], "tool");
//! assert_eq!(messages[1]["content"], "DENIED: outside the workspace");
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod claude_code;
mod error;
mod feed;
mod live;
mod parse;
mod render;
mod stream;
mod tools;

pub use claude_code::{ClaudeCodeLine, ClaudeCodeSteps, is_claude_code_line};
pub use error::FormatError;
pub use feed::{CallSink, StreamFeeder};
pub use live::step_from_run;
pub use parse::{ParsedMessage, detect, parse_line, parse_message};
pub use render::{render_result_content, render_step, render_transcript};
pub use stream::{MAX_EVENT_LINE_BYTES, ToolCallStream};
pub use tools::{
    ToolSpec, check_tool_name, check_tool_schema, render_strict_tools, render_tools, tool_specs,
};

use std::fmt;
use std::str::FromStr;

/// A model wire format.
///
/// ```
/// use dsh_formats::Format;
/// assert_eq!("openai".parse::<Format>().unwrap(), Format::OpenAi);
/// assert_eq!("deepseek".parse::<Format>().unwrap(), Format::OpenAi);
/// assert_eq!(Format::Anthropic.to_string(), "anthropic");
/// assert!("xml".parse::<Format>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// OpenAI chat completions, and DeepSeek's identical shape.
    #[default]
    OpenAi,
    /// Anthropic messages.
    Anthropic,
}

impl Format {
    /// The name used on the command line and in messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::Anthropic => "anthropic",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "openai" | "deepseek" => Ok(Format::OpenAi),
            "anthropic" => Ok(Format::Anthropic),
            _ => Err(FormatError::UnknownFormat(s.to_string())),
        }
    }
}
