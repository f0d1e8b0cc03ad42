//! The hook points of the chain and the order their handlers run in.
//!
//! | hook point            | trait                 | runs                                          |
//! | --------------------- | --------------------- | --------------------------------------------- |
//! | `tools/pre-execute`   | [`PreExecuteHandler`] | waterfall, in registration order               |
//! | `tools/execute`       | [`crate::Around`]     | around-wrappers, first registered = outermost  |
//! | `tools/post-execute`  | [`PostExecuteHandler`]| waterfall, in registration order               |
//! | `tools/result`        | [`ResultObserver`]    | synchronously, in registration order           |
//!
//! The pre-execute decision only tightens as it falls: a handler can turn `allow` into `ask`
//! or `deny`, and `ask` into `deny`, never back; the first `deny` ends the waterfall. A handler
//! that fails or panics ends the call with `PIPELINE_ERROR` (the tool does not run).
//!
//! # Policy judges the input the body gets
//!
//! Every deny-type check (pre-execute handlers such as permission rules and the workspace
//! sandbox, approval, the guards) judges the arguments the body will actually run with, in any
//! registration order:
//!
//! - When a pre-execute handler rewrites the arguments, the handlers that judged the earlier
//!   arguments (every one up to the last that changed them) are asked again, in order, about
//!   the final ones. So a handler may be asked twice about one call: keep its side effects
//!   idempotent. In that second pass a handler may answer the same arguments again (a rewrite
//!   that settles, such as a path normalizer), but one that changes them again ends the call
//!   `PIPELINE_ERROR`: the handlers must settle on one input. Approval and the guards come after
//!   the waterfall and see the final arguments.
//! - An around-wrapper ([`crate::Around`]) may not change the arguments: it runs after policy.
//!   The pipeline compares what reaches the body with what policy judged, and a difference
//!   ends the attempt `PIPELINE_ERROR` without running the body. (A wrapper may change the
//!   signal, retry, time, or shape the outcome.)
//!
//! # Synchronous hooks run under a deadline
//!
//! [`ResultObserver::observe`] (like a tool's `present` and `finalize_content`) is called
//! synchronously, on a thread of the pipeline's bounded pool, never on an async worker, and the
//! pipeline waits for it at most a deadline (the scheduler's `PipelineConfig::user_code_deadline`,
//! 5 s by default). An observer that blocks past it is given up on: the result is recorded as
//! it was (an observer only observes), its thread is abandoned, and the observers after it in
//! order see the result only if it ever returns.

use crate::around::Around;
use crate::content::ContentBlock;
use crate::policy::PathPolicy;
use crate::result::FrozenResult;
use crate::tool::ToolDefinition;
use async_trait::async_trait;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// What policy says about a call, before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreToolDecision {
    /// Run it.
    Allow,
    /// Do not run it; the reason is shown to the model.
    Deny(String),
    /// Ask the approval responder; the prompt is shown to the human.
    Ask(String),
}

impl PreToolDecision {
    fn strictness(&self) -> u8 {
        match self {
            PreToolDecision::Allow => 0,
            PreToolDecision::Ask(_) => 1,
            PreToolDecision::Deny(_) => 2,
        }
    }

    /// The stricter of the two (the earlier one on a tie): deny beats ask beats allow.
    ///
    /// ```
    /// use dsh_core::PreToolDecision::*;
    /// assert_eq!(Allow.tighten(Deny("x".into())), Deny("x".into()));
    /// assert_eq!(Deny("x".into()).tighten(Allow), Deny("x".into()));
    /// assert_eq!(Ask("a".into()).tighten(Ask("b".into())), Ask("a".into()));
    /// ```
    pub fn tighten(self, next: PreToolDecision) -> PreToolDecision {
        if next.strictness() > self.strictness() {
            next
        } else {
            self
        }
    }
}

/// A handler's failure. The pipeline turns it into a `PIPELINE_ERROR` result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

