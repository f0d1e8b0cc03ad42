//! The one error type of this crate.

/// Why a hooks file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CommandHooksError {
    /// The file could not be read.
    #[error("cannot read the hooks file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not JSON, or `hooks` is not in Claude Code's shape.
    #[error("the hooks settings are invalid: {0}")]
    Invalid(String),
    /// One matcher group or hook is invalid.
    #[error("hooks.{event}[{index}]: {reason}")]
    Entry {
        /// `PreToolUse` or `PostToolUse`.
        event: String,
        /// The matcher group's position in the event's list.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}
