//! The call-lifecycle actor: one per call, spawned linked to the scheduler.
//!
//! It owns the call's run through the chain (a task it can abandon) and answers the call's
//! frozen result exactly once, through a oneshot the scheduler waits on. Its handlers are
//! short, so supervisor signals reach it at once:
//!
//! - `stop` (the scheduler cancelling the call, the step or the session) ends the run where it
//!   is; `post_stop` answers `ABORTED_BEFORE_DISPATCH` if the body had not started and
//!   `ABORTED` if it had, even when the body would have succeeded.
//! - `kill` or a panic skips `post_stop`; the answer port is then dropped with the state and
//!   the scheduler closes the call itself (same codes).
//! - A panic in the run that escapes every stage's own guard is caught around the whole run
//!   and answered as `PIPELINE_ERROR`, so the run always reports back.
//!
//! Nothing stops an actor by itself: this one stops itself after answering.

use crate::pipeline::candidate::Candidate;
use crate::pipeline::panic;
use crate::pipeline::{CallTrack, Pipeline};
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
use tokio::sync::oneshot;
use tracing::Instrument;

/// The tool/call acknowledgement, shared by the call and the scheduler.
pub(crate) type SharedAck = Shared<BoxFuture<'static, Result<u64, SessionError>>>;

/// What a call answers.
#[derive(Debug)]
pub(crate) struct CallOutcome {
    pub result: FrozenResult,
    pub contexts: Vec<String>,
    /// A sub-call's `tool/code-dispatch` that could not be recorded (the step reports it).
    pub log_error: Option<SessionError>,
}

/// The call actor's messages.
#[derive(Debug)]
pub(crate) enum CallMsg {
    /// The run reached a candidate (with its `finalize` span).
    Finished(Candidate, tracing::Span),
    /// The `tool/call` could not be recorded: the call must not run.
    NotRecorded(SessionError),
}

pub(crate) struct CallArgs {
    pub pipeline: Arc<Pipeline>,
    pub input: ToolExecutionInput,
    pub recorded: SharedAck,
    pub track: Arc<CallTrack>,
    pub reply: oneshot::Sender<CallOutcome>,
    pub subcalls: Arc<SubCalls>,
    pub span: tracing::Span,
}

pub(crate) struct CallLifecycle;

pub(crate) struct CallState {
    pipeline: Arc<Pipeline>,
    input: ToolExecutionInput,
    track: Arc<CallTrack>,
    reply: Option<oneshot::Sender<CallOutcome>>,
    run: Option<tokio::task::JoinHandle<()>>,
    subcalls: Arc<SubCalls>,
    span: tracing::Span,
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

impl CallState {
    fn answer(&mut self, mut candidate: Candidate, finalize: &tracing::Span) {
        let Some(reply) = self.reply.take() else {
            return;
        };
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
        let contexts = std::mem::take(&mut candidate.contexts);
        let result =
            self.pipeline
                .complete(&self.input.call_id, &self.input.name, candidate, finalize);
        telemetry::record_outcome(&self.span, &result, self.pipeline.config.record_content);
        let _ = reply.send(CallOutcome {
            result,
            contexts,
            log_error,
        });
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
        } = args;
        let dispatcher: Option<Arc<dyn SubCallDispatcher>> = Some(subcalls.clone());
        let run = {
            let pipeline = pipeline.clone();
            let input = input.clone();
            let track = track.clone();
            let call_span = span.clone();
            tokio::spawn(
                async move {
                    // Write-ahead: nothing of the call runs before its tool/call is durable.
                    let msg = match recorded.await {
                        Ok(_) => {
                            // Every stage catches its own panics; this catches what escapes
                            // them, so the call still answers instead of hanging its step.
                            let run = pipeline.run(&input, &track, dispatcher, &call_span);
                            match AssertUnwindSafe(run).catch_unwind().await {
                                Ok((candidate, finalize)) => CallMsg::Finished(candidate, finalize),
                                Err(payload) => {
                                    let why = panic::message(payload.as_ref());
                                    tracing::error!(call_id = %input.call_id, panic = %why, "the pipeline panicked");
                                    CallMsg::Finished(
                                        Candidate::failed(
                                            ErrorCode::PipelineError,
                                            format!("the pipeline panicked: {why}"),
                                        ),
                                        telemetry::phase_span(&call_span, "finalize"),
                                    )
                                }
                            }
                        }
                        Err(e) => CallMsg::NotRecorded(e),
                    };
                    let _ = myself.send_message(msg);
                }
                .instrument(span.clone()),
            )
        };
        Ok(CallState {
            pipeline,
            input,
            track,
            reply: Some(reply),
            run: Some(run),
            subcalls,
            span,
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
            CallMsg::Finished(candidate, finalize) => state.answer(candidate, &finalize),
            CallMsg::NotRecorded(e) => {
                // Dropping the reply tells the scheduler; it knows from the ack why.
                tracing::error!(call_id = %state.input.call_id, error = %e, "tool/call not recorded; the call does not run");
                state.reply = None;
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
        if state.reply.is_some() {
            // Stopped before the run finished: a cancel.
            if let Some(run) = state.run.take() {
                run.abort();
            }
            let candidate = interrupted(&state.input, &state.track);
            let finalize = telemetry::phase_span(&state.span, "finalize");
            state.answer(candidate, &finalize);
        }
        Ok(())
    }
}
