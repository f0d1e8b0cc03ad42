//! `tools/post-execute`: the waterfall over a successful body's result.
//!
//! Handlers run in registration order. Each may replace the content or the value (a replaced
//! value is validated against the output schema and presented again), block the result
//! (`BLOCKED`, which ends the waterfall), and add `additionalContexts`. A handler that errors
//! or panics makes the result `PIPELINE_ERROR`. Error results skip this stage.
//!
//! One result has its content or its value replaced, never both: once a handler has replaced
//! one kind, later handlers may replace the same kind again (each sees the one before), but a
//! later handler replacing the other kind ends the result as `PIPELINE_ERROR` naming both
//! handlers. Neither replacement is silently lost that way (a value replaced after a content
//! redaction would be presented again and undo the redaction).
//!
//! The `additionalContexts` a call gathers are cut to
//! [`super::PipelineConfig::max_context_bytes`] together, with a note saying what was cut.

use super::Pipeline;
use super::candidate::Candidate;
use super::dispatch;
use super::normalize;
use super::panic;
use dsh_core::{ErrorCode, PostExecuteContext, RegisteredTool, Replacement, ToolExecutionInput};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;

pub(super) async fn run(
    pipeline: &Pipeline,
    tool: &RegisteredTool,
    input: &ToolExecutionInput,
    arguments: &Value,
    candidate: Candidate,
) -> Candidate {
    let mut candidate = run_handlers(pipeline, tool, input, arguments, candidate).await;
    normalize::bound_contexts(&pipeline.config, &mut candidate.contexts);
    candidate
}

async fn run_handlers(
    pipeline: &Pipeline,
    tool: &RegisteredTool,
    input: &ToolExecutionInput,
    arguments: &Value,
    mut candidate: Candidate,
) -> Candidate {
    let Some(mut value) = candidate.value.take() else {
        return candidate;
    };
    let mut contexts = Vec::new();
    // Which kind was replaced first, and by whom.
    let mut replaced: Option<(&'static str, String)> = None;
    for handler in pipeline.hooks.post_execute_handlers() {
        let ctx = PostExecuteContext {
            call_id: &input.call_id,
            agent: &input.agent,
            arguments,
            value: &value,
            content: &candidate.content,
            tool: tool.definition().as_ref(),
        };
        let answer = AssertUnwindSafe(handler.post_execute(&ctx))
            .catch_unwind()
            .await;
        let outcome = match answer {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                return Candidate::failed(
                    ErrorCode::PipelineError,
                    format!("post-execute handler `{}` failed: {e}", handler.name()),
                );
            }
            Err(payload) => {
                tracing::error!(handler = handler.name(), "post-execute handler panicked");
                return Candidate::failed(
                    ErrorCode::PipelineError,
                    format!(
                        "post-execute handler `{}` panicked: {}",
                        handler.name(),
                        panic::message(payload.as_ref())
                    ),
                );
            }
        };
        contexts.extend(outcome.additional_contexts);
        if let Some(reason) = outcome.block {
            let mut blocked = Candidate::failed(ErrorCode::Blocked, reason);
            blocked.contexts = contexts;
            return blocked;
        }
        if let Some(replacement) = &outcome.replace {
            let kind = match replacement {
                Replacement::Content(_) => "content",
                Replacement::Value(_) => "value",
            };
            match &replaced {
                Some((first, by)) if *first != kind => {
                    return Candidate::failed(
                        ErrorCode::PipelineError,
                        format!(
                            "post-execute handler `{}` replaced the {kind} after handler `{by}` replaced the {first}; a result may have one or the other replaced, never both",
                            handler.name()
                        ),
                    );
                }
                Some(_) => {}
                None => replaced = Some((kind, handler.name().to_string())),
            }
        }
        match outcome.replace {
            None => {}
            Some(Replacement::Content(content)) => candidate.content = content,
            Some(Replacement::Value(new_value)) => {
                if let Err(why) = tool.validate_output(&new_value) {
                    return Candidate::failed(
                        ErrorCode::PipelineError,
                        format!(
                            "post-execute handler `{}` replaced the value with one that breaks the output schema: {why}",
                            handler.name()
                        ),
                    );
                }
                match dispatch::present(pipeline, tool, &new_value).await {
                    Ok(content) => candidate.content = content,
                    Err(failed) => return failed,
                }
                value = new_value;
            }
        }
    }
    candidate.value = Some(value);
    candidate.contexts = contexts;
    candidate
}
