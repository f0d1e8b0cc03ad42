//! `ToolDefinition::finalize_content`: the last, pure, content-only invariant, run exactly
//! once per result of a known tool; then the result is frozen.
//!
//! The value was fixed by the snapshot and is not offered to it. A panic here replaces the
//! content with a `PIPELINE_ERROR` message (which is not finalized again).

use super::candidate::Candidate;
use super::panic;
use dsh_core::{ContentBlock, ErrorCode, FrozenResult, RegisteredTool, ToolError};
use std::panic::AssertUnwindSafe;

pub(super) fn freeze(
    call_id: &str,
    tool_name: &str,
    tool: Option<&RegisteredTool>,
    snapshot: Candidate,
) -> FrozenResult {
    let Candidate {
        value,
        content,
        error,
        meta,
        contexts: _,
    } = snapshot;
    let Some(tool) = tool else {
        return FrozenResult::freeze(call_id, tool_name, content, error, meta, value);
    };
    let definition = tool.definition();
    match std::panic::catch_unwind(AssertUnwindSafe(|| definition.finalize_content(content))) {
        Ok(content) => FrozenResult::freeze(call_id, tool_name, content, error, meta, value),
        Err(payload) => {
            let message = format!(
                "finalize_content of `{tool_name}` panicked: {}",
                panic::message(payload.as_ref())
            );
            tracing::error!(tool = tool_name, "finalize_content panicked");
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
