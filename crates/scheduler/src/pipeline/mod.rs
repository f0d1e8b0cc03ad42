//! The chain of SPEC.md, one stage per file:
//!
//! | stage                         | file              |
//! | ----------------------------- | ----------------- |
//! | `tools/pre-execute` waterfall | `pre_execute.rs`  |
//! | approval (`ctx.approval`)     | `approval.rs`     |
//! | monotonic guards              | `guard.rs` (asks the `GuardSet` actor) |
//! | `tools/execute` + the body    | `dispatch.rs` (the wrappers live in `dsh_core::around`) |
//! | `tools/post-execute`          | `post_execute.rs` |
//! | normalization (snapshot)      | `normalize.rs`    |
//! | `finalize_content`            | `finalize.rs`     |
//! | `tools/result` observers      | `observe.rs`      |
//!
//! [`Pipeline::run`] takes a call from its recorded `tool/call` to a candidate result;
//! [`Pipeline::complete`] freezes a candidate (snapshot, `finalize_content`, observers). Both
//! are driven by the call-lifecycle actor; `complete` also closes calls that were cancelled,
//! so every result of a known tool passes `finalize_content` exactly once.

// A stage that ends a call answers the error candidate as `Err`: it is an ordinary outcome
// taken once per call, so boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

mod approval;
pub(crate) mod candidate;
mod dispatch;
mod finalize;
mod guard;
mod normalize;
mod observe;
pub(crate) mod panic;
mod post_execute;
mod pre_execute;

use crate::pipeline::candidate::Candidate;
use crate::telemetry;
use dsh_core::{
    ApprovalResponder, Arguments, ContentBlock, ErrorCode, FrozenResult, Hooks, PartialOutput,
    RegisteredTool, SubCallDispatcher, ToolExecutionInput, ToolRegistry,
};
use dsh_guards::GuardSet;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing::Instrument;
use tracing::Span;

/// Limits and timeouts of the chain.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// How long the approval responder may take before the answer counts as `deny`.
    pub approval_timeout: Duration,
    /// How long a body may take to return after its deadline or cancel before the pipeline
    /// stops waiting.
    pub body_grace: Duration,
    /// Content larger than this is cut, with a note saying so.
    pub max_content_bytes: usize,
    /// Values and meta nested deeper than this fail the snapshot (they cannot round-trip).
    pub max_json_depth: usize,
    /// Record arguments and results on the tracing spans (off by default: they may hold
    /// data that should not leave the process).
    pub record_content: bool,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            approval_timeout: Duration::from_secs(300),
            body_grace: Duration::from_millis(100),
            max_content_bytes: 256 * 1024,
            max_json_depth: 128,
            record_content: false,
        }
    }
}

/// Everything a call passes through: the registry, the hooks, the guard set, the approval
/// responder and the limits. Shared by every session of a harness.
pub struct Pipeline {
    pub(crate) registry: Arc<ToolRegistry>,
    pub(crate) hooks: Arc<Hooks>,
    pub(crate) guards: GuardSet,
    pub(crate) approval: Option<Arc<dyn ApprovalResponder>>,
    pub(crate) config: PipelineConfig,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("tools", &self.registry.names())
            .field("hooks", &self.hooks)
            .field("approval", &self.approval.is_some())
            .finish()
    }
}

/// Where a call is, as far as cancellation cares: has its body started?
#[derive(Debug, Default)]
pub(crate) struct CallTrack {
    body_started: AtomicBool,
    /// What the body published of its output so far (see `PartialOutput`).
    pub(crate) partial: PartialOutput,
}

impl CallTrack {
    pub(crate) fn mark_body_started(&self) {
        self.body_started.store(true, Ordering::SeqCst);
    }

    pub(crate) fn body_started(&self) -> bool {
        self.body_started.load(Ordering::SeqCst)
    }

    /// `message` followed by the body's output so far, when it published some.
    pub(crate) fn partial_content(&self, message: &str) -> Option<Vec<ContentBlock>> {
        if !self.body_started() {
            return None;
        }
        let partial = self.partial.snapshot()?;
        let mut content = vec![ContentBlock::text(message)];
        content.extend(partial);
        Some(content)
    }
}

