//! `tools/execute`: the around-wrappers, then the body.
//!
//! The leaf keeps the caller's original signal and fuses it with whatever signal the wrappers
//! handed inward, so no wrapper can shield the body from a cancel. The body runs in its own
//! task: a panic there is `TOOL_ERROR`, and a body that ignores its signal is abandoned (its
//! late output discarded) instead of holding the call.
//!
//! What the whole chain answers is judged here, after the outermost wrapper returns:
//!
//! - A value is checked against the output schema (`TOOL_OUTPUT_ERROR`), whether the body
//!   made it or a wrapper answered without running the body. (Wrappers see the body's value
//!   before this check.)
//! - A failure the leaf returned (the body's own, with the code it chose, or the leaf's
//!   `TOOL_TIMEOUT`/`ABORTED` when the signal fired) keeps its code, even when wrappers pass
//!   it on.
//! - A failure a wrapper raised itself is `PIPELINE_ERROR` (a wrapper is pipeline, not tool),
//!   except `TOOL_TIMEOUT` (the timeout wrapper's answer when a deadline passes) and
//!   `ABORTED` once the caller's signal has fired (an interrupt stays an interrupt).
//! - A panic in a wrapper is `PIPELINE_ERROR`.
//!
//! Wrappers may not change the arguments: policy (the pre-execute waterfall, approval, the
//! guards) judged the arguments the chain was handed, so the leaf compares what reaches it
//! with those, and a difference ends the attempt `PIPELINE_ERROR` without running the body.

use super::candidate::Candidate;
use super::panic;
use super::{CallTrack, Pipeline};
use async_trait::async_trait;
use dsh_core::around::{DispatchOutcome, DispatchRequest, Leaf, Next};
use dsh_core::pool::{Activity, PoolError};
use dsh_core::{
    Confinement, ContentBlock, ErrorCode, PathPolicies, RegisteredTool, ResolvedPaths, Signal,
    SubCallDispatcher, ToolContext, ToolExecutionInput, ToolFailure,
};
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

/// Aborts the body's task when the leaf stops waiting for it.
struct AbortOnDrop(tokio::task::JoinHandle<Result<Value, ToolFailure>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct BodyLeaf<'a> {
    tool: &'a RegisteredTool,
    caller: Signal,
    track: &'a CallTrack,
    dispatcher: Option<Arc<dyn SubCallDispatcher>>,
    policy: PathPolicies,
    confinement: Option<Arc<dyn Confinement>>,
    grace: Duration,
    /// The arguments policy judged: the only ones the body may run with.
    approved: Value,
    /// Every failure the leaf answered (code and message), to tell them from a wrapper's.
    failures: Mutex<Vec<(ErrorCode, String)>>,
}

impl BodyLeaf<'_> {
    fn returned(&self, failure: &ToolFailure) -> bool {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(code, message)| *code == failure.code && *message == failure.message)
    }
}

fn ended_by_signal(signal: &Signal) -> ToolFailure {
    match signal.reason() {
        Some(r) if r.is_timeout() => {
            ToolFailure::with_code(ErrorCode::ToolTimeout, "the tool's deadline passed")
        }
        Some(r) => ToolFailure::with_code(
            ErrorCode::Aborted,
            format!("the call was cancelled while it ran: {r}"),
        ),
        None => ToolFailure::with_code(ErrorCode::Aborted, "the call was cancelled while it ran"),
    }
}

#[async_trait]
impl Leaf for BodyLeaf<'_> {
    async fn dispatch(&self, req: DispatchRequest) -> DispatchOutcome {
        let outcome = self.run_body(req).await;
        if let Err(f) = &outcome {
            self.failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((f.code, f.message.clone()));
        }
        outcome
    }
}

/// The call's declared paths, resolved through the workspace and put to the path policies
/// (off the async workers: resolving stats the disk). A refusal is the call's `DENIED`, before
/// its body runs. Nothing to do for a tool that declares none, or resolves its own.
async fn resolve_paths(
    tool: &RegisteredTool,
    confinement: Option<Arc<dyn Confinement>>,
    policy: &PathPolicies,
    arguments: &Value,
) -> Result<ResolvedPaths, ToolFailure> {
    let definition = tool.definition();
    if definition.resolves_own_paths() {
        return Ok(ResolvedPaths::default());
    }
    let declared = definition.declared_paths(arguments);
    let Some(confinement) = confinement else {
        return Ok(ResolvedPaths::default());
    };
    if declared.is_empty() {
        return Ok(ResolvedPaths::default());
    }
    let policy = policy.clone();
    let name = definition.name().to_string();
    tokio::task::spawn_blocking(move || {
        dsh_core::paths::resolve_declared(&confinement, &policy, &name, &declared)
    })
    .await
    .unwrap_or_else(|e| Err(ToolFailure::new(format!("resolving the paths failed: {e}"))))
}

