//! The one error type of this crate.

use crate::step::StepOutcome;
use dsh_session::SessionError;

/// Errors of the scheduler and the session facade.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SchedulerError {
    /// An event of the step could not be recorded. Calls whose `tool/call` could not be
    /// recorded were not executed; every call still has its result in `outcome`.
    #[error("the session log failed during step {}: {error}", outcome.step)]
    LogFailed {
        /// The first log failure.
        error: SessionError,
        /// The step's results, as far as they go.
        outcome: Box<StepOutcome>,
    },
    /// A pushed call's result whose `tool/call` or `tool/result` could not be recorded: the
    /// model must not see it as if it were in the log (a call whose `tool/call` failed was not
    /// run).
    #[error("the call's result could not be recorded: {error}")]
    CallNotRecorded {
        /// The log's failure.
        error: SessionError,
        /// The result as it was frozen.
        result: Box<dsh_core::FrozenResult>,
    },
    /// The session's actors are gone or did not answer.
    #[error("the session is unavailable: {0}")]
    Unavailable(String),
    /// The session is shutting down or shut down and takes no more steps (or the harness is,
    /// and opens no more sessions).
    #[error("the session is shut down")]
    ShutDown,
    /// A session with this id is open (and alive) in this harness already.
    #[error("session `{0}` is already open")]
    AlreadyOpen(String),
    /// Starting the session failed.
    #[error("could not start the session: {0}")]
    Spawn(String),
    /// A session id that cannot name a log (use 1-128 of `[A-Za-z0-9_.-]`, not starting with
    /// a dot).
    #[error("invalid session id `{0}`: use 1-128 of [A-Za-z0-9_.-], not starting with a dot")]
    InvalidSessionId(String),
    /// Opening or recovering the session's log failed.
    #[error("the session log could not be opened: {0}")]
    Log(SessionError),
}
