//! The one error type of this crate.

/// Why a line could not be read as an assistant message.
///
/// Problems inside a tool call (arguments that are not JSON, a missing name or id) are not
/// errors here: the call is still returned, so that it gets its matching error result in the
/// pipeline and the model's block never goes unanswered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The line is not JSON.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// The JSON is not an object.
    #[error("expected a JSON object (an assistant message), found {0}")]
    NotAnObject(&'static str),
    /// The message is someone else's.
    #[error("expected an assistant message, found role `{0}`")]
    NotAssistant(String),
    /// Neither shape fits.
    #[error(
        "not an assistant message in a known format: expected `tool_calls` (OpenAI/DeepSeek) or `content` blocks (Anthropic)"
    )]
    Unrecognized,
    /// `tool_calls` or `content` has the wrong type.
    #[error("`{field}` must be {expected}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A format name that is not known.
    #[error("unknown format `{0}` (use openai or anthropic)")]
    UnknownFormat(String),
}
