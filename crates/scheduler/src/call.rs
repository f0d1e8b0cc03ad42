//! The call-lifecycle actor: one per call, spawned linked to the scheduler.
//!
//! It owns the call's run through the chain (a task it can abandon) and answers the call's
//! frozen result exactly once, through a `CallReply` to the scheduler: the task freezes the
//! result itself (`finalize_content` and observers run on the user-code pool, which the actor
//! never waits on), and whichever of the task and `post_stop` takes the answer port first
//! answers. Its handlers are short, so supervisor signals reach it at once:
//!
//! - `stop` (the scheduler cancelling the call, the step or the session) ends the run where it
//!   is; `post_stop` answers `ABORTED_BEFORE_DISPATCH` if the body had not started and
//!   `ABORTED` if it had, even when the body would have succeeded. That result is frozen in a
//!   task of its own under [`crate::PipelineConfig::cancelled_deadline`], so a stop never
//!   waits on user code. A stop that finds the result already being frozen (its
//!   `finalize_content` called) comes too late to change it: the run answers it, given
//!   `cancelled_deadline` more; past that the call is answered `ABORTED`, not finalized again
//!   (`finalize_content` is called at most once per call).
//! - `kill` or a panic skips `post_stop`; the answer port is then dropped with the state and
//!   the scheduler closes the call itself (same codes).
//! - A panic in the run that escapes every stage's own guard is caught around the whole run
//!   and answered as `PIPELINE_ERROR`, so the run always reports back.
//!
//! Nothing stops an actor by itself: this one stops itself after answering.

use crate::pipeline::candidate::Candidate;
use crate::pipeline::panic;
use crate::pipeline::{CallTrack, Pipeline};
use crate::scheduler::SchedulerMsg;
use crate::subcall::SubCalls;
use crate::telemetry;
use dsh_core::live::LiveActor;
use dsh_core::{ErrorCode, FrozenResult, SubCallDispatcher, ToolExecutionInput};
use dsh_session::SessionError;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tracing::Instrument;

/// The tool/call acknowledgement, shared by the call and the scheduler.
pub(crate) type SharedAck = Shared<BoxFuture<'static, Result<u64, SessionError>>>;

/// What a call answers.
#[derive(Debug, Clone)]
pub(crate) struct CallOutcome {
    pub result: FrozenResult,
    pub contexts: Vec<String>,
    /// A sub-call's `tool/code-dispatch` that could not be recorded (the step reports it).
    pub log_error: Option<SessionError>,
}

/// The call actor's messages.
#[derive(Debug)]
pub(crate) enum CallMsg {
    /// The run answered the call (or found it answered).
    Finished,
    /// The `tool/call` could not be recorded: the call must not run.
    NotRecorded(SessionError),
}

/// Where a call's answer goes: straight to the scheduler, as one `CallDone` carrying the
/// call's acknowledgement too (no forwarding task per call). Dropped unsent (the actor was
/// killed or failed, or its `tool/call` was not recorded), it tells the scheduler that the call
/// ended without an answer, as a dropped oneshot did.
pub(crate) struct CallReply {
    scheduler: ActorRef<SchedulerMsg>,
    step: u64,
    index: usize,
    recorded: SharedAck,
    sent: bool,
}

impl CallReply {
    /// The answer of call `index` of `step`, whose `tool/call` acknowledgement is `recorded`.
    pub(crate) fn new(
        scheduler: ActorRef<SchedulerMsg>,
        step: u64,
        index: usize,
        recorded: SharedAck,
    ) -> CallReply {
        CallReply {
            scheduler,
            step,
            index,
            recorded,
            sent: false,
        }
    }

    /// Answers the call.
    pub(crate) fn send(mut self, outcome: CallOutcome) {
        self.sent = true;
        self.deliver(Some(outcome));
    }

    fn deliver(&self, outcome: Option<CallOutcome>) {
        let (step, index) = (self.step, self.index);
        if let Some(recorded) = self.recorded.peek() {
            let _ = self.scheduler.send_message(SchedulerMsg::CallDone {
                step,
                index,
                recorded: recorded.clone(),
                outcome,
            });
            return;
        }
        // Not acknowledged yet (a call stopped before its run awaited it): wait for it.
        let (scheduler, recorded) = (self.scheduler.clone(), self.recorded.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let recorded = recorded.await;
                    let _ = scheduler.send_message(SchedulerMsg::CallDone {
                        step,
                        index,
                        recorded,
                        outcome,
                    });
                });
            }
            Err(_) => {
                // Actors live on a runtime, so this is not expected; the scheduler's shutdown
                // closes the call if it ever happens.
                tracing::error!(step, index, "a call's answer was dropped outside a runtime");
            }
        }
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        if !self.sent {
            self.deliver(None);
        }
    }
}

