//! Sub-calls (code mode): a running call sends tool calls back through the same pipeline.
//!
//! Each sub-call passes every stage (pre-execute, approval, guards, wrappers, body,
//! post-execute, normalization, `finalize_content`, observers) under a signal that is a child
//! of its parent's, so cancelling the parent cancels it. It rides its parent's lifecycle
//! actor: if that actor is stopped, the sub-call's future is dropped with the parent's run.
//! Its `additionalContexts` are dropped (logged), so the parent call and its result stay
//! adjacent in the transcript; it is recorded as a `tool/code-dispatch` event with its
//! outcome. Parallel-safe sub-calls share a pool of the session's cap; exclusive ones run
//! alone.
//!
//! Every sub-call's result is frozen by [`Pipeline::complete`] exactly once (so
//! `finalize_content` and the `tools/result` observers see it), whichever way it ends: run to
//! its end, closed by the ledger as its parent answers (`ABORTED`, or
//! `ABORTED_BEFORE_DISPATCH` if its body had not started: the late sub-call then answers that
//! same result), or refused because the parent had already answered
//! (`ABORTED_BEFORE_DISPATCH`, not recorded: the parent's result is in the log already). A
//! sub-call whose `tool/code-dispatch` cannot be recorded still answers its result, and its
//! parent's result becomes `PIPELINE_ERROR` (what the body made of it could not be rebuilt
//! from the log) and the step reports the log failure.

use crate::pipeline::candidate::Candidate;
use crate::pipeline::panic;
use crate::pipeline::{CallTrack, Pipeline};
use crate::telemetry;
use async_trait::async_trait;
use dsh_core::event::CodeDispatchData;
use dsh_core::{
    Arguments, CancelHandle, ErrorCode, EventBody, ExecutionMode, FrozenResult, SubCallDispatcher,
    ToolContext, ToolExecutionInput,
};
use dsh_session::{SessionError, SessionLog};
use futures::FutureExt;
use serde_json::Value;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{RwLock, Semaphore};
use tracing::{Instrument, Span};

/// The dispatcher handed to one call's body.
pub(crate) struct SubCalls {
    pipeline: Arc<Pipeline>,
    log: SessionLog,
    step: u64,
    parent_call_id: String,
    next: AtomicU64,
    pool: Semaphore,
    /// Parallel sub-calls hold it shared, exclusive ones alone.
    barrier: RwLock<()>,
    ledger: Mutex<Ledger>,
}

/// Which sub-calls are in flight, and whether the parent has answered.
#[derive(Default)]
struct Ledger {
    closed: bool,
    in_flight: HashMap<String, InFlight>,
    /// The results `close` gave sub-calls that were still in flight, for those that end
    /// later to answer.
    closed_out: HashMap<String, FrozenResult>,
    /// The first sub-call whose `tool/code-dispatch` could not be recorded.
    unrecorded: Option<(String, SessionError)>,
}

struct InFlight {
    name: String,
    arguments: Value,
    track: Arc<CallTrack>,
    span: Span,
}

fn dispatch_event(parent_call_id: &str, arguments: Value, result: &FrozenResult) -> EventBody {
    EventBody::CodeDispatch(CodeDispatchData {
        call_id: result.call_id().to_string(),
        parent_call_id: parent_call_id.to_string(),
        name: result.tool().to_string(),
        arguments,
        message: result.content().to_vec(),
        error: result.error_info().cloned(),
    })
}

impl SubCalls {
    pub(crate) fn new(
        pipeline: Arc<Pipeline>,
        log: SessionLog,
        step: u64,
        parent_call_id: String,
        cap: usize,
    ) -> SubCalls {
        SubCalls {
            pipeline,
            log,
            step,
            parent_call_id,
            next: AtomicU64::new(1),
            pool: Semaphore::new(cap.max(1)),
            barrier: RwLock::new(()),
            ledger: Mutex::new(Ledger::default()),
        }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Freezes a sub-call's result (snapshot, `finalize_content`, observers) in its
    /// `finalize` span (a new one if the run made none).
    fn complete(
        &self,
        call_id: &str,
        name: &str,
        candidate: Candidate,
        span: &Span,
        finalize: Option<Span>,
    ) -> FrozenResult {
        let finalize = finalize.unwrap_or_else(|| telemetry::phase_span(span, "finalize"));
        let result = self.pipeline.complete(call_id, name, candidate, &finalize);
        telemetry::record_outcome(span, &result, self.pipeline.config.record_content);
        result
    }

    /// Called as the parent answers: every sub-call still in flight (cancelled with its
    /// parent, or left behind by the body) is closed now, `ABORTED` (or
    /// `ABORTED_BEFORE_DISPATCH` if its body had not started), and recorded, so all of them
    /// sit before the parent's `tool/result`; a sub-call ending later records nothing and
    /// answers that result. Answers the first sub-call whose record failed, if any.
    pub(crate) fn close(&self, reason: &str) -> Option<(String, SessionError)> {
        let mut ledger = self.ledger();
        ledger.closed = true;
        let mut left: Vec<(String, InFlight)> = ledger.in_flight.drain().collect();
        left.sort_by(|a, b| a.0.cmp(&b.0));
        for (call_id, f) in left {
            let candidate = if f.track.body_started() {
                Candidate::failed(
                    ErrorCode::Aborted,
                    format!("the sub-call was cancelled while it ran: {reason}"),
                )
            } else {
                Candidate::failed(
                    ErrorCode::AbortedBeforeDispatch,
                    format!("the sub-call was cancelled before it started: {reason}"),
                )
            };
            let result = self.complete(&call_id, &f.name, candidate, &f.span, None);
            // Sent, not awaited: the order of sends is the order in the log, and the parent's
            // result is sent after this returns.
            drop(self.log.send(
                self.step,
                dispatch_event(&self.parent_call_id, f.arguments, &result),
            ));
            ledger.closed_out.insert(call_id, result);
        }
        ledger.unrecorded.take()
    }

    /// Parallel only if the definition says so and its check returns exactly `true`; a
    /// definition whose `execution_mode` or `is_concurrency_safe` panics is exclusive.
    fn is_parallel(&self, name: &str, arguments: &Value) -> bool {
        let Some(tool) = self.pipeline.registry.get(name) else {
            return true;
        };
        let def = tool.definition();
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            def.execution_mode() == ExecutionMode::Parallel && def.is_concurrency_safe(arguments)
        }))
        .unwrap_or(false)
    }
}

