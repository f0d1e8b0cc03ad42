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
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
                self.pipeline
                    .run(&input, &CallTrack::default(), None, &span)
                    .await
            } else {
                let _alone = self.barrier.write().await;
                self.pipeline
                    .run(&input, &CallTrack::default(), None, &span)
                    .await
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
        if let Err(e) = self.log.append(self.step, event).await {
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