impl Pipeline {
    /// A pipeline over these parts.
    pub fn new(
        registry: Arc<ToolRegistry>,
        hooks: Arc<Hooks>,
        guards: GuardSet,
        approval: Option<Arc<dyn ApprovalResponder>>,
        config: PipelineConfig,
    ) -> Pipeline {
        Pipeline {
            registry,
            hooks,
            guards,
            approval,
            config,
        }
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<ToolRegistry> {
        &self.registry
    }

    /// The guard set.
    pub fn guards(&self) -> &GuardSet {
        &self.guards
    }

    /// prepare → dispatch → post-execute, for a call whose `tool/call` is recorded. Answers
    /// the candidate and the `finalize` span, which [`Pipeline::complete`] enters again.
    pub(crate) async fn run(
        &self,
        input: &ToolExecutionInput,
        track: &CallTrack,
        dispatcher: Option<Arc<dyn SubCallDispatcher>>,
        call: &Span,
    ) -> (Candidate, Span) {
        match self
            .prepare_and_dispatch(input, track, dispatcher, call)
            .await
        {
            Err(ended) => (ended, telemetry::phase_span(call, "finalize")),
            Ok((tool, arguments, candidate)) => {
                let finalize = telemetry::phase_span(call, "finalize");
                let candidate = post_execute::run(self, &tool, input, &arguments, candidate)
                    .instrument(finalize.clone())
                    .await;
                (candidate, finalize)
            }
        }
    }

    async fn prepare_and_dispatch(
        &self,
        input: &ToolExecutionInput,
        track: &CallTrack,
        dispatcher: Option<Arc<dyn SubCallDispatcher>>,
        call: &Span,
    ) -> Result<(Arc<RegisteredTool>, Value, Candidate), Candidate> {
        let Some(tool) = self.registry.get(&input.name) else {
            let known = self.registry.names();
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            return Err(Candidate::failed(
                ErrorCode::UnknownTool,
                format!(
                    "no tool named `{}` is registered (known tools: {known})",
                    input.name
                ),
            ));
        };
        let arguments = match &input.arguments {
            Arguments::Json(v) => v.clone(),
            Arguments::Malformed { error, .. } => {
                return Err(Candidate::failed(
                    ErrorCode::ToolInputError,
                    format!("the arguments are not valid JSON: {error}"),
                ));
            }
        };

        let arguments = async {
            let (arguments, decision) = pre_execute::run(self, &tool, input, arguments).await?;
            approval::resolve(self, input, &arguments, decision).await?;
            guard::check(self, input, &arguments).await?;
            if let Some(reason) = input.signal.reason() {
                return Err(Candidate::failed(
                    ErrorCode::AbortedBeforeDispatch,
                    format!("the call was cancelled before it started: {reason}"),
                ));
            }
            Ok(arguments)
        }
        .instrument(telemetry::phase_span(call, "prepare"))
        .await?;

        let outcome = dispatch::run(self, &tool, input, arguments.clone(), track, dispatcher)
            .instrument(telemetry::phase_span(call, "dispatch"))
            .await;
        if let Some(reason) = input.signal.reason() {
            // Body started: even a success is replaced by ABORTED.
            let message = format!("the call was cancelled while it ran: {reason}");
            let mut aborted = Candidate::failed(ErrorCode::Aborted, message.clone());
            if let Some(content) = track.partial_content(&message) {
                aborted.content = content;
            }
            return Err(aborted);
        }
        Ok((tool, arguments, outcome?))
    }

    /// normalize → `finalize_content` → freeze → observers. Synchronous, and run exactly once
    /// per result.
    pub(crate) fn complete(
        &self,
        call_id: &str,
        tool_name: &str,
        candidate: Candidate,
        finalize: &Span,
    ) -> FrozenResult {
        let _in_finalize = finalize.enter();
        let snapshot = normalize::snapshot(&self.config, candidate);
        let tool = self.registry.get(tool_name);
        let frozen = finalize::freeze(call_id, tool_name, tool.as_deref(), snapshot);
        observe::notify(&self.hooks, &frozen);
        frozen
    }
}
