//! `tools/pre-execute`: the policy waterfall.
//!
//! The input is validated against the schema first; then each handler, in registration order,
//! sees the input and the decision so far. The decision only tightens (allow → ask → deny) and
//! the first deny ends the waterfall. A handler's rewrite is validated again before the next
//! handler sees it. A handler that errors or panics ends the call with `PIPELINE_ERROR`.
//!
//! **Policy judges the final input.** A handler that ran before a rewrite judged arguments the
//! body will not get. So when a handler changed the arguments, every handler up to the last one
//! that changed them is asked again, in order, about the final arguments (a verification pass,
//! with the decision so far): a deny there denies the call, an ask asks. In that pass a handler
//! may answer the same arguments again (a rewrite that settles, such as a path normalizer), but
//! one that changes them again means the handlers do not agree on one input: the call ends
//! `PIPELINE_ERROR` naming it, and the tool does not run. Whatever order the handlers were
//! registered in, the input that passes is one that every handler has seen and let through.
//! (Around-wrappers may not change the arguments at all: see `dispatch.rs`.)

use super::Pipeline;
use super::candidate::Candidate;
use super::panic;
use dsh_core::{
    ErrorCode, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, PreToolDecision,
    RegisteredTool, ToolExecutionInput,
};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// Asks one handler about `arguments`; its failure or panic ends the call.
async fn ask(
    handler: &Arc<dyn PreExecuteHandler>,
    tool: &RegisteredTool,
    input: &ToolExecutionInput,
    arguments: &Value,
    decision: &PreToolDecision,
) -> Result<PreExecuteOutcome, Candidate> {
    let ctx = PreExecuteContext {
        call_id: &input.call_id,
        agent: &input.agent,
        parent: input.parent.as_deref(),
        arguments,
        decision,
        tool: tool.definition().as_ref(),
    };
    match AssertUnwindSafe(handler.pre_execute(&ctx))
        .catch_unwind()
        .await
    {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(Candidate::failed(
            ErrorCode::PipelineError,
            format!("pre-execute handler `{}` failed: {e}", handler.name()),
        )),
        Err(payload) => {
            tracing::error!(handler = handler.name(), "pre-execute handler panicked");
            Err(Candidate::failed(
                ErrorCode::PipelineError,
                format!(
                    "pre-execute handler `{}` panicked: {}",
                    handler.name(),
                    panic::message(payload.as_ref())
                ),
            ))
        }
    }
}

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
    let handlers = pipeline.hooks.pre_execute_handlers();
    let mut decision = PreToolDecision::Allow;
    // The last handler that changed the arguments (with its name).
    let mut last_rewrite: Option<(usize, String)> = None;
    for (i, handler) in handlers.iter().enumerate() {
        let outcome = ask(handler, tool, input, &arguments, &decision).await?;
        if let Some(new_arguments) = outcome.rewrite
            && new_arguments != arguments
        {
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
            last_rewrite = Some((i, handler.name().to_string()));
        }
        if let Some(next) = outcome.decision {
            decision = decision.tighten(next);
        }
        if let PreToolDecision::Deny(reason) = &decision {
            return Err(Candidate::failed(ErrorCode::Denied, reason.clone()));
        }
    }
    let Some((last, rewriter)) = last_rewrite else {
        return Ok((arguments, decision));
    };
    // Verification: the handlers that judged other arguments judge the final ones.
    for handler in &handlers[..=last] {
        let outcome = ask(handler, tool, input, &arguments, &decision).await?;
        if let Some(again) = &outcome.rewrite
            && *again != arguments
        {
            let name = handler.name();
            tracing::error!(handler = %name, after = %rewriter, "pre-execute handlers do not settle on one input");
            return Err(Candidate::failed(
                ErrorCode::PipelineError,
                format!(
                    "pre-execute handler `{name}` rewrote the arguments again when asked about the final ones (after handler `{rewriter}` rewrote them); the handlers must settle on one input, so the tool did not run"
                ),
            ));
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
