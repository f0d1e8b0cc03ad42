//! The body's side of a script: runs the sub-calls the engine asks for, through the
//! dispatcher, and hands each outcome back.
//!
//! Every sub-call future lives in the body's own task, so when the pipeline stops waiting for
//! the body (cancel, deadline) they are dropped with it, and until then they run
//! concurrently: the dispatcher decides what may overlap (its pool and barrier). Sub-calls
//! carry a child of the call's signal, fired when the script is stopped, so a script that
//! stops does not leave work running; calls the script made and did not await are waited for
//! (up to the deadline) so that what it asked for happens and is reported. When the call
//! itself is aborted, its sub-calls are dropped at once instead: the aborted result does not
//! wait for them, and a `tool/code-dispatch` must never follow its parent's result.

use crate::bridge::{EngineReport, HostMsg, ScriptEnd, Stop, SubCallRequest};
use crate::engine::{self, EngineJob};
use crate::error::CodeModeError;
use crate::limits::CodeLimits;
use crate::report::SubCallRecord;
use dsh_core::dispatcher::RUN_CODE;
use dsh_core::{CancelHandle, CancelReason, FrozenResult, SubCallDispatcher, ToolContext};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A script that is over, with every sub-call it made.
pub(crate) struct Finished {
    pub report: EngineReport,
    pub calls: Vec<SubCallRecord>,
}

/// Runs `code` to its end.
pub(crate) async fn run(
    code: &str,
    limits: &CodeLimits,
    ctx: &ToolContext,
    dispatcher: Arc<dyn SubCallDispatcher>,
) -> Result<Finished, CodeModeError> {
    let tools: Vec<String> = dispatcher
        .tool_names()
        .into_iter()
        .filter(|n| n != RUN_CODE)
        .collect();
    let (sub_handle, sub_signal) = CancelHandle::child_of(&ctx.signal);
    let sub_ctx = ToolContext {
        signal: sub_signal,
        ..ctx.clone()
    };
    let now = Instant::now();
    // A limit too far out to represent is no limit: a year stands for it.
    let deadline = now
        .checked_add(limits.timeout)
        .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
    let (to_host, mut requests) = mpsc::unbounded_channel();
    let (to_engine, from_host) = std::sync::mpsc::channel();
    let mut done = engine::spawn(EngineJob {
        code: code.to_string(),
        tools,
        limits: limits.clone(),
        deadline,
        signal: ctx.signal.clone(),
        to_host,
        from_host,
    })
    .map_err(|e| CodeModeError::Spawn(e.to_string()))?;

    let mut calls: Vec<SubCallRecord> = Vec::new();
    let mut running: FuturesUnordered<BoxFuture<'static, (u32, FrozenResult)>> =
        FuturesUnordered::new();
    let mut report: Option<EngineReport> = None;
    let mut engine_open = true;
    let mut told_cancel = false;
    let mut abandoned = false;
    let mut past_deadline = false;
    let timer = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline));
    tokio::pin!(timer);

    while report.is_none() || engine_open || !running.is_empty() {
        tokio::select! {
            // The signal first: once it fired, no sub-call future is polled before we look.
            biased;
            _ = ctx.signal.cancelled(), if !told_cancel => {
                told_cancel = true;
                if !ctx.signal.reason().is_some_and(|r| r.is_timeout()) {
                    // The call is being aborted and its result is written without waiting
                    // for this body, so a sub-call recorded from now on could land after
                    // it. Dropping them stops their bodies; nothing further is recorded.
                    running = FuturesUnordered::new();
                    abandoned = true;
                }
                let _ = to_engine.send(HostMsg::Wake);
            }
            _ = &mut timer, if !past_deadline => {
                past_deadline = true;
                sub_handle.cancel(CancelReason::Timeout);
                let _ = to_engine.send(HostMsg::Wake);
            }
            end = &mut done, if report.is_none() => {
                let end = end.unwrap_or_else(|_| {
                    EngineReport::bare(ScriptEnd::Internal("the engine ended without a report".into()))
                });
                if let ScriptEnd::Stopped(stop) = end.end {
                    sub_handle.cancel(match stop {
                        Stop::Deadline => CancelReason::Timeout,
                        Stop::Cancelled => CancelReason::Parent,
                        Stop::SubcallLimit => CancelReason::Caller("the script went over its sub-call limit".into()),
                    });
                }
                report = Some(end);
            }
            Some((id, result)) = running.next(), if !running.is_empty() => {
                let reply = crate::report::reply_json(&result);
                if let Some(record) = calls.get_mut(id as usize) {
                    record.finish(result);
                }
                if report.is_none() {
                    let _ = to_engine.send(HostMsg::Reply { id, json: reply });
                }
            }
            request = requests.recv(), if engine_open => match request {
                Some(request) => {
                    calls.push(SubCallRecord::requested(&request.name));
                    if !abandoned {
                        running.push(dispatch(dispatcher.clone(), sub_ctx.clone(), request));
                    }
                }
                None => engine_open = false,
            },
        }
    }
    let report = report.unwrap_or_else(|| EngineReport::bare(ScriptEnd::Stalled));
    Ok(Finished { report, calls })
}

fn dispatch(
    dispatcher: Arc<dyn SubCallDispatcher>,
    ctx: ToolContext,
    request: SubCallRequest,
) -> BoxFuture<'static, (u32, FrozenResult)> {
    Box::pin(async move {
        let result = dispatcher
            .dispatch(&ctx, &request.name, request.arguments)
            .await;
        (request.id, result)
    })
}
