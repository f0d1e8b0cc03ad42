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
//! `Pipeline::run` takes a call from its recorded `tool/call` to a candidate result;
//! `Pipeline::freeze` freezes a candidate (snapshot, `finalize_content`, observers). Both
//! are driven by the call-lifecycle actor's task; `freeze` also closes calls that were
//! cancelled, so every result of a known tool passes `finalize_content` exactly once.
//!
//! User code the chain calls synchronously (`present`, `finalize_content`, the `tools/result`
//! observers) runs on at most [`PipelineConfig::user_code_threads`] threads of tokio's
//! blocking pool, never on an async worker, under
//! [`PipelineConfig::user_code_deadline`] (real time): a blocking `finalize_content` or
//! `present` ends its call `PIPELINE_ERROR` when the deadline passes (its thread is abandoned),
//! and an observer past the deadline is given up on (the result stays as it was: an observer
//! only observes). `finalize_content` is called at most once per call, tracked on the call
//! (`CallTrack`): a result whose `finalize_content` was already called (and then timed out,
//! panicked, or was abandoned by a cancel) is frozen without calling it again.

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
use dsh_core::Confinement;
use dsh_core::pool::BlockingPool;
use dsh_core::{
    ApprovalResponder, Arguments, ContentBlock, ErrorCode, FrozenResult, Hooks, PartialOutput,
    PathPolicies, PathPolicy, PreToolDecision, ProtectedPaths, RegisteredTool, SubCallDispatcher,
    ToolExecutionInput, ToolRegistry,
};
use dsh_guards::GuardSet;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// `additionalContexts` of one call, together, larger than this are cut, with a note
    /// saying so (default 64 KiB).
    pub max_context_bytes: usize,
    /// How long user code the chain calls synchronously (`present`, `finalize_content`, the
    /// `tools/result` observers) may run, in real time, before the pipeline stops waiting
    /// (default 5 s). Past it, a `present` or `finalize_content` ends the call
    /// `PIPELINE_ERROR`; observers are given up on. The code's thread is abandoned.
    pub user_code_deadline: Duration,
    /// The same for a call that was cancelled (its `ABORTED*` result still passes
    /// `finalize_content` once): shorter (default 1 s), so a shutdown keeps its deadline.
    /// Past it the result stays `ABORTED*`, not finalized.
    pub cancelled_deadline: Duration,
    /// How many threads of tokio's blocking pool that user code may hold at once (default
    /// 16). When every one is stuck in code that outlived its deadline, such code is not run
    /// at all: `present` and `finalize_content` end their call `PIPELINE_ERROR` at once,
    /// naming what is stuck; so stuck user code never holds more of the runtime than this.
    pub user_code_threads: usize,
    /// What one call's sub-calls may add to the log, and how many it may make.
    pub subcalls: crate::subcall::SubCallLimits,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            approval_timeout: Duration::from_secs(300),
            body_grace: Duration::from_millis(100),
            max_content_bytes: 256 * 1024,
            max_json_depth: 128,
            record_content: false,
            max_context_bytes: 64 * 1024,
            user_code_deadline: Duration::from_secs(5),
            cancelled_deadline: Duration::from_secs(1),
            user_code_threads: 16,
            subcalls: Default::default(),
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
    /// Handed to every body: the protected paths, then each pre-execute handler's rules.
    pub(crate) policy: PathPolicies,
    /// Where user code the chain calls synchronously runs.
    pub(crate) user_code: BlockingPool,
    /// Some `tools/result` observer may block (`ResultObserver::may_block`, asked once): they
    /// run on the user-code pool; otherwise inline.
    pub(crate) observers_may_block: bool,
    /// The workspace declared paths are resolved through before a body runs: the first
    /// pre-execute handler's that has one (the file tools' sandbox).
    pub(crate) confinement: Option<Arc<dyn Confinement>>,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("tools", &self.registry.names())
            .field("hooks", &self.hooks)
            .field("approval", &self.approval.is_some())
            .field("policy", &self.policy)
            .finish()
    }
}

