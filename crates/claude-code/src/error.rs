//! The one error type of this crate.

/// What can go wrong building the profile or reading a settings file.
#[derive(Debug, thiserror::Error)]
pub enum ClaudeCodeError {
    /// A built-in tool an adapter stands on is not registered.
    #[error("the claude-code profile needs the built-in tool `{0}`, which is not there")]
    MissingBuiltin(String),
    /// A settings file is not JSON, or its `permissions` block is not in Claude Code's shape.
    #[error("the Claude Code settings are invalid: {0}")]
    Invalid(String),
}