impl HookError {
    /// A new hook error.
    pub fn new(message: impl Into<String>) -> HookError {
        HookError(message.into())
    }
}

/// What a pre-execute handler sees.
pub struct PreExecuteContext<'a> {
    /// The call's id.
    pub call_id: &'a str,
    /// The agent that made the call.
    pub agent: &'a str,
    /// The parent call (code mode).
    pub parent: Option<&'a str>,
    /// The arguments, as rewritten by earlier handlers.
    pub arguments: &'a Value,
    /// The decision so far.
    pub decision: &'a PreToolDecision,
    /// The tool's definition.
    pub tool: &'a dyn ToolDefinition,
}

impl fmt::Debug for PreExecuteContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreExecuteContext")
            .field("call_id", &self.call_id)
            .field("tool", &self.tool.name())
            .field("decision", &self.decision)
            .finish()
    }
}

/// A pre-execute handler's answer: an optional decision and an optional rewritten input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreExecuteOutcome {
    /// `None` abstains.
    pub decision: Option<PreToolDecision>,
    /// Replacement arguments (validated again against the input schema).
    pub rewrite: Option<Value>,
}

impl PreExecuteOutcome {
    /// No opinion.
    pub fn abstain() -> Self {
        Self::default()
    }
    /// Allow (cannot loosen an earlier ask or deny).
    pub fn allow() -> Self {
        Self::decide(PreToolDecision::Allow)
    }
    /// Deny with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::decide(PreToolDecision::Deny(reason.into()))
    }
    /// Ask the approval responder.
    pub fn ask(prompt: impl Into<String>) -> Self {
        Self::decide(PreToolDecision::Ask(prompt.into()))
    }
    /// A given decision.
    pub fn decide(decision: PreToolDecision) -> Self {
        PreExecuteOutcome {
            decision: Some(decision),
            rewrite: None,
        }
    }
    /// Also replaces the arguments.
    pub fn with_input(mut self, arguments: Value) -> Self {
        self.rewrite = Some(arguments);
        self
    }
}

/// A `tools/pre-execute` handler: hooks, permissions and the sandbox live here. It may be
/// asked twice about one call, when a handler rewrote the arguments (see the module docs).
///
/// ```
/// use async_trait::async_trait;
/// use dsh_core::hooks::{HookError, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome};
///
/// struct NoSecrets;
///
/// #[async_trait]
/// impl PreExecuteHandler for NoSecrets {
///     fn name(&self) -> &str { "no-secrets" }
///     async fn pre_execute(&self, call: &PreExecuteContext<'_>) -> Result<PreExecuteOutcome, HookError> {
///         let path = call.arguments.get("path").and_then(|p| p.as_str()).unwrap_or("");
///         Ok(if path.contains("secret") { PreExecuteOutcome::deny("secrets are off limits") }
///            else { PreExecuteOutcome::abstain() })
///     }
/// }
/// ```
#[async_trait]
pub trait PreExecuteHandler: Send + Sync {
    /// A name for logs and errors.
    fn name(&self) -> &str;
    /// Looks at the call and the decision so far.
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError>;

    /// The same rules as a [`PathPolicy`], for the paths a call touches without naming them
    /// (each file a walk visits) and for the paths it names, asked again as they are used.
    /// The pipeline collects it once, when it is built, into every body's
    /// [`crate::ToolContext::policy`]. `None` (the default): this handler judges calls only.
    fn path_policy(&self) -> Option<Arc<dyn PathPolicy>> {
        None
    }

    /// The workspace this handler confines paths to, if it is a sandbox: the pipeline resolves
    /// every tool's declared paths through the first one before the body runs
    /// ([`crate::ToolContext::paths`]). `None` by default.
    fn confinement(&self) -> Option<Arc<dyn crate::paths::Confinement>> {
        None
    }
}

