//! This crate's error type.

/// Why `run_code` could not run a script at all (as opposed to a script that failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeModeError {
    /// The call came without the pipeline's sub-call dispatcher (a body called directly).
    #[error("run_code needs the pipeline's sub-call dispatcher: run it through a session")]
    NoDispatcher,
    /// No worker program is known: the embedding program neither called
    /// [`crate::worker_main_if_requested`] nor gave `RunCode` a [`crate::WorkerCommand`].
    #[error(
        "run_code has no worker program to run scripts in: the program must call \
         dsh_code_mode::worker_main_if_requested() first thing in main, or give RunCode a \
         WorkerCommand"
    )]
    NoWorker,
    /// The worker process could not be started.
    #[error("could not start the script's worker process: {0}")]
    Spawn(String),
}
