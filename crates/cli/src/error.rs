//! The one error type of this crate, and the exit code each error ends the process with.

use std::path::{Path, PathBuf};

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: some transcript lines were bad (`run`), or the log violates an invariant (`check`).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: bad usage (clap uses the same code for its own usage errors).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a file could not be read or written, or the session log failed.
pub const EXIT_IO: u8 = 3;

/// Why a command could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A bad argument or configuration.
    #[error("{0}")]
    Usage(String),
    /// A file operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`read the transcript`).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The session log could not be opened, written or read.
    #[error("{}: {message}", path.display())]
    Log {
        /// The log.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The pipeline could not start.
    #[error("could not start the pipeline: {0}")]
    Start(String),
}

impl CliError {
    /// An I/O error with what was being done.
    pub fn io(action: &'static str, path: &Path, source: std::io::Error) -> CliError {
        CliError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// A session log error.
    pub fn log(path: &Path, message: impl std::fmt::Display) -> CliError {
        CliError::Log {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }

    /// The exit code this error ends the process with.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Io { .. } | CliError::Log { .. } | CliError::Start(_) => EXIT_IO,
        }
    }
}
