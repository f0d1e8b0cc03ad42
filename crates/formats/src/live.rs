//! The neutral step of a live run, built the way a replay of its log builds it.

use dsh_core::transcript::{TranscriptCall, TranscriptResult, TranscriptStep};
use dsh_core::{DeferredMessage, FrozenResult, ToolCall};

/// The transcript step of a step that just ran: the calls as the log records them (ids as
/// assigned, arguments in their logged form), the results in call order, then the deferred
/// messages.
///
/// `results` are the step's results in call order (one per call, as the scheduler answers
/// them). A call's id is taken from its result, because the scheduler replaces missing and
/// repeated ids and the result carries the id the log uses.
///
/// ```
/// use dsh_core::{Arguments, ErrorCode, FrozenResult, ToolCall, ToolError};
/// use dsh_formats::step_from_run;
/// let call = ToolCall { call_id: String::new(), name: "grep".into(), arguments: Arguments::parse("{bad") };
/// let result = FrozenResult::error("dsh_1_0", "grep", ToolError::new(ErrorCode::ToolInputError, "not JSON"));
/// let step = step_from_run(1, &[call], &[result], &[]);
/// assert_eq!(step.calls[0].call_id, "dsh_1_0");
/// assert_eq!(step.calls[0].arguments, serde_json::json!("{bad"));
/// ```
pub fn step_from_run(
    step: u64,
    calls: &[ToolCall],
    results: &[FrozenResult],
    deferred: &[DeferredMessage],
) -> TranscriptStep {
    TranscriptStep {
        step,
        calls: calls
            .iter()
            .enumerate()
            .map(|(i, c)| TranscriptCall {
                call_id: results
                    .get(i)
                    .map_or_else(|| c.call_id.clone(), |r| r.call_id().to_string()),
                name: c.name.clone(),
                arguments: c.arguments.to_logged(),
                arguments_text: c.arguments.logged_text().map(str::to_string),
            })
            .collect(),
        results: results.iter().map(TranscriptResult::from_frozen).collect(),
        user_messages: deferred.iter().map(|d| d.content.clone()).collect(),
    }
}
