//! The one error type of this crate.

/// Errors of the session log. Clone, because one failed group commit answers many appends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// An I/O operation failed.
    #[error("session log I/O failed while {context}: {message}")]
    Io {
        /// What the writer was doing.
        context: String,
        /// The OS error.
        message: String,
    },
    /// A failure left the log in a state the writer cannot vouch for; reopen it to recover.
    #[error("the session log is unusable until it is reopened: {0}")]
    Poisoned(String),
    /// The writer actor is gone or did not answer.
    #[error("the session writer is unavailable: {0}")]
    Unavailable(String),
    /// Another writer holds the log (another process, or a session not yet gone).
    #[error("the session log {0} is in use by another writer")]
    InUse(String),
    /// Another writer held the log for the whole wait of [`crate::SessionLog::open_file_waiting`].
    #[error(
        "the session log {log} is in use by another writer (another dsh on the same log), still after waiting {waited_ms} ms"
    )]
    StillInUse {
        /// The log.
        log: String,
        /// How long opening waited.
        waited_ms: u128,
    },
    /// Another writer holds the session's lease (the PostgreSQL backend), and it did not end
    /// within the wait.
    #[error("the session {session} is in use by {owner}, lease until {until}")]
    Leased {
        /// The session.
        session: String,
        /// Who holds the lease (`pid PID on HOST`, or a fleet node's advertised address).
        owner: String,
        /// When the lease runs out unless renewed (UTC).
        until: String,
    },
    /// The writer was closed.
    #[error("the session log is closed")]
    Closed,
    /// A line in the middle of the log is not a valid event (not a torn tail).
    #[error("the session log is corrupt at line {line}: {reason}")]
    Corrupt {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is not a dsh log: its first line is neither a session event nor the torn start
    /// of one. Nothing was changed.
    #[error("this is not a dsh log: {0}")]
    NotALog(String),
    /// The writer refused an event dsh's own reader could not read back identical (nested too
    /// deep, longer than the largest line, past the largest seq or step). Nothing of it was
    /// written.
    #[error("the session log refuses the event: {0}")]
    Refused(String),
    /// An invariant of SPEC.md's log section does not hold.
    #[error("invariant violated at seq {seq}: {message}")]
    Invariant {
        /// The seq of the first offending event (0 when not tied to one event).
        seq: u64,
        /// Which invariant, and how.
        message: String,
    },
}

impl SessionError {
    /// An I/O error with context.
    pub fn io(context: impl Into<String>, err: &std::io::Error) -> SessionError {
        SessionError::Io {
            context: context.into(),
            message: err.to_string(),
        }
    }
}