impl BodyLeaf<'_> {
    async fn run_body(&self, req: DispatchRequest) -> DispatchOutcome {
        if req.arguments != self.approved {
            tracing::error!(
                tool = self.tool.definition().name(),
                "an around-wrapper changed the arguments; the body does not run"
            );
            return Err(ToolFailure::with_code(
                ErrorCode::PipelineError,
                "an around-wrapper changed the arguments after policy judged them; wrappers may not change arguments, so the tool did not run",
            ));
        }
        let signal = Signal::fuse([req.signal, self.caller.clone()]);
        if signal.is_cancelled() {
            return Err(ended_by_signal(&signal));
        }
        let paths = resolve_paths(
            self.tool,
            self.confinement.clone(),
            &self.policy,
            &req.arguments,
        )
        .await?;
        let ctx = ToolContext {
            paths,
            confinement: self.confinement.clone(),
            call_id: req.call_id,
            agent: req.agent,
            parent: req.parent,
            signal: signal.clone(),
            attempt: req.attempt,
            dispatcher: self.dispatcher.clone(),
            policy: self.policy.clone(),
            partial: self.track.partial.clone(),
        };
        let definition = self.tool.definition().clone();
        let arguments = req.arguments;
        self.track.mark_body_started();
        let mut body = AbortOnDrop(tokio::spawn(
            async move { definition.execute(arguments, ctx).await }.in_current_span(),
        ));
        let joined = tokio::select! {
            joined = &mut body.0 => joined,
            _ = signal.cancelled() => {
                // Told; give a cooperative body a moment to wind down, then stop waiting.
                let _ = tokio::time::timeout(self.grace, &mut body.0).await;
                return Err(ended_by_signal(&signal));
            }
        };
        let value = match joined {
            Ok(result) => result?,
            Err(e) if e.is_panic() => {
                let msg = panic::message(e.into_panic().as_ref());
                tracing::error!(tool = self.tool.definition().name(), panic = %msg, "tool body panicked");
                return Err(ToolFailure::new(format!("the tool panicked: {msg}")));
            }
            Err(_) => return Err(ended_by_signal(&signal)),
        };
        Ok(value)
    }
}

/// Runs the wrappers and the body; answers a success candidate (value and presentation) or
/// an error candidate.
pub(super) async fn run(
    pipeline: &Pipeline,
    tool: &RegisteredTool,
    input: &ToolExecutionInput,
    arguments: Value,
    track: &CallTrack,
    dispatcher: Option<Arc<dyn SubCallDispatcher>>,
) -> Result<Candidate, Candidate> {
    let leaf = BodyLeaf {
        tool,
        caller: input.signal.clone(),
        track,
        dispatcher,
        policy: pipeline.policy.clone(),
        confinement: pipeline.confinement.clone(),
        grace: pipeline.config.body_grace,
        approved: arguments.clone(),
        failures: Mutex::new(Vec::new()),
    };
    let req = DispatchRequest {
        tool: tool.definition().clone(),
        arguments,
        call_id: input.call_id.clone(),
        agent: input.agent.clone(),
        parent: input.parent.clone(),
        signal: input.signal.clone(),
        attempt: 1,
    };
    let chain = pipeline.hooks.arounds();
    let outcome = AssertUnwindSafe(Next::new(chain, &leaf).run(req))
        .catch_unwind()
        .await;
    let value = match outcome {
        Ok(Ok(value)) => value,
        Ok(Err(failure)) => {
            let interrupt = failure.code == ErrorCode::ToolTimeout
                || (failure.code == ErrorCode::Aborted && input.signal.is_cancelled());
            if interrupt || leaf.returned(&failure) {
                let mut failure = failure;
                if interrupt && failure.content.is_none() {
                    // Cut before it answered: what it published so far still shows.
                    failure.content = track.partial_content(&failure.message);
                }
                return Err(Candidate::from_failure(failure));
            }
            return Err(Candidate::failed(
                ErrorCode::PipelineError,
                format!(
                    "an around-wrapper failed the call ({}): {}",
                    failure.code, failure.message
                ),
            ));
        }
        Err(payload) => {
            return Err(Candidate::failed(
                ErrorCode::PipelineError,
                format!(
                    "an around-wrapper panicked: {}",
                    panic::message(payload.as_ref())
                ),
            ));
        }
    };
    if let Err(why) = tool.validate_output(&value) {
        let whose = if track.body_started() {
            "the tool's output"
        } else {
            "the value an around-wrapper answered without running the tool"
        };
        return Err(Candidate::failed(
            ErrorCode::ToolOutputError,
            format!("{whose} does not match its output schema: {why}"),
        ));
    }
    let (content, meta) = present_with_meta(pipeline, tool, &value).await?;
    let mut candidate = Candidate::success(value, content);
    candidate.meta = meta;
    Ok(candidate)
}

