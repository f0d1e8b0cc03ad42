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

use crate::pipeline::{CallTrack, Pipeline};
use crate::telemetry;
use async_trait::async_trait;
use dsh_core::event::CodeDispatchData;
use dsh_core::{
    Arguments, CancelHandle, ErrorCode, EventBody, ExecutionMode, FrozenResult, SubCallDispatcher,
    ToolContext, ToolError, ToolExecutionInput,
};
use dsh_session::SessionLog;
use serde_json::Value;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{RwLock, Semaphore};
use tracing::Instrument;

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
}

struct InFlight {
    name: String,
    arguments: Value,
    track: Arc<CallTrack>,
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

    /// Called as the parent answers: every sub-call still in flight (cancelled with its
    /// parent, or left behind by the body) is recorded now as `ABORTED`, so all of them sit
    /// before the parent's `tool/result`; a sub-call ending later records nothing.
    pub(crate) fn close(&self, reason: &str) {
        let mut ledger = self.ledger();
        ledger.closed = true;
        let mut left: Vec<(String, InFlight)> = ledger.in_flight.drain().collect();
        left.sort_by(|a, b| a.0.cmp(&b.0));
        for (call_id, f) in left {
            let (code, message) = if f.track.body_started() {
                (
                    ErrorCode::Aborted,
                    format!("the sub-call was cancelled while it ran: {reason}"),
                )
            } else {
                (
                    ErrorCode::AbortedBeforeDispatch,
                    format!("the sub-call was cancelled before it started: {reason}"),
                )
            };
            // Sent, not awaited: the order of sends is the order in the log, and the parent's
            // result is sent after this returns.
            drop(self.log.send(
                self.step,
                EventBody::CodeDispatch(CodeDispatchData {
                    call_id,
                    parent_call_id: self.parent_call_id.clone(),
                    name: f.name,
                    arguments: f.arguments,
                    message: vec![dsh_core::ContentBlock::text(message.clone())],
                    error: Some(ToolError::new(code, message)),
                }),
            ));
        }
    }

    fn is_parallel(&self, name: &str, arguments: &Value) -> bool {
        let Some(tool) = self.pipeline.registry.get(name) else {
            return true;
        };
        let def = tool.definition();
        def.execution_mode() == ExecutionMode::Parallel
            && std::panic::catch_unwind(AssertUnwindSafe(|| def.is_concurrency_safe(arguments)))
                .unwrap_or(false)
    }
}

#[async_trait]
impl SubCallDispatcher for SubCalls {
    async fn dispatch(&self, parent: &ToolContext, name: &str, arguments: Value) -> FrozenResult {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let call_id = format!("{}.sub{n}", self.parent_call_id);
        let (_handle, signal) = CancelHandle::child_of(&parent.signal);
        let input = ToolExecutionInput {
            call_id: call_id.clone(),
            name: name.to_string(),
            arguments: Arguments::Json(arguments.clone()),
            agent: parent.agent.clone(),
            signal,
            parent: Some(self.parent_call_id.clone()),
        };
        let track = Arc::new(CallTrack::default());
        {
            let mut ledger = self.ledger();
            if ledger.closed {
                return FrozenResult::error(
                    call_id,
                    name,
                    ToolError::new(
                        ErrorCode::AbortedBeforeDispatch,
                        "the parent call has already answered; the sub-call did not run",
                    ),
                );
            }
            ledger.in_flight.insert(
                call_id.clone(),
                InFlight {
                    name: name.to_string(),
                    arguments: arguments.clone(),
                    track: track.clone(),
                },
            );
        }
        let record = self.pipeline.config.record_content;
        let span = telemetry::call_span(
            name,
            &call_id,
            self.step,
            Some(&self.parent_call_id),
            &input.arguments,
            record,
        );
        let run = async {
            if name == crate::RUN_CODE {
                (
                    crate::pipeline::candidate::Candidate::failed(
                        ErrorCode::Denied,
                        "code cannot call run_code from inside run_code",
                    ),
                    telemetry::phase_span(&span, "finalize"),
                )
            } else if self.is_parallel(name, &arguments) {
                let _slot = self.pool.acquire().await;
                let _shared = self.barrier.read().await;
                self.pipeline.run(&input, &track, None, &span).await
            } else {
                let _alone = self.barrier.write().await;
                self.pipeline.run(&input, &track, None, &span).await
            }
        };
        let (candidate, finalize) = run.instrument(span.clone()).await;
        let mut candidate = candidate;
        if !candidate.contexts.is_empty() {
            tracing::info!(
                call_id = %call_id,
                dropped = candidate.contexts.len(),
                "additionalContexts of a sub-call are dropped so run_code and its result stay adjacent"
            );
            candidate.contexts.clear();
        }
        let result = self.pipeline.complete(&call_id, name, candidate, &finalize);
        telemetry::record_outcome(&span, &result, record);
        let event = EventBody::CodeDispatch(CodeDispatchData {
            call_id,
            parent_call_id: self.parent_call_id.clone(),
            name: name.to_string(),
            arguments,
            message: result.content().to_vec(),
            error: result.error_info().cloned(),
        });
        let ack = {
            let mut ledger = self.ledger();
            if ledger.in_flight.remove(result.call_id()).is_none() {
                // The parent answered first and recorded this sub-call as aborted.
                return FrozenResult::error(
                    result.call_id(),
                    name,
                    ToolError::new(
                        ErrorCode::Aborted,
                        "the parent call answered before the sub-call ended",
                    ),
                );
            }
            self.log.send(self.step, event)
        };
        if let Err(e) = ack.await {
            tracing::error!(error = %e, "could not record a code dispatch");
            return FrozenResult::error(
                result.call_id(),
                name,
                ToolError::new(
                    ErrorCode::PipelineError,
                    format!("the sub-call ran but could not be recorded: {e}"),
                ),
            );
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