/// What a post-execute handler sees: a successful body's result.
pub struct PostExecuteContext<'a> {
    /// The call's id.
    pub call_id: &'a str,
    /// The agent that made the call.
    pub agent: &'a str,
    /// The arguments the body ran with.
    pub arguments: &'a Value,
    /// The canonical value so far.
    pub value: &'a Value,
    /// The presentation so far.
    pub content: &'a [ContentBlock],
    /// The tool's definition.
    pub tool: &'a dyn ToolDefinition,
}

impl fmt::Debug for PostExecuteContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostExecuteContext")
            .field("call_id", &self.call_id)
            .field("tool", &self.tool.name())
            .finish()
    }
}

/// A replacement made by a post-execute handler: the content or the value, never both.
#[derive(Debug, Clone, PartialEq)]
pub enum Replacement {
    /// New presentation; the value stays.
    Content(Vec<ContentBlock>),
    /// New canonical value; the content is presented again from it.
    Value(Value),
}

/// A post-execute handler's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PostExecuteOutcome {
    /// Replace the content or the value.
    pub replace: Option<Replacement>,
    /// Block the result: the model sees `BLOCKED` with this reason.
    pub block: Option<String>,
    /// Context for the next step, injected as `user/message` after the step's results.
    pub additional_contexts: Vec<String>,
}

impl PostExecuteOutcome {
    /// Accept as is.
    pub fn accept() -> Self {
        Self::default()
    }
    /// Block with a reason.
    pub fn block(reason: impl Into<String>) -> Self {
        PostExecuteOutcome {
            block: Some(reason.into()),
            ..Self::default()
        }
    }
    /// Replace the content.
    pub fn replace_content(content: Vec<ContentBlock>) -> Self {
        PostExecuteOutcome {
            replace: Some(Replacement::Content(content)),
            ..Self::default()
        }
    }
    /// Replace the value.
    pub fn replace_value(value: Value) -> Self {
        PostExecuteOutcome {
            replace: Some(Replacement::Value(value)),
            ..Self::default()
        }
    }
    /// Adds a deferred context message.
    pub fn with_context(mut self, text: impl Into<String>) -> Self {
        self.additional_contexts.push(text.into());
        self
    }
}

/// A `tools/post-execute` handler: accept, block, replace, or add context.
#[async_trait]
pub trait PostExecuteHandler: Send + Sync {
    /// A name for logs and errors.
    fn name(&self) -> &str;
    /// Looks at a successful body's result.
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError>;
}

/// A `tools/result` observer: sees every frozen result, synchronously, once, before it is
/// recorded. A panic here is logged and changes nothing; one that blocks past the pipeline's
/// deadline is given up on (see the module docs).
pub trait ResultObserver: Send + Sync {
    /// A name for logs.
    fn name(&self) -> &str;
    /// Sees the frozen result.
    fn observe(&self, result: &FrozenResult);
    /// Whether [`ResultObserver::observe`] may block (wait on I/O, a lock, a person). True
    /// unless the observer says otherwise: such observers run on the pipeline's user-code pool
    /// under a deadline. When every observer says `false`, they run inline in the call's task,
    /// without the two thread hand-offs (an observer that says `false` and blocks stalls an
    /// async worker, as a non-blocking guard would). Asked once, when the pipeline is built.
    fn may_block(&self) -> bool {
        true
    }
}

/// A request for one-shot approval of an `ask`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The agent that made the call.
    pub agent: String,
    /// The arguments the call would run with.
    pub arguments: Value,
    /// The prompt from the handler that asked.
    pub prompt: String,
}

/// The approval responder's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// Run it (guards still apply).
    Approve,
    /// Do not run it.
    Reject(Option<String>),
}