#[async_trait]
impl SubCallDispatcher for SubCalls {
    async fn dispatch(&self, parent: &ToolContext, name: &str, arguments: Value) -> FrozenResult {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let call_id = format!("{}.sub{n}", self.parent_call_id);
        let (_handle, signal) = CancelHandle::child_of(&parent.signal);
        // Bounded before anything records them: an oversized sub-call logs only its size and
        // ends TOOL_INPUT_ERROR, like a top-level call.
        let bounded = Arguments::from_value(arguments);
        let arguments = bounded.to_logged();
        let input = ToolExecutionInput {
            call_id: call_id.clone(),
            name: name.to_string(),
            arguments: bounded,
            agent: parent.agent.clone(),
            signal,
            parent: Some(self.parent_call_id.clone()),
        };
        let track = Arc::new(CallTrack::default());
        let span = telemetry::call_span(
            name,
            &call_id,
            self.step,
            Some(&self.parent_call_id),
            &input.arguments,
            self.pipeline.config.record_content,
        );
        let refused = {
            let mut ledger = self.ledger();
            if ledger.closed {
                true
            } else {
                ledger.in_flight.insert(
                    call_id.clone(),
                    InFlight {
                        name: name.to_string(),
                        arguments: arguments.clone(),
                        track: track.clone(),
                        span: span.clone(),
                    },
                );
                false
            }
        };
        if refused {
            // Not recorded: the parent's result is in the log already, and nothing may
            // follow it.
            return self.complete(
                &call_id,
                name,
                Candidate::failed(
                    ErrorCode::AbortedBeforeDispatch,
                    "the parent call has already answered; the sub-call did not run",
                ),
                &span,
                None,
            );
        }
        let run = async {
            let run = async {
                if name == crate::RUN_CODE {
                    let denied = Candidate::failed(
                        ErrorCode::Denied,
                        "code cannot call run_code from inside run_code",
                    );
                    (denied, None)
                } else if self.is_parallel(name, &arguments) {
                    let _slot = self.pool.acquire().await;
                    let _shared = self.barrier.read().await;
                    let (candidate, finalize) =
                        self.pipeline.run(&input, &track, None, &span).await;
                    (candidate, Some(finalize))
                } else {
                    let _alone = self.barrier.write().await;
                    let (candidate, finalize) =
                        self.pipeline.run(&input, &track, None, &span).await;
                    (candidate, Some(finalize))
                }
            };
            match AssertUnwindSafe(run).catch_unwind().await {
                Ok(ran) => ran,
                Err(payload) => {
                    let why = panic::message(payload.as_ref());
                    tracing::error!(call_id = %call_id, panic = %why, "the pipeline panicked in a sub-call");
                    let failed = Candidate::failed(
                        ErrorCode::PipelineError,
                        format!("the pipeline panicked: {why}"),
                    );
                    (failed, None)
                }
            }
        };
        let (mut candidate, finalize) = run.instrument(span.clone()).await;
        if !candidate.contexts.is_empty() {
            tracing::info!(
                call_id = %call_id,
                dropped = candidate.contexts.len(),
                "additionalContexts of a sub-call are dropped so run_code and its result stay adjacent"
            );
            candidate.contexts.clear();
        }
        // Under the ledger's lock, so that `close` either sees the sub-call in flight (and
        // closes it) or finds it frozen and its record sent: never a record after the parent's
        // result.
        let (result, ack) = {
            let mut ledger = self.ledger();
            if ledger.in_flight.remove(&call_id).is_none() {
                // The parent answered first and closed this sub-call: that is its result.
                let closed = ledger.closed_out.remove(&call_id);
                drop(ledger);
                return closed.unwrap_or_else(|| {
                    self.complete(
                        &call_id,
                        name,
                        Candidate::failed(
                            ErrorCode::Aborted,
                            "the parent call answered before the sub-call ended",
                        ),
                        &span,
                        finalize,
                    )
                });
            }
            let result = self.complete(&call_id, name, candidate, &span, finalize);
            let ack = self.log.send(
                self.step,
                dispatch_event(&self.parent_call_id, arguments, &result),
            );
            (result, ack)
        };
        if let Err(e) = ack.await {
            tracing::error!(call_id = %call_id, error = %e, "could not record a code dispatch; the parent's result will be withheld");
            self.ledger().unrecorded.get_or_insert((call_id, e));
        }
        result
    }

    fn tool_names(&self) -> Vec<String> {
        self.pipeline
            .registry
            .names()
            .into_iter()
            .filter(|n| n != crate::RUN_CODE)
            .collect()
    }
}
