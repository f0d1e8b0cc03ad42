//! The candidate result: what the chain holds between dispatch and the snapshot.

use dsh_core::{ContentBlock, ErrorCode, ToolError};
use serde_json::{Map, Value};

/// A result not yet frozen.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// The canonical value (successes only).
    pub value: Option<Value>,
    /// The presentation.
    pub content: Vec<ContentBlock>,
    /// The error, for an error result.
    pub error: Option<ToolError>,
    /// Persisted metadata.
    pub meta: Option<Map<String, Value>>,
    /// `additionalContexts` gathered by post-execute.
    pub contexts: Vec<String>,
}

impl Candidate {
    /// An error result whose content is the message.
    pub fn failed(code: ErrorCode, message: impl Into<String>) -> Candidate {
        let message = message.into();
        Candidate {
            value: None,
            content: vec![ContentBlock::text(message.clone())],
            error: Some(ToolError::new(code, message)),
            meta: None,
            contexts: Vec::new(),
        }
    }

    /// A success.
    pub fn success(value: Value, content: Vec<ContentBlock>) -> Candidate {
        Candidate {
            value: Some(value),
            content,
            error: None,
            meta: None,
            contexts: Vec::new(),
        }
    }
}