/// The tool's `present`, on the user-code pool under the deadline: a panic is the tool's
/// failure (`TOOL_ERROR`); not returning in time, or not being run because every user-code
/// thread is stuck, is `PIPELINE_ERROR`.
pub(super) async fn present(
    pipeline: &Pipeline,
    tool: &RegisteredTool,
    value: &Value,
) -> Result<Vec<ContentBlock>, Candidate> {
    present_with_meta(pipeline, tool, value)
        .await
        .map(|(content, _)| content)
}

/// [`present`], together with the meta the tool keeps with its result (`result_meta`, user
/// code too, so it runs in the same job under the same deadline).
async fn present_with_meta(
    pipeline: &Pipeline,
    tool: &RegisteredTool,
    value: &Value,
) -> Result<(Vec<ContentBlock>, Option<serde_json::Map<String, Value>>), Candidate> {
    let definition = tool.definition().clone();
    let both = dsh_core::inline::PRESENT | dsh_core::inline::RESULT_META;
    if tool.defaults_known(both) {
        // dsh's own defaults: they never block, so no hand-off (see `dsh_core::inline`).
        return Ok((definition.present(value), definition.result_meta(value)));
    }
    let name = definition.name().to_string();
    let value = value.clone();
    let deadline = pipeline.config.user_code_deadline;
    let job = move |_: &Activity| {
        let concrete = definition.concrete_type();
        dsh_core::inline::defaults_seen(concrete, || {
            (definition.present(&value), definition.result_meta(&value))
        })
    };
    match pipeline
        .user_code
        .run(format!("present of `{name}`"), Some(deadline), job)
        .await
    {
        Ok((content, seen)) => {
            tool.learn_defaults(seen);
            Ok(content)
        }
        Err(PoolError::Panicked(message)) => Err(Candidate::failed(
            ErrorCode::ToolError,
            format!("the tool failed to present its result: {message}"),
        )),
        Err(e) => {
            let why = match e {
                PoolError::TimedOut { started: true } => format!(
                    "did not return within {} ms; the pipeline stopped waiting",
                    deadline.as_millis()
                ),
                other => format!("could not be run: {other}"),
            };
            tracing::error!(tool = %name, reason = %why, "present failed");
            Err(Candidate::failed(
                ErrorCode::PipelineError,
                format!("present of `{name}` {why}"),
            ))
        }
    }
}

/// The dry run of dispatch (`Pipeline::judge`): the declared paths resolved and put to the path
/// policies as before a body, then the tool's own [`dsh_core::ToolDefinition::dry_run`]; no
/// wrapper and no body runs.
pub(super) async fn dry_run(
    pipeline: &Pipeline,
    tool: &RegisteredTool,
    input: &ToolExecutionInput,
    arguments: Value,
) -> Result<(), ToolFailure> {
    let confinement = pipeline.confinement.clone();
    let paths = resolve_paths(tool, confinement.clone(), &pipeline.policy, &arguments).await?;
    let ctx = ToolContext {
        paths,
        confinement,
        call_id: input.call_id.clone(),
        agent: input.agent.clone(),
        parent: input.parent.clone(),
        signal: input.signal.clone(),
        attempt: 1,
        dispatcher: None,
        policy: pipeline.policy.clone(),
        partial: Default::default(),
    };
    let definition = tool.definition().clone();
    match AssertUnwindSafe(definition.dry_run(arguments, ctx))
        .catch_unwind()
        .await
    {
        Ok(answer) => answer,
        Err(payload) => Err(ToolFailure::with_code(
            ErrorCode::PipelineError,
            format!(
                "the dry run of `{}` panicked: {}",
                definition.name(),
                panic::message(payload.as_ref())
            ),
        )),
    }
}
