//! The candidate result: what the chain holds between dispatch and the snapshot.

use dsh_core::{ContentBlock, ErrorCode, ToolError, ToolFailure};
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

    /// The error result of a failure: its content when it carries some, else its message.
    pub fn from_failure(failure: ToolFailure) -> Candidate {
        let mut candidate = match failure.content {
            Some(content) => Candidate {
                value: None,
                content,
                error: Some(ToolError::new(failure.code, failure.message)),
                meta: None,
                contexts: Vec::new(),
            },
            None => Candidate::failed(failure.code, failure.message),
        };
        candidate.meta = failure.meta;
        candidate
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
