//! `tools/pre-execute`: the policy waterfall.
//!
//! The input is validated against the schema first; then each handler, in registration order,
//! sees the input and the decision so far. The decision only tightens (allow → ask → deny) and
//! the first deny ends the waterfall. A handler's rewrite is validated again before the next
//! handler sees it. A handler that errors or panics ends the call with `PIPELINE_ERROR`.

use super::Pipeline;
use super::candidate::Candidate;
use super::panic;
use dsh_core::{ErrorCode, PreExecuteContext, PreToolDecision, RegisteredTool, ToolExecutionInput};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;

pub(super) async fn run(
    pipeline: &Pipeline,
    tool: &RegisteredTool,
    input: &ToolExecutionInput,
    mut arguments: Value,
) -> Result<(Value, PreToolDecision), Candidate> {
    tool.validate_input(&arguments).map_err(|why| {
        Candidate::failed(
            ErrorCode::ToolInputError,
            format!(
                "the arguments do not match the input schema of `{}`: {why}",
                input.name
            ),
        )
    })?;
    let mut decision = PreToolDecision::Allow;
    for handler in pipeline.hooks.pre_execute_handlers() {
        let ctx = PreExecuteContext {
            call_id: &input.call_id,
            agent: &input.agent,
            parent: input.parent.as_deref(),
            arguments: &arguments,
            decision: &decision,
            tool: tool.definition().as_ref(),
        };
        let answer = AssertUnwindSafe(handler.pre_execute(&ctx))
            .catch_unwind()
            .await;
        let outcome = match answer {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                return Err(Candidate::failed(
                    ErrorCode::PipelineError,
                    format!("pre-execute handler `{}` failed: {e}", handler.name()),
                ));
            }
            Err(payload) => {
                tracing::error!(handler = handler.name(), "pre-execute handler panicked");
                return Err(Candidate::failed(
                    ErrorCode::PipelineError,
                    format!(
                        "pre-execute handler `{}` panicked: {}",
                        handler.name(),
                        panic::message(payload.as_ref())
                    ),
                ));
            }
        };
        if let Some(new_arguments) = outcome.rewrite {
            tool.validate_input(&new_arguments).map_err(|why| {
                Candidate::failed(
                    ErrorCode::ToolInputError,
                    format!(
                        "pre-execute handler `{}` rewrote the arguments into ones that do not match the input schema: {why}",
                        handler.name()
                    ),
                )
            })?;
            arguments = new_arguments;
        }
        if let Some(next) = outcome.decision {
            decision = decision.tighten(next);
        }
        if let PreToolDecision::Deny(reason) = &decision {
            return Err(Candidate::failed(ErrorCode::Denied, reason.clone()));
        }
    }
    Ok((arguments, decision))
}