/// The pool job calling `tool`'s `finalize_content` on `content`, noting whether it ran dsh's
/// default (see `dsh_core::inline`).
fn finalize_job(
    tool: &RegisteredTool,
    content: Vec<ContentBlock>,
) -> impl FnOnce(&dsh_core::pool::Activity) -> (Vec<ContentBlock>, u8) + Send + 'static {
    let definition = tool.definition().clone();
    move |_| {
        let concrete = definition.concrete_type();
        dsh_core::inline::defaults_seen(concrete, || definition.finalize_content(content))
    }
}

/// A pool job's answer without what it learned of `tool`'s defaults, which `tool` keeps.
fn learn<T, E>(tool: &RegisteredTool, outcome: Result<(T, u8), E>) -> Result<T, E> {
    outcome.map(|(answer, seen)| {
        tool.learn_defaults(seen);
        answer
    })
}

/// What [`Pipeline::judge`] says of a call it did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// It would run.
    Allow,
    /// It would run only if the approver said yes; the question it would be asked.
    Ask(String),
    /// It would be refused before its body changed anything.
    Deny {
        /// The code its result would carry (`DENIED`; `UNKNOWN_TOOL`, `TOOL_INPUT_ERROR` or
        /// `PIPELINE_ERROR` for a call that cannot run at all).
        code: ErrorCode,
        /// Why, as the model would be told.
        reason: String,
    },
}

/// Where a call is, as far as cancellation cares: has its body started?
#[derive(Debug, Default)]
pub(crate) struct CallTrack {
    body_started: AtomicBool,
    freezing: AtomicBool,
    finalize_started: AtomicBool,
    observed: AtomicBool,
    /// When the body first started (ms since the Unix epoch; 0: never): the result's
    /// `startedAt`.
    started_at: AtomicU64,
    /// What the body published of its output so far (see `PartialOutput`).
    pub(crate) partial: PartialOutput,
}

impl CallTrack {
    /// True once the call's result is being frozen (a cancel then comes too late to change it).
    pub(crate) fn freezing(&self) -> bool {
        self.freezing.load(Ordering::SeqCst)
    }

    /// True the first time only: the observers may be given this call's result now.
    pub(crate) fn begin_observe(&self) -> bool {
        !self.observed.swap(true, Ordering::SeqCst)
    }

    /// True the first time only: `finalize_content` may be called for this call now.
    pub(crate) fn begin_finalize(&self) -> bool {
        !self.finalize_started.swap(true, Ordering::SeqCst)
    }

