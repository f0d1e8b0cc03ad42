//! The body's side of a script: takes a script slot, starts the worker process, runs the
//! sub-calls it asks for through the dispatcher and hands each outcome back, and makes sure
//! the script is over by its deadline plus a short grace, killing its process if it must.
//!
//! Every sub-call future lives in the body's own task, so when the pipeline stops waiting for
//! the body (cancel, deadline) they are dropped with it (and the worker with them: a dropped
//! worker is killed), and until then they run concurrently: the dispatcher decides what may
//! overlap (its pool and barrier). Sub-calls carry a child of the call's signal, fired when
//! the script is stopped, so a script that stops does not leave work running; calls the
//! script made and did not await are waited for (up to the deadline) so that what it asked
//! for happens and is reported. When the call itself is aborted, its sub-calls are dropped at
//! once instead: the aborted result does not wait for them, and a `tool/code-dispatch` must
//! never follow its parent's result.
//!
//! Stopping: at the deadline, or when the call's signal fires, the worker is told to stop;
//! its interrupt handler ends the script and it reports (with its console). A script stuck
//! in a built-in never sees the handler: [`KILL_GRACE`] later its process is killed.

use crate::bridge::{
    EngineReport, FromWorker, Job, JobLimits, ScriptEnd, Stop, SubCallRequest, ToWorker,
};
use crate::error::CodeModeError;
use crate::limits::CodeLimits;
use crate::process::{Spare, Worker, WorkerCommand, describe};
use crate::report::SubCallRecord;
use dsh_core::dispatcher::RUN_CODE;
use dsh_core::{
    CancelHandle, CancelReason, FrozenResult, MAX_ARGUMENT_BYTES, SubCallDispatcher, ToolContext,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How long a script told to stop may take to report before its process is killed.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(250);

/// A script that is over, with every sub-call it made.
pub(crate) struct Finished {
    pub report: EngineReport,
    pub calls: Vec<SubCallRecord>,
}

/// Where scripts run: the worker program and the slots bounding how many run at once.
#[derive(Debug, Clone)]
pub(crate) struct Workers {
    pub command: Option<WorkerCommand>,
    pub slots: Arc<Semaphore>,
    pub max_scripts: usize,
    /// The worker the next script runs in, started ahead of time.
    pub spare: Arc<Spare>,
}

impl Workers {
    fn command(&self) -> Result<WorkerCommand, CodeModeError> {
        if let Some(command) = &self.command {
            return Ok(command.clone());
        }
        if crate::worker::hooked() {
            return WorkerCommand::current_exe().map_err(|e| CodeModeError::Spawn(e.to_string()));
        }
        Err(CodeModeError::NoWorker)
    }
}

/// The longest line a worker may send: a sub-call's arguments (cut past the limit, each
/// byte escaped at most once more inside a JSON string) or its report (the console, whose
/// control characters take six bytes each, and the returned value).
fn max_line(limits: &CodeLimits) -> usize {
    let arguments = MAX_ARGUMENT_BYTES.saturating_add(8).saturating_mul(2);
    let report = limits
        .max_console_bytes
        .saturating_mul(6)
        .saturating_add(limits.max_result_bytes.saturating_mul(6));
    arguments.max(report).saturating_add(64 << 10)
}

/// Runs `code` to its end.
pub(crate) async fn run(
    code: &str,
    limits: &CodeLimits,
    ctx: &ToolContext,
    dispatcher: Arc<dyn SubCallDispatcher>,
    workers: &Workers,
) -> Result<Finished, CodeModeError> {
    let command = workers.command()?;
    let tools: Vec<String> = dispatcher
        .tool_names()
        .into_iter()
        .filter(|n| n != RUN_CODE)
        .collect();
    let now = Instant::now();
    // A limit too far out to represent is no limit: a year stands for it.
    let deadline = now
        .checked_add(limits.timeout)
        .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
    let timer = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline));
    tokio::pin!(timer);
    let done = |end| {
        Ok(Finished {
            report: EngineReport::bare(end),
            calls: Vec::new(),
        })
    };

    // A slot first: past the bound a script waits its turn, within its own deadline.
    let slot = tokio::select! {
        biased;
        _ = ctx.signal.cancelled() => return done(ScriptEnd::Stopped(Stop::Cancelled)),
        _ = &mut timer => return done(ScriptEnd::NoSlot { slots: workers.max_scripts }),
        slot = workers.slots.clone().acquire_owned() => match slot {
            Ok(slot) => slot,
            Err(_) => return Err(CodeModeError::Spawn("the script slots are closed".into())),
        },
    };
    let mut worker = tokio::select! {
        biased;
        _ = ctx.signal.cancelled() => return done(ScriptEnd::Stopped(Stop::Cancelled)),
        _ = &mut timer => return done(ScriptEnd::Stopped(Stop::Deadline)),
        started = start_worker(workers, &command, slot, max_line(limits)) => {
            started.map_err(CodeModeError::Spawn)?
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    worker.send(&ToWorker::Job(Job {
        code: code.to_string(),
        tools,
        limits: JobLimits {
            memory_bytes: limits.memory_bytes,
            stack_bytes: limits.stack_bytes,
            max_subcalls: limits.max_subcalls,
            max_console_bytes: limits.max_console_bytes,
            max_result_bytes: limits.max_result_bytes,
        },
        timeout_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
    }));

    let (sub_handle, sub_signal) = CancelHandle::child_of(&ctx.signal);
    let sub_ctx = ToolContext {
        signal: sub_signal,
        ..ctx.clone()
    };
    let mut calls: Vec<SubCallRecord> = Vec::new();
    let mut running: FuturesUnordered<BoxFuture<'static, (u32, FrozenResult)>> =
        FuturesUnordered::new();
    let mut report: Option<EngineReport> = None;
    let mut told_cancel = false;
    let mut abandoned = false;
    let mut past_deadline = false;
    // Why the worker was told to stop, and when it is killed if it has not reported.
    let mut stopping: Option<Stop> = None;
    let kill = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline));
    tokio::pin!(kill);

    while report.is_none() || !running.is_empty() {
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
                if report.is_none() && stopping.is_none() {
                    stopping = Some(Stop::Cancelled);
                    worker.send(&ToWorker::Stop(Stop::Cancelled));
                    kill.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
                }
            }
            _ = &mut timer, if !past_deadline => {
                past_deadline = true;
                sub_handle.cancel(CancelReason::Timeout);
                if report.is_none() && stopping.is_none() {
                    stopping = Some(Stop::Deadline);
                    worker.send(&ToWorker::Stop(Stop::Deadline));
                    kill.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
                }
            }
            _ = &mut kill, if report.is_none() && stopping.is_some() => {
                // It did not look at its stop in time: stuck inside a built-in.
                worker.kill();
                let stop = stopping.unwrap_or(Stop::Deadline);
                tracing::warn!(?stop, "a script did not stop when told; its worker process was killed");
                report = Some(EngineReport::bare(ScriptEnd::Killed(stop)));
            }
            message = worker.next(), if report.is_none() => match message {
                Ok(Some(FromWorker::Call(request))) => {
                    if request.id as usize != calls.len() || calls.len() >= limits.max_subcalls {
                        worker.kill();
                        report = Some(EngineReport::bare(ScriptEnd::Internal(
                            "the script worker asked for a sub-call out of turn".into(),
                        )));
                        continue;
                    }
                    calls.push(SubCallRecord::requested(&request.name));
                    if !abandoned {
                        running.push(dispatch(dispatcher.clone(), sub_ctx.clone(), request));
                    }
                }
                Ok(Some(FromWorker::Done(end))) => report = Some(end),
                Ok(Some(FromWorker::Hello { .. })) => {
                    worker.kill();
                    report = Some(EngineReport::bare(ScriptEnd::Internal(
                        "the script worker said hello twice".into(),
                    )));
                }
                Ok(None) => {
                    let status = worker.exit_status().await;
                    let end = match stopping {
                        // It ended itself past its deadline, or was told to stop and died.
                        Some(stop) => ScriptEnd::Killed(stop),
                        None => ScriptEnd::Internal(format!(
                            "the script's worker process {} before it reported{}",
                            describe(status),
                            worker.stderr_tail().await
                        )),
                    };
                    report = Some(EngineReport::bare(end));
                }
                Err(why) => {
                    worker.kill();
                    report = Some(EngineReport::bare(ScriptEnd::Internal(why)));
                }
            },
            Some((id, result)) = running.next(), if !running.is_empty() => {
                let reply = crate::report::reply_json(&result);
                if let Some(record) = calls.get_mut(id as usize) {
                    record.finish(result);
                }
                if report.is_none() {
                    worker.send(&ToWorker::Reply { id, json: reply });
                }
            }
        }
        if let Some(end) = report.as_ref().map(|r| &r.end) {
            match end {
                ScriptEnd::Stopped(stop) | ScriptEnd::Killed(stop) => {
                    let _ = sub_handle.cancel(match stop {
                        Stop::Deadline => CancelReason::Timeout,
                        Stop::Cancelled => CancelReason::Parent,
                        Stop::SubcallLimit => {
                            CancelReason::Caller("the script went over its sub-call limit".into())
                        }
                    });
                }
                ScriptEnd::Internal(_) => {
                    let _ = sub_handle
                        .cancel(CancelReason::Caller("the script's worker failed".into()));
                }
                _ => {}
            }
        }
    }
    // The worker is done (or killed); dropping it reaps it and frees its slot.
    drop(worker);
    let report = report.unwrap_or_else(|| EngineReport::bare(ScriptEnd::Stalled));
    Ok(Finished { report, calls })
}

