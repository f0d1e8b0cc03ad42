//! `ToolDefinition::finalize_content`: the last, pure, content-only invariant, run at most
//! once per call (exactly once for every call whose result it could be asked about); then the
//! result is frozen.
//!
//! The value was fixed by the snapshot and is not offered to it. It runs on the pipeline's
//! user-code pool under a deadline ([`super::Pipeline::freeze`]). What it returns is bounded
//! again (size, image checks) as the snapshot was. When it panics, does not return in time, or
//! cannot be run (every user-code thread stuck), the result is `PIPELINE_ERROR` with a message
//! saying so, not finalized (it is never called twice for one call); a cancelled call's result
//! stays `ABORTED*` (an interrupt stays an interrupt), its message unfinalized.

use super::PipelineConfig;
use super::candidate::Candidate;
use super::normalize;
use dsh_core::pool::PoolError;
use dsh_core::{ContentBlock, ErrorCode, FrozenResult, ToolError};
use std::time::Duration;

/// What became of `finalize_content` for one result.
pub(super) enum Finalized {
    /// It returned this content.
    Content(Vec<ContentBlock>),
    /// It failed: why, for the model.
    Failed(String),
    /// It was already called for this call (the result is frozen as it is).
    AlreadyCalled,
    /// No such tool (nothing to finalize).
    NoTool,
}

impl Finalized {
    pub(super) fn from_pool(
        outcome: Result<Vec<ContentBlock>, PoolError>,
        tool_name: &str,
        deadline: Duration,
    ) -> Finalized {
        let why = match outcome {
            Ok(content) => return Finalized::Content(content),
            Err(PoolError::Panicked(message)) => format!("panicked: {message}"),
            Err(PoolError::TimedOut { started: true }) => format!(
                "did not return within {} ms; the pipeline stopped waiting",
                deadline.as_millis()
            ),
            Err(PoolError::TimedOut { started: false }) => format!(
                "could not start within {} ms: every thread for user code was busy",
                deadline.as_millis()
            ),
            Err(PoolError::Full { stuck, .. }) => format!(
                "was not run: every thread for user code is stuck ({})",
                stuck.join("; ")
            ),
            Err(e @ PoolError::Unavailable(_)) => format!("could not be run: {e}"),
        };
        let message = format!("finalize_content of `{tool_name}` {why}");
        tracing::error!(tool = tool_name, reason = %message, "finalize_content failed");
        Finalized::Failed(message)
    }
}

pub(super) fn freeze(
    config: &PipelineConfig,
    call_id: &str,
    tool_name: &str,
    snapshot: Candidate,
    finalized: Finalized,
) -> FrozenResult {
    let Candidate {
        value,
        content,
        error,
        mut meta,
        contexts: _,
    } = snapshot;
    match finalized {
        Finalized::NoTool | Finalized::AlreadyCalled => {
            FrozenResult::freeze(call_id, tool_name, content, error, meta, value)
        }
        Finalized::Content(mut content) => {
            normalize::bound_finalized(config, &mut content, &mut meta);
            FrozenResult::freeze(call_id, tool_name, content, error, meta, value)
        }
        Finalized::Failed(message) => {
            if error.as_ref().is_some_and(|e| e.code.is_abort()) {
                return FrozenResult::freeze(call_id, tool_name, content, error, meta, None);
            }
            FrozenResult::freeze(
                call_id,
                tool_name,
                vec![ContentBlock::text(message.clone())],
                Some(ToolError::new(ErrorCode::PipelineError, message)),
                meta,
                None,
            )
        }
    }
}
