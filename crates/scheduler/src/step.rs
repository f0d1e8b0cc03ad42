//! What a step is, from the agent loop's side.

use dsh_core::{DeferredMessage, FrozenResult, ToolCall};

/// The tool-call blocks of one model message.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRequest {
    /// The agent whose message it is.
    pub agent: String,
    /// The blocks, in message order.
    pub calls: Vec<ToolCall>,
}

impl StepRequest {
    /// A step of the `main` agent.
    ///
    /// ```
    /// use dsh_core::ToolCall;
    /// use dsh_scheduler::StepRequest;
    /// let step = StepRequest::new(vec![ToolCall::new("c1", "read_file", serde_json::json!({"path": "a"}))]);
    /// assert_eq!(step.agent, "main");
    /// ```
    pub fn new(calls: Vec<ToolCall>) -> StepRequest {
        StepRequest {
            agent: "main".into(),
            calls,
        }
    }
}

/// A call id the scheduler had to replace (empty, or already used in the step), so that every
/// result can be paired with exactly one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenamedCallId {
    /// The block's position in the message.
    pub index: usize,
    /// The id the model gave.
    pub original: String,
    /// The id used in the log.
    pub assigned: String,
}

/// A finished step: every call's result, in call order, all recorded; then the deferred
/// context messages, recorded after them.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    /// The step's number in the session.
    pub step: u64,
    /// One result per block, in block order.
    pub results: Vec<FrozenResult>,
    /// The step's `additionalContexts`, first in first out, recorded as `user/message`.
    pub deferred: Vec<DeferredMessage>,
    /// Ids the scheduler replaced.
    pub renamed: Vec<RenamedCallId>,
}

/// What a failed call does to the calls running beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SiblingPolicy {
    /// Nothing: siblings run on.
    #[default]
    Continue,
    /// A failed call (any error result other than an interrupt) cancels its running siblings
    /// (`ABORTED`) and the calls of the step not yet reached (`ABORTED_BEFORE_DISPATCH`).
    CancelSiblings,
}

/// What to cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelTarget {
    /// One call of the running step, by id.
    Call(String),
    /// The running step.
    Step,
    /// The running step and every step waiting behind it.
    Session,
}

/// Where a step's deferred context (the `additionalContexts` of post-execute handlers) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeferredContext {
    /// After every result of the step, as `user/message` events (and in
    /// [`StepOutcome::deferred`]): the next message the model reads.
    #[default]
    UserMessages,
    /// At the end of the call's own result, as its last text blocks, and nowhere else: for
    /// hosts with no later user message to carry it (`dsh serve`: MCP has none; SPEC.md's
    /// "Deferred context without a next message"). Results the pipeline closes itself
    /// (cancelled before they ran, not recorded) carry none.
    InResults,
}
