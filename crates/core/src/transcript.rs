//! The model-visible transcript, in no particular model's format.
//!
//! The session log rebuilds it (`dsh-session`'s replay), a live run builds it from step
//! outcomes, and `dsh-formats` renders it into the OpenAI/DeepSeek or Anthropic shapes. Both
//! sides meeting in this one type is what makes "replay equals live" a plain `==`.

use crate::content::ContentBlock;
use crate::result::{FrozenResult, ToolError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One tool-call block of the assistant's message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptCall {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as logged (raw text as a JSON string when they were not JSON).
    pub arguments: Value,
    /// The exact text the model sent, when the log kept it (`argumentsText`): what a replay
    /// hands back to a provider that takes arguments as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_text: Option<String>,
}

/// One tool result, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptResult {
    /// The call it answers.
    pub call_id: String,
    /// The presentation content.
    pub content: Vec<ContentBlock>,
    /// The error, for an error result.
    pub error: Option<ToolError>,
}

impl TranscriptResult {
    /// The model-visible part of a frozen result.
    ///
    /// ```
    /// use dsh_core::{ErrorCode, FrozenResult, ToolError, transcript::TranscriptResult};
    /// let r = FrozenResult::error("c1", "t", ToolError::new(ErrorCode::Denied, "no"));
    /// assert_eq!(TranscriptResult::from_frozen(&r).call_id, "c1");
    /// ```
    pub fn from_frozen(result: &FrozenResult) -> TranscriptResult {
        TranscriptResult {
            call_id: result.call_id().to_string(),
            content: result.content().to_vec(),
            error: result.error_info().cloned(),
        }
    }
}

/// One step: the assistant's tool calls, their results in call order, then the deferred
/// user messages.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TranscriptStep {
    /// The step's number.
    pub step: u64,
    /// The calls, in block order.
    pub calls: Vec<TranscriptCall>,
    /// One result per call, in call order.
    pub results: Vec<TranscriptResult>,
    /// Deferred context (`user/message`), first in first out.
    pub user_messages: Vec<String>,
}

/// Every step of a session.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Transcript {
    /// The steps, in order.
    pub steps: Vec<TranscriptStep>,
}