/// The call's answer port, taken once by whoever answers first: the run or `post_stop`.
type AnswerPort = Arc<std::sync::Mutex<Option<CallReply>>>;

fn take(port: &AnswerPort) -> Option<CallReply> {
    port.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// What freezing and answering a call needs.
#[derive(Clone)]
struct Answering {
    pipeline: Arc<Pipeline>,
    input: ToolExecutionInput,
    track: Arc<CallTrack>,
    subcalls: Arc<SubCalls>,
    span: tracing::Span,
    /// The run's outcome once frozen, before its observers: what a stop that comes while
    /// they run answers.
    frozen: Arc<std::sync::Mutex<Option<CallOutcome>>>,
    /// The call's `additionalContexts` go at the end of its own result (SPEC.md's "Deferred
    /// context without a next message") instead of after the step.
    contexts_in_result: bool,
}

pub(crate) struct CallArgs {
    pub pipeline: Arc<Pipeline>,
    pub input: ToolExecutionInput,
    pub recorded: SharedAck,
    pub track: Arc<CallTrack>,
    pub reply: CallReply,
    pub subcalls: Arc<SubCalls>,
    pub span: tracing::Span,
    pub contexts_in_result: bool,
}

pub(crate) struct CallLifecycle;

pub(crate) struct CallState {
    answering: Answering,
    reply: AnswerPort,
    run: Option<tokio::task::JoinHandle<()>>,
    _live: LiveActor,
}

impl Drop for CallState {
    fn drop(&mut self) {
        if let Some(run) = self.run.take() {
            run.abort();
        }
    }
}

/// The candidate of a call interrupted by a cancel, by phase; a body that published its
/// output so far has it shown after the message.
pub(crate) fn interrupted(input: &ToolExecutionInput, track: &CallTrack) -> Candidate {
    let reason = input
        .signal
        .reason()
        .map(|r| r.to_string())
        .unwrap_or_else(|| "the call was stopped".to_string());
    if track.body_started() {
        let message = format!("the call was cancelled while it ran: {reason}");
        let mut aborted = Candidate::failed(ErrorCode::Aborted, message.clone());
        if let Some(content) = track.partial_content(&message) {
            aborted.content = content;
        }
        aborted
    } else {
        Candidate::failed(
            ErrorCode::AbortedBeforeDispatch,
            format!("the call was cancelled before it started: {reason}"),
        )
    }
}

/// `result` with `contexts` appended as its last text blocks (they were bounded with the
/// call's other contexts, after the content was).
fn with_contexts(result: &FrozenResult, contexts: Vec<String>) -> FrozenResult {
    result.with_contexts(contexts)
}

impl Answering {
    /// Closes the sub-calls still in flight and freezes the result under `deadline`.
    async fn outcome(
        &self,
        mut candidate: Candidate,
        finalize: &tracing::Span,
        deadline: std::time::Duration,
    ) -> CallOutcome {
        let reason = self.input.signal.reason().map_or_else(
            || "the parent call ended first".to_string(),
            |r| r.to_string(),
        );
        let unrecorded = self.subcalls.close(&reason);
        let log_error = match unrecorded {
            Some((sub_call, error)) => {
                // What the body made of that sub-call's outcome cannot be rebuilt from the log,
                // so the model does not see it (an interrupt stays an interrupt).
                if !candidate.error.as_ref().is_some_and(|e| e.code.is_abort()) {
                    candidate = Candidate::failed(
                        ErrorCode::PipelineError,
                        format!(
                            "sub-call {sub_call} ran but its tool/code-dispatch could not be recorded ({error}); the call's result is withheld"
                        ),
                    );
                }
                Some(error)
            }
            None => None,
        };
        let mut contexts = std::mem::take(&mut candidate.contexts);
        let mut result = self
            .pipeline
            .finalize(
                &self.input.call_id,
                &self.input.name,
                candidate,
                finalize,
                &self.track,
                deadline,
            )
            .await;
        if self.contexts_in_result && !contexts.is_empty() {
            result = with_contexts(&result, std::mem::take(&mut contexts));
        }
        telemetry::record_outcome(&self.span, &result, self.pipeline.config.record_content);
        let outcome = CallOutcome {
            result,
            contexts,
            log_error,
        };
        *self.frozen.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome.clone());
        self.pipeline
            .observe(&outcome.result, finalize, &self.track, deadline)
            .await;
        outcome
    }
}

