//! The stable error codes of a tool result, and this crate's own error type.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The `error.code` of a tool result. The strings are fixed by SPEC.md and read by
/// outside checks: never rename one.
///
/// ```
/// use dsh_core::ErrorCode;
/// assert_eq!(ErrorCode::ToolTimeout.as_str(), "TOOL_TIMEOUT");
/// assert_eq!("DENIED".parse::<ErrorCode>(), Ok(ErrorCode::Denied));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// Cancelled before the tool's body started.
    #[serde(rename = "ABORTED_BEFORE_DISPATCH")]
    AbortedBeforeDispatch,
    /// Cancelled after the body started (even if it then succeeded).
    #[serde(rename = "ABORTED")]
    Aborted,
    /// The tool's deadline passed.
    #[serde(rename = "TOOL_TIMEOUT")]
    ToolTimeout,
    /// The body's value did not match the output schema.
    #[serde(rename = "TOOL_OUTPUT_ERROR")]
    ToolOutputError,
    /// The arguments were not JSON or did not match the input schema.
    #[serde(rename = "TOOL_INPUT_ERROR")]
    ToolInputError,
    /// No tool of that name is registered.
    #[serde(rename = "UNKNOWN_TOOL")]
    UnknownTool,
    /// Policy refused the call (a pre-execute handler, approval, or a guard).
    #[serde(rename = "DENIED")]
    Denied,
    /// A post-execute handler blocked the result.
    #[serde(rename = "BLOCKED")]
    Blocked,
    /// The body failed or panicked.
    #[serde(rename = "TOOL_ERROR")]
    ToolError,
    /// A hook, a wrapper or the snapshot failed.
    #[serde(rename = "PIPELINE_ERROR")]
    PipelineError,
}

impl ErrorCode {
    /// Every code, in SPEC.md's order.
    pub const ALL: [ErrorCode; 10] = [
        ErrorCode::AbortedBeforeDispatch,
        ErrorCode::Aborted,
        ErrorCode::ToolTimeout,
        ErrorCode::ToolOutputError,
        ErrorCode::ToolInputError,
        ErrorCode::UnknownTool,
        ErrorCode::Denied,
        ErrorCode::Blocked,
        ErrorCode::ToolError,
        ErrorCode::PipelineError,
    ];

    /// The stable string of this code.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::AbortedBeforeDispatch => "ABORTED_BEFORE_DISPATCH",
            ErrorCode::Aborted => "ABORTED",
            ErrorCode::ToolTimeout => "TOOL_TIMEOUT",
            ErrorCode::ToolOutputError => "TOOL_OUTPUT_ERROR",
            ErrorCode::ToolInputError => "TOOL_INPUT_ERROR",
            ErrorCode::UnknownTool => "UNKNOWN_TOOL",
            ErrorCode::Denied => "DENIED",
            ErrorCode::Blocked => "BLOCKED",
            ErrorCode::ToolError => "TOOL_ERROR",
            ErrorCode::PipelineError => "PIPELINE_ERROR",
        }
    }

    /// True for the two interrupt codes. An interrupt is never a denial.
    pub const fn is_abort(self) -> bool {
        matches!(self, ErrorCode::Aborted | ErrorCode::AbortedBeforeDispatch)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the stable error codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code `{0}`")]
pub struct UnknownErrorCode(pub String);

impl FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorCode::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownErrorCode(s.to_string()))
    }
}

/// Errors of `dsh-core` itself (building a registry, reading events).
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// Two definitions share a name.
    #[error("a tool named `{0}` is already registered")]
    DuplicateTool(String),
    /// A tool name that cannot be used (empty, or with characters models reject).
    #[error("invalid tool name `{0}`: use 1-128 of [A-Za-z0-9_.-]")]
    InvalidToolName(String),
    /// A definition's schema does not compile.
    #[error("the {which} schema of tool `{tool}` is invalid: {reason}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// `input` or `output`.
        which: &'static str,
        /// What the schema compiler said.
        reason: String,
    },
    /// A session event line that does not have the envelope of SPEC.md.
    #[error("malformed session event: {0}")]
    MalformedEvent(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_to_the_spec_strings() {
        let spec = [
            "ABORTED_BEFORE_DISPATCH",
            "ABORTED",
            "TOOL_TIMEOUT",
            "TOOL_OUTPUT_ERROR",
            "TOOL_INPUT_ERROR",
            "UNKNOWN_TOOL",
            "DENIED",
            "BLOCKED",
            "TOOL_ERROR",
            "PIPELINE_ERROR",
        ];
        for (code, s) in ErrorCode::ALL.iter().zip(spec) {
            assert_eq!(code.as_str(), s);
            assert_eq!(serde_json::to_value(code).unwrap(), serde_json::json!(s));
            assert_eq!(s.parse::<ErrorCode>().unwrap(), *code);
        }
        assert!("NOPE".parse::<ErrorCode>().is_err());
    }
}
