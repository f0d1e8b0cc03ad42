//! Results: the error a result may carry, and the frozen result every call ends with.

use crate::content::{ContentBlock, joined_text};
use crate::error::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The `error` of a tool result: a stable code and a message for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong, in one clear sentence.
    pub message: String,
}

impl ToolError {
    /// A new error.
    ///
    /// ```
    /// use dsh_core::{ErrorCode, ToolError};
    /// let e = ToolError::new(ErrorCode::Denied, "no");
    /// assert_eq!(e.to_string(), "DENIED: no");
    /// ```
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ToolError {
        ToolError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FrozenInner {
    call_id: String,
    tool: String,
    content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ToolError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meta: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<Value>,
    /// How many of the last content blocks are the call's `additionalContexts` (put in its own
    /// result where no later message exists: SPEC.md's "Deferred context without a next
    /// message").
    #[serde(default, skip_serializing_if = "is_zero")]
    context_blocks: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The frozen, authoritative result of one call: what `tools/result` observers see and what
/// the `tool/result` event is made from.
///
/// It is immutable (no setters; clones share one allocation) and round-trips through JSON
/// without loss. The canonical `value` is kept for in-process readers (code mode gives it to
/// the script) but never reaches the session log: only content, error and meta do.
///
/// ```
/// use dsh_core::{ContentBlock, ErrorCode, FrozenResult, ToolError};
/// let r = FrozenResult::error("c1", "read_file", ToolError::new(ErrorCode::Denied, "outside"));
/// assert!(r.is_error());
/// assert_eq!(r.text(), "outside");
/// let json = serde_json::to_string(&r).unwrap();
/// assert_eq!(serde_json::from_str::<FrozenResult>(&json).unwrap(), r);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FrozenResult {
    inner: Arc<FrozenInner>,
}

impl FrozenResult {
    /// Freezes a result. Used by the pipeline's normalization stage; everything later only reads.
    pub fn freeze(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        content: Vec<ContentBlock>,
        error: Option<ToolError>,
        meta: Option<Map<String, Value>>,
        value: Option<Value>,
    ) -> FrozenResult {
        FrozenResult {
            inner: Arc::new(FrozenInner {
                call_id: call_id.into(),
                tool: tool.into(),
                content,
                error,
                meta,
                value,
                context_blocks: 0,
            }),
        }
    }

    /// This result with `contexts` (a call's `additionalContexts`) as its last text blocks,
    /// told apart from the tool's own content by [`FrozenResult::contexts`].
    ///
    /// ```
    /// use dsh_core::{ContentBlock, FrozenResult};
    /// let r = FrozenResult::freeze("c1", "t", vec![ContentBlock::text("out")], None, None, None);
    /// let r = r.with_contexts(vec!["note".into()]);
    /// assert_eq!(r.text(), "out\nnote");
    /// assert_eq!(r.contexts(), ["note"]);
    /// ```
    pub fn with_contexts(&self, contexts: Vec<String>) -> FrozenResult {
        let mut inner = (*self.inner).clone();
        inner.context_blocks += contexts.len();
        inner
            .content
            .extend(contexts.into_iter().map(ContentBlock::text));
        FrozenResult {
            inner: Arc::new(inner),
        }
    }

    /// The texts of the call's `additionalContexts` put in this result
    /// ([`FrozenResult::with_contexts`]), in order; empty for most results.
    pub fn contexts(&self) -> Vec<&str> {
        let content = &self.inner.content;
        let from = content.len().saturating_sub(self.inner.context_blocks);
        content[from..]
            .iter()
            .filter_map(ContentBlock::as_text)
            .collect()
    }

    /// An error result whose content is the error's message.
    pub fn error(call_id: impl Into<String>, tool: impl Into<String>, error: ToolError) -> Self {
        let content = vec![ContentBlock::text(error.message.clone())];
        FrozenResult::freeze(call_id, tool, content, Some(error), None, None)
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.inner.call_id
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.inner.tool
    }

    /// The presentation content.
    pub fn content(&self) -> &[ContentBlock] {
        &self.inner.content
    }

    /// The content's text blocks joined by newlines.
    pub fn text(&self) -> String {
        joined_text(&self.inner.content)
    }

    /// The error, for an error result.
    pub fn error_info(&self) -> Option<&ToolError> {
        self.inner.error.as_ref()
    }

    /// The error code, for an error result.
    pub fn code(&self) -> Option<ErrorCode> {
        self.inner.error.as_ref().map(|e| e.code)
    }

    /// True for an error result.
    pub fn is_error(&self) -> bool {
        self.inner.error.is_some()
    }

    /// Metadata that is persisted but not shown to the model.
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.inner.meta.as_ref()
    }

    /// The canonical value, private to the execution (never logged).
    pub fn value(&self) -> Option<&Value> {
        self.inner.value.as_ref()
    }
}

/// A deferred context message: an `additionalContexts` entry waiting for the end of its step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredMessage {
    /// The text injected as a `user/message`.
    pub content: String,
    /// The call whose post-execute handler added it.
    pub origin: String,
}