    pub(crate) fn mark_body_started(&self) {
        self.body_started.store(true, Ordering::SeqCst);
        // A retry runs the body again: the first start is when the call's body started.
        let _ = self.started_at.compare_exchange(
            0,
            dsh_core::event::now_ms().max(1),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// When the body first started, if it did (the result's `startedAt`).
    pub(crate) fn started_at(&self) -> Option<u64> {
        Some(self.started_at.load(Ordering::SeqCst)).filter(|&ms| ms != 0)
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
        let policy = PathPolicies::new(
            hooks
                .pre_execute_handlers()
                .iter()
                .filter_map(|h| h.path_policy())
                .collect(),
        );
        let confinement = hooks
            .pre_execute_handlers()
            .iter()
            .find_map(|h| h.confinement());
        let user_code = BlockingPool::on_runtime("user-code", config.user_code_threads);
        // An observer whose answer panics may block (the safe answer).
        let observers_may_block = hooks.observers().iter().any(|o| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| o.may_block())).unwrap_or(true)
        });
        Pipeline {
            observers_may_block,
            confinement,
            registry,
            hooks,
            guards,
            approval,
            config,
            policy,
            user_code,
        }
    }

    /// Puts `protected` in front of the handlers' path policies: no body may write them,
    /// whatever the rules say.
    pub fn protect(mut self, protected: ProtectedPaths) -> Pipeline {
        if !protected.is_empty() {
            let mut list: Vec<Arc<dyn PathPolicy>> = vec![Arc::new(protected)];
            list.push(Arc::new(self.policy));
            self.policy = PathPolicies::new(list);
        }
        self
    }

    /// The path policies every body gets in its `ToolContext`.
    pub fn path_policy(&self) -> &PathPolicies {
        &self.policy
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

    /// The call's tool and its arguments as JSON; an unknown tool, or arguments that did not
    /// parse or are too large, end the call.
    fn lookup(
        &self,
        input: &ToolExecutionInput,
    ) -> Result<(Arc<RegisteredTool>, Value), Candidate> {
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
            Arguments::Json(v) | Arguments::Exact { value: v, .. } => v.clone(),
            Arguments::Malformed { error, .. } => {
                return Err(Candidate::failed(
                    ErrorCode::ToolInputError,
                    format!("the arguments are not valid JSON: {error}"),
                ));
            }
            Arguments::Oversized { reason, .. } => {
                return Err(Candidate::failed(
                    ErrorCode::ToolInputError,
                    format!("{reason}; they were not run and the log keeps only their size"),
                ));
            }
        };
        // Optional arguments sent without being meant (strict function calling) are absent
        // for everything after this: hooks, rules, confinement and the body.
        let arguments = tool.without_absent(arguments);
        Ok((tool, arguments))
    }

    /// Judges a call without running it: "what would these rules do with it?" (`dsh run
    /// --dry-run`). Prepare runs as for a call that runs (the schema, the pre-execute
    /// waterfall with its verification pass, so command hooks *are* executed; the guards),
    /// but an `ask` is answered [`Judgement::Ask`] instead of being put to the approver; then
    /// the declared paths are resolved and put to the path policies, and the tool's
    /// [`dsh_core::ToolDefinition::dry_run`] makes the checks its body would make before
    /// changing anything (read-before-edit). No wrapper, no body, no observer runs and
    /// nothing is recorded. A tool may keep what a judged call would have done in its own
    /// state (a judged read counts as a read for read-before-edit, so a later edit is judged
    /// as it would run after it): judge calls on a harness that does not also run them.
    pub async fn judge(&self, input: &ToolExecutionInput) -> Judgement {
        let judged = async {
            let (tool, arguments) = self.lookup(input)?;
            let (arguments, decision) = pre_execute::run(self, &tool, input, arguments).await?;
            let asked = match decision {
                PreToolDecision::Allow => None,
                PreToolDecision::Ask(prompt) => Some(prompt),
                PreToolDecision::Deny(reason) => {
                    return Err(Candidate::failed(ErrorCode::Denied, reason));
                }
            };
            // A guard's denial stands whatever a human would answer to the ask.
            guard::check(self, input, &arguments).await?;
            dispatch::dry_run(self, &tool, input, arguments)
                .await
                .map_err(Candidate::from_failure)?;
            Ok(asked)
        };
        match judged.await {
            Ok(None) => Judgement::Allow,
            Ok(Some(prompt)) => Judgement::Ask(prompt),
            Err(ended) => match ended.error {
                Some(error) => Judgement::Deny {
                    code: error.code,
                    reason: error.message,
                },
                None => Judgement::Deny {
                    code: ErrorCode::PipelineError,
                    reason: "the call ended without a reason".into(),
                },
            },
        }
    }

    async fn prepare_and_dispatch(
        &self,
        input: &ToolExecutionInput,
        track: &CallTrack,
        dispatcher: Option<Arc<dyn SubCallDispatcher>>,
        call: &Span,
    ) -> Result<(Arc<RegisteredTool>, Value, Candidate), Candidate> {
        let (tool, arguments) = self.lookup(input)?;
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

    /// normalize → `finalize_content` → freeze → observers, for one result: `finalize_content`
    /// and the observers on the user-code pool, each under `deadline` (real time). The call's
    /// `track` makes `finalize_content` run, and the observers see a result, at most once for
    /// it (a result frozen again after a stuck freeze is neither finalized nor observed
    /// again).
    pub(crate) async fn freeze(
        &self,
        call_id: &str,
        tool_name: &str,
        candidate: Candidate,
        span: &Span,
        track: &CallTrack,
        deadline: Duration,
    ) -> FrozenResult {
        let frozen = self
            .finalize(call_id, tool_name, candidate, span, track, deadline)
            .await;
        self.observe(&frozen, span, track, deadline).await;
        frozen
    }

    /// The first half of [`Pipeline::freeze`]: normalize → `finalize_content` → freeze.
    pub(crate) async fn finalize(
        &self,
        call_id: &str,
        tool_name: &str,
        candidate: Candidate,
        span: &Span,
        track: &CallTrack,
        deadline: Duration,
    ) -> FrozenResult {
        track.freezing.store(true, Ordering::SeqCst);
        let snapshot = {
            let _in = span.enter();
            normalize::snapshot(&self.config, candidate)
        };
        let tool = self.registry.get(tool_name);
        let finalized = match &tool {
            Some(tool) if track.begin_finalize() => {
                if tool.defaults_known(dsh_core::inline::FINALIZE) {
                    // dsh's own default: it never blocks (see `dsh_core::inline`).
                    let content = snapshot.content.clone();
                    finalize::Finalized::Content(tool.definition().finalize_content(content))
                } else {
                    let job = finalize_job(tool, snapshot.content.clone());
                    let label = format!("finalize_content of `{tool_name}`");
                    let outcome = self.user_code.run(label, Some(deadline), job).await;
                    finalize::Finalized::from_pool(learn(tool, outcome), tool_name, deadline)
                }
            }
            Some(_) => finalize::Finalized::AlreadyCalled,
            None => finalize::Finalized::NoTool,
        };
        let _in = span.enter();
        finalize::freeze(&self.config, call_id, tool_name, snapshot, finalized)
    }

    /// The second half of [`Pipeline::freeze`]: the `tools/result` observers, once per call.
    pub(crate) async fn observe(
        &self,
        frozen: &FrozenResult,
        span: &Span,
        track: &CallTrack,
        deadline: Duration,
    ) {
        if track.begin_observe() {
            observe::notify(self, frozen, deadline)
                .instrument(span.clone())
                .await;
        }
    }

    /// [`Pipeline::freeze`] for a caller that cannot wait asynchronously (a sub-call's ledger):
    /// the same, blocking the calling thread for up to twice the user-code deadline.
    pub(crate) fn complete(
        &self,
        call_id: &str,
        tool_name: &str,
        candidate: Candidate,
        finalize: &Span,
    ) -> FrozenResult {
        let _in_finalize = finalize.enter();
        let snapshot = normalize::snapshot(&self.config, candidate);
        let deadline = self.config.user_code_deadline;
        let finalized = match self.registry.get(tool_name) {
            Some(tool) if tool.defaults_known(dsh_core::inline::FINALIZE) => {
                let content = snapshot.content.clone();
                finalize::Finalized::Content(tool.definition().finalize_content(content))
            }
            Some(tool) => {
                let job = finalize_job(&tool, snapshot.content.clone());
                let label = format!("finalize_content of `{tool_name}`");
                let outcome = self.user_code.run_blocking(label, Some(deadline), job);
                finalize::Finalized::from_pool(learn(&tool, outcome), tool_name, deadline)
            }
            None => finalize::Finalized::NoTool,
        };
        let frozen = finalize::freeze(&self.config, call_id, tool_name, snapshot, finalized);
        observe::notify_blocking(self, &frozen, deadline);
        frozen
    }
}