/// `ctx.approval`: answers `ask` decisions. An error, a timeout or a dropped responder is a
/// denial (fail-closed).
#[async_trait]
pub trait ApprovalResponder: Send + Sync {
    /// Answers one request.
    async fn respond(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError>;

    /// Whether it can answer a question that comes up in the middle of the running call
    /// `call_id` of `agent` (a command's connection to a host under an `ask` rule), not only
    /// one asked before a call starts. `false` makes such a question a refusal that says what
    /// to add to the policy rather than a question. `true` unless a responder says otherwise.
    fn asks_mid_call(&self, agent: &str, call_id: &str) -> bool {
        let _ = (agent, call_id);
        true
    }
}

/// The handlers of every hook point, in the order they run.
///
/// ```
/// use dsh_core::{Hooks, around::TimeoutLayer};
/// let mut hooks = Hooks::new();
/// hooks.around(TimeoutLayer::default());
/// assert_eq!(hooks.arounds().len(), 1);
/// ```
#[derive(Clone, Default)]
pub struct Hooks {
    pre_execute: Vec<Arc<dyn PreExecuteHandler>>,
    around: Vec<Arc<dyn Around>>,
    post_execute: Vec<Arc<dyn PostExecuteHandler>>,
    observers: Vec<Arc<dyn ResultObserver>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field(
                "pre_execute",
                &self
                    .pre_execute
                    .iter()
                    .map(|h| h.name())
                    .collect::<Vec<_>>(),
            )
            .field(
                "around",
                &self.around.iter().map(|h| h.name()).collect::<Vec<_>>(),
            )
            .field(
                "post_execute",
                &self
                    .post_execute
                    .iter()
                    .map(|h| h.name())
                    .collect::<Vec<_>>(),
            )
            .field(
                "observers",
                &self.observers.iter().map(|h| h.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Hooks {
    /// No handlers.
    pub fn new() -> Hooks {
        Hooks::default()
    }

    /// Adds a `tools/pre-execute` handler after the ones already there.
    pub fn pre_execute(&mut self, handler: impl PreExecuteHandler + 'static) -> &mut Self {
        self.pre_execute.push(Arc::new(handler));
        self
    }

    /// Adds an around-wrapper inside the ones already there.
    pub fn around(&mut self, wrapper: impl Around + 'static) -> &mut Self {
        self.around.push(Arc::new(wrapper));
        self
    }

    /// Adds a `tools/post-execute` handler after the ones already there.
    pub fn post_execute(&mut self, handler: impl PostExecuteHandler + 'static) -> &mut Self {
        self.post_execute.push(Arc::new(handler));
        self
    }

    /// Adds a `tools/result` observer after the ones already there.
    pub fn observe(&mut self, observer: impl ResultObserver + 'static) -> &mut Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// Adds a shared pre-execute handler.
    pub fn pre_execute_arc(&mut self, handler: Arc<dyn PreExecuteHandler>) -> &mut Self {
        self.pre_execute.push(handler);
        self
    }

    /// Adds a shared around-wrapper.
    pub fn around_arc(&mut self, wrapper: Arc<dyn Around>) -> &mut Self {
        self.around.push(wrapper);
        self
    }

    /// Adds a shared post-execute handler.
    pub fn post_execute_arc(&mut self, handler: Arc<dyn PostExecuteHandler>) -> &mut Self {
        self.post_execute.push(handler);
        self
    }

    /// Adds a shared observer.
    pub fn observe_arc(&mut self, observer: Arc<dyn ResultObserver>) -> &mut Self {
        self.observers.push(observer);
        self
    }

    /// The pre-execute handlers, in order.
    pub fn pre_execute_handlers(&self) -> &[Arc<dyn PreExecuteHandler>] {
        &self.pre_execute
    }

    /// The around-wrappers, outermost first.
    pub fn arounds(&self) -> &[Arc<dyn Around>] {
        &self.around
    }

    /// The post-execute handlers, in order.
    pub fn post_execute_handlers(&self) -> &[Arc<dyn PostExecuteHandler>] {
        &self.post_execute
    }

    /// The observers, in order.
    pub fn observers(&self) -> &[Arc<dyn ResultObserver>] {
        &self.observers
    }
}