impl Actor for CallLifecycle {
    type Msg = CallMsg;
    type State = CallState;
    type Arguments = CallArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<CallMsg>,
        args: CallArgs,
    ) -> Result<CallState, ActorProcessingErr> {
        let CallArgs {
            pipeline,
            input,
            recorded,
            track,
            reply,
            subcalls,
            span,
            contexts_in_result,
        } = args;
        let dispatcher: Option<Arc<dyn SubCallDispatcher>> = Some(subcalls.clone());
        let answering = Answering {
            pipeline,
            input,
            track,
            subcalls,
            span,
            frozen: Arc::default(),
            contexts_in_result,
        };
        let reply: AnswerPort = Arc::new(std::sync::Mutex::new(Some(reply)));
        let run = {
            let answering = answering.clone();
            let reply = reply.clone();
            let call_span = answering.span.clone();
            let instrument = answering.span.clone();
            tokio::spawn(
                async move {
                    let Answering {
                        pipeline,
                        input,
                        track,
                        ..
                    } = &answering;
                    // Write-ahead: nothing of the call runs before its tool/call is durable.
                    let msg = match recorded.await {
                        Ok(_) => {
                            // Every stage catches its own panics; this catches what escapes
                            // them, so the call still answers instead of hanging its step.
                            let run = pipeline.run(input, track, dispatcher, &call_span);
                            let (candidate, finalize) =
                                match AssertUnwindSafe(run).catch_unwind().await {
                                    Ok(ran) => ran,
                                    Err(payload) => {
                                        let why = panic::message(payload.as_ref());
                                        tracing::error!(call_id = %input.call_id, panic = %why, "the pipeline panicked");
                                        (
                                            Candidate::failed(
                                                ErrorCode::PipelineError,
                                                format!("the pipeline panicked: {why}"),
                                            ),
                                            telemetry::phase_span(&call_span, "finalize"),
                                        )
                                    }
                                };
                            let deadline = pipeline.config.user_code_deadline;
                            let outcome = answering.outcome(candidate, &finalize, deadline).await;
                            // Unless a stop gave up waiting on this freeze and answered first.
                            if let Some(port) = take(&reply) {
                                port.send(outcome);
                            }
                            CallMsg::Finished
                        }
                        Err(e) => CallMsg::NotRecorded(e),
                    };
                    let _ = myself.send_message(msg);
                }
                .instrument(instrument),
            )
        };
        Ok(CallState {
            answering,
            reply,
            run: Some(run),
            _live: LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<CallMsg>,
        msg: CallMsg,
        state: &mut CallState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CallMsg::Finished => {}
            CallMsg::NotRecorded(e) => {
                // Dropping the reply tells the scheduler; it knows from the ack why.
                tracing::error!(call_id = %state.answering.input.call_id, error = %e, "tool/call not recorded; the call does not run");
                drop(take(&state.reply));
            }
        }
        myself.stop(None);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<CallMsg>,
        state: &mut CallState,
    ) -> Result<(), ActorProcessingErr> {
        let answered = state
            .reply
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none();
        if answered {
            return Ok(());
        }
        let answering = state.answering.clone();
        let deadline = answering.pipeline.config.cancelled_deadline;
        if answering.track.freezing() {
            // The result is being frozen: the call has ended, and a cancel arriving now does
            // not change its result (its observers may be seeing it already). The run answers
            // it, given `cancelled_deadline` more; past that, this answers what the run froze,
            // or `ABORTED` (not finalized again) if its finalize_content is stuck, so a stop
            // never waits on user code for long.
            let run = state.run.take();
            let port = state.reply.clone();
            tokio::spawn(async move {
                tokio::time::sleep(deadline).await;
                if let Some(port) = take(&port) {
                    if let Some(run) = run {
                        run.abort();
                    }
                    // Frozen but held up by its observers: that result. Else `ABORTED`.
                    let frozen = answering
                        .frozen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take();
                    let outcome = match frozen {
                        Some(outcome) => outcome,
                        None => {
                            let candidate = interrupted(&answering.input, &answering.track);
                            let finalize = telemetry::phase_span(&answering.span, "finalize");
                            answering.outcome(candidate, &finalize, deadline).await
                        }
                    };
                    port.send(outcome);
                }
            });
        } else if let Some(port) = take(&state.reply) {
            // Stopped before the run answered: a cancel.
            if let Some(run) = state.run.take() {
                run.abort();
            }
            let candidate = interrupted(&answering.input, &answering.track);
            let finalize = telemetry::phase_span(&answering.span, "finalize");
            // Frozen off this handler: a stop never waits on user code.
            tokio::spawn(async move {
                let outcome = answering.outcome(candidate, &finalize, deadline).await;
                port.send(outcome);
            });
        }
        Ok(())
    }
}
