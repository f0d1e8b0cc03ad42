//! This crate's error type.

/// Why `run_code` could not run a script at all (as opposed to a script that failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeModeError {
    /// The call came without the pipeline's sub-call dispatcher (a body called directly).
    #[error("run_code needs the pipeline's sub-call dispatcher: run it through a session")]
    NoDispatcher,
    /// The engine's thread could not be started.
    #[error("could not start the JavaScript engine's thread: {0}")]
    Spawn(String),
}
