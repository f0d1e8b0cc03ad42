//! Approval (`ctx.approval`): one-shot answer to an `ask`, before the guards.
//!
//! No responder, a rejection, an error, a panic or no answer within the timeout: `DENIED`.

use super::Pipeline;
use super::candidate::Candidate;
use dsh_core::{ApprovalAnswer, ApprovalRequest, ErrorCode, PreToolDecision, ToolExecutionInput};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;

pub(super) async fn resolve(
    pipeline: &Pipeline,
    input: &ToolExecutionInput,
    arguments: &Value,
    decision: PreToolDecision,
) -> Result<(), Candidate> {
    let prompt = match decision {
        PreToolDecision::Allow => return Ok(()),
        PreToolDecision::Deny(reason) => return Err(Candidate::failed(ErrorCode::Denied, reason)),
        PreToolDecision::Ask(prompt) => prompt,
    };
    let denied = |why: String| Err(Candidate::failed(ErrorCode::Denied, why));
    let Some(responder) = &pipeline.approval else {
        return denied(format!(
            "approval required ({prompt}) and no approver is configured"
        ));
    };
    let request = ApprovalRequest {
        call_id: input.call_id.clone(),
        tool: input.name.clone(),
        agent: input.agent.clone(),
        arguments: arguments.clone(),
        prompt: prompt.clone(),
    };
    let asked = AssertUnwindSafe(responder.respond(&request)).catch_unwind();
    // A cancelled call stops waiting at once: the responder's question is dropped with it,
    // so a prompt on a terminal is withdrawn instead of taking the next answer.
    let answer = tokio::select! {
        answer = tokio::time::timeout(pipeline.config.approval_timeout, asked) => answer,
        why = input.signal.cancelled() => {
            return Err(Candidate::failed(
                ErrorCode::AbortedBeforeDispatch,
                format!("the call was cancelled while it waited for approval: {why}"),
            ));
        }
    };
    match answer {
        Ok(Ok(Ok(ApprovalAnswer::Approve))) => Ok(()),
        Ok(Ok(Ok(ApprovalAnswer::Reject(reason)))) => denied(match reason {
            Some(r) => format!("the approver rejected the call: {r}"),
            None => "the approver rejected the call".to_string(),
        }),
        Ok(Ok(Err(e))) => denied(format!(
            "the approver could not answer ({e}); denied to be safe"
        )),
        Ok(Err(_)) => denied("the approver failed; denied to be safe".to_string()),
        Err(_) => denied(format!(
            "the approver did not answer within {} ms; denied to be safe",
            pipeline.config.approval_timeout.as_millis()
        )),
    }
}