/// The script's worker: the spare started ahead of time when there is one (a fresh process
/// that has run nothing), else one started now; either way the next spare starts meanwhile.
async fn start_worker(
    workers: &Workers,
    command: &WorkerCommand,
    slot: tokio::sync::OwnedSemaphorePermit,
    max_line: usize,
) -> Result<Worker, String> {
    let spare = workers.spare.take(command, max_line).await;
    workers.spare.prepare(command, max_line);
    match spare {
        Some(mut worker) => {
            worker.hold(slot);
            Ok(worker)
        }
        None => Worker::start(&workers.spare.servers, command, slot, max_line).await,
    }
}

fn dispatch(
    dispatcher: Arc<dyn SubCallDispatcher>,
    ctx: ToolContext,
    request: SubCallRequest,
) -> BoxFuture<'static, (u32, FrozenResult)> {
    Box::pin(async move {
        let arguments = if request.cut {
            // Only the start of arguments past the limit came: as text, it is still past the
            // limit, and the pipeline refuses it as oversized, logging only its size.
            Value::String(request.arguments)
        } else {
            // The worker checked it is JSON; a line that is not can only be a broken worker.
            match serde_json::from_str(&request.arguments) {
                Ok(value) => value,
                Err(_) => Value::String(request.arguments),
            }
        };
        let result = dispatcher.dispatch(&ctx, &request.name, arguments).await;
        (request.id, result)
    })
}
