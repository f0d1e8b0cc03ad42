//! The crate's one error type.

use std::path::PathBuf;

/// What can go wrong setting up the shell tool (a call's own failures are results, not
/// errors).
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// The workspace could not be opened.
    #[error("the workspace {path} cannot be used: {source}")]
    Workspace {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The spill folder could not be created.
    #[error("the spill folder {path} cannot be created: {source}")]
    SpillDir {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A sandbox mode name that is not one of `read-only`, `workspace-write`, `full`.
    #[error("unknown shell sandbox mode `{0}` (read-only, workspace-write or full)")]
    UnknownMode(String),
}
