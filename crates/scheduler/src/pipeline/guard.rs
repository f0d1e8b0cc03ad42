//! Monotonic guards: ask the `GuardSet` actor; any denial is final, and an unreachable guard
//! set is a denial too.

use super::Pipeline;
use super::candidate::Candidate;
use dsh_core::{ErrorCode, ToolExecutionInput};
use dsh_guards::{GuardCall, GuardVerdict};
use serde_json::Value;

pub(super) async fn check(
    pipeline: &Pipeline,
    input: &ToolExecutionInput,
    arguments: &Value,
) -> Result<(), Candidate> {
    let call = GuardCall {
        call_id: input.call_id.clone(),
        tool: input.name.clone(),
        agent: input.agent.clone(),
        arguments: arguments.clone(),
        parent: input.parent.clone(),
    };
    match pipeline.guards.evaluate(call).await {
        GuardVerdict::Abstain => Ok(()),
        GuardVerdict::Deny(reason) => Err(Candidate::failed(ErrorCode::Denied, reason)),
    }
}
