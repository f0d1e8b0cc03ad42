//! The scheduler actor: one per session. It runs steps one at a time, places their calls
//! (exclusive calls as barriers, runs of parallel-safe calls in a rolling pool), records each
//! `tool/call` in block order and each `tool/result` as it arrives, cancels through supervisor
//! signals, and appends the deferred context after the step's results.
//!
//! Its handlers never wait on a call: every call runs in its own linked [`CallLifecycle`]
//! actor, whose answer (a `CallReply`) arrives as one `CallDone` message with the call's
//! acknowledgement. Nor on user code: a result the scheduler closes itself (a call never
//! reached, not recorded, or ended without an answer) is frozen in a task (`finalize_content`
//! and observers run on the user-code pool), which reports back with `Closed`. A call's answer travels through its `CallReply`, never through the actor's
//! last message, so a termination notice arriving first cannot lose it.

use crate::call::{
    CallArgs, CallLifecycle, CallMsg, CallOutcome, CallReply, SharedAck, interrupted,
};
use crate::error::SchedulerError;
use crate::pipeline::candidate::Candidate;
use crate::pipeline::{CallTrack, Pipeline};
use crate::step::{CancelTarget, DeferredContext, RenamedCallId, SiblingPolicy, StepOutcome};
use crate::subcall::SubCalls;
use crate::telemetry;
use dsh_core::event::{ToolCallData, ToolResultData, UserMessageData};
use dsh_core::live::LiveActor;
use dsh_core::{
    Arguments, CancelHandle, CancelReason, DeferredMessage, ErrorCode, EventBody, ExecutionMode,
    FrozenResult, Signal, ToolCall, ToolError, ToolExecutionInput,
};
use dsh_session::{SessionError, SessionLog};
use futures::FutureExt;
use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::{HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::sync::oneshot;

type StepReply = RpcReplyPort<Result<StepOutcome, SchedulerError>>;

/// The scheduler's messages.
pub(crate) enum SchedulerMsg {
    /// Open a step (begun at once when none runs, else queued behind the running one).
    Open {
        token: u64,
        agent: String,
        context: DeferredContext,
    },
    /// Calls that join an open step, in arrival order.
    Push { token: u64, calls: Vec<Pushed> },
    /// Close a step: it takes no more calls, and finishes once every call has its result.
    /// `reply` is `None` when its handle was dropped unfinished.
    Finish {
        token: u64,
        reply: Option<StepReply>,
    },
    /// Cancel one pushed call of a step, running or queued.
    CancelPushed { token: u64, ticket: u64 },
    /// Cancel one step, running or queued.
    CancelStep { token: u64 },
    /// Cancel a call, the step, or the session.
    Cancel(CancelTarget),
    /// A call's acknowledgement and answer (from its `CallReply`).
    CallDone {
        step: u64,
        index: usize,
        recorded: Result<u64, SessionError>,
        outcome: Option<CallOutcome>,
    },
    /// A result the scheduler closed itself is frozen (from its closing task).
    Closed {
        step: u64,
        index: usize,
        result: FrozenResult,
        record: Record,
        /// When the body started, if it did (`startedAt`).
        started_at: Option<u64>,
    },
    /// The step's results and deferred messages are recorded and its caller answered.
    StepDone { step: u64 },
    /// Take no more steps (queued ones are answered `ShutDown`); answer once idle. `busy`
    /// answers at once whether a step was running.
    Drain {
        busy: oneshot::Sender<bool>,
        reply: oneshot::Sender<()>,
    },
}

/// Where a pushed call's own answer goes: its result once the `tool/result` is recorded.
pub(crate) type CallNotify = oneshot::Sender<Result<FrozenResult, SchedulerError>>;

/// A call pushed into an open step.
pub(crate) struct Pushed {
    pub call: ToolCall,
    /// Its number among its step's pushes (what cancelling it names).
    pub ticket: u64,
    pub notify: Option<CallNotify>,
}

/// A step opened but not begun: it waits behind the running one, gathering its calls.
struct PendingStep {
    token: u64,
    agent: String,
    context: DeferredContext,
    calls: Vec<Pushed>,
    cancelled_tickets: HashSet<u64>,
    closed: bool,
    reply: Option<StepReply>,
    cancelled: Option<CancelReason>,
}

impl PendingStep {
    /// Refuses the step: its caller and every call's waiter hear `error`.
    fn refuse(self, error: impl Fn() -> SchedulerError) {
        if let Some(reply) = self.reply {
            let _ = reply.send(Err(error()));
        }
        for pushed in self.calls {
            if let Some(notify) = pushed.notify {
                let _ = notify.send(Err(error()));
            }
        }
    }
}

/// Where a closed result goes in the log.
pub(crate) enum Record {
    /// After its recorded `tool/call`.
    AtSeq(u64),
    /// After a `tool/call` sent when the call was closed (a call never reached).
    AfterCall(BoxFuture<'static, Result<u64, SessionError>>),
    /// Nowhere: its `tool/call` could not be recorded.
    Nowhere(SessionError),
}

/// How a session's scheduler places calls.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// The rolling pool's size (`max_parallel_tool_calls`, default 10).
    pub max_parallel_tool_calls: usize,
    /// What a failed call does to its siblings.
    pub sibling_policy: SiblingPolicy,
    /// The number of the first step (a resumed session continues after its log).
    pub first_step: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_parallel_tool_calls: 10,
            sibling_policy: SiblingPolicy::Continue,
            first_step: 1,
        }
    }
}

pub(crate) struct SchedulerArgs {
    pub pipeline: Arc<Pipeline>,
    pub log: SessionLog,
    pub config: SchedulerConfig,
}

enum SlotState {
    Waiting,
    Running {
        actor: Option<ActorRef<CallMsg>>,
        handle: CancelHandle,
        track: Arc<CallTrack>,
        input: ToolExecutionInput,
    },
    /// Its result is being frozen by a closing task.
    Closing,
    Done,
}

struct Slot {
    call: ToolCall,
    ticket: u64,
    notify: Option<CallNotify>,
    parallel: bool,
    cancel_requested: Option<CancelReason>,
    state: SlotState,
    result: Option<FrozenResult>,
}

struct StepRun {
    token: u64,
    step: u64,
    agent: String,
    context: DeferredContext,
    slots: Vec<Slot>,
    /// Every call id of the step so far (ids stay unique within a step).
    ids: HashSet<String>,
    /// Takes no more calls: its handle finished (or was dropped), or the session drains.
    closed: bool,
    /// Its finisher has been started.
    finishing: bool,
    next: usize,
    running: usize,
    exclusive_running: bool,
    finished: usize,
    handle: CancelHandle,
    signal: Signal,
    stopping: Option<CancelReason>,
    deferred: Vec<DeferredMessage>,
    records: Vec<BoxFuture<'static, Result<u64, SessionError>>>,
    log_error: Option<SessionError>,
    renamed: Vec<RenamedCallId>,
    reply: Option<StepReply>,
}

pub(crate) struct Scheduler;

pub(crate) struct SchedulerState {
    pipeline: Arc<Pipeline>,
    log: SessionLog,
    config: SchedulerConfig,
    next_step: u64,
    current: Option<StepRun>,
    queue: VecDeque<PendingStep>,
    /// Set by `Drain`: no new steps; these wait for the running one to end.
    draining: Option<Vec<oneshot::Sender<()>>>,
    /// The writer, linked under this actor: if it dies, the session cannot record.
    writer: ractor::ActorId,
    _live: LiveActor,
}

/// Exclusive unless the definition says parallel and its check returns exactly `true`; a
/// definition whose `execution_mode` or `is_concurrency_safe` panics is exclusive. Unknown
/// tools have no body and never block anyone.
fn is_parallel(pipeline: &Pipeline, call: &ToolCall) -> bool {
    let Some(tool) = pipeline.registry.get(&call.name) else {
        return true;
    };
    let Some(args) = call.arguments.value() else {
        return false;
    };
    let def = tool.definition();
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        def.execution_mode() == ExecutionMode::Parallel && def.is_concurrency_safe(args)
    }))
    .unwrap_or_else(|_| {
        tracing::warn!(tool = %call.name, "the placement check panicked; running the call exclusively");
        false
    })
}

/// Freezes the result of a call the scheduler closes itself (never reached, not recorded, or
/// ended without an answer), through the same snapshot, `finalize_content` and observers as
/// every other result (unless the call's `finalize_content` was already called), under a span
/// of its own. Runs in a task; reports back with `Closed`.
#[allow(clippy::too_many_arguments)]
fn close_later(
    pipeline: &Arc<Pipeline>,
    myself: &ActorRef<SchedulerMsg>,
    step: u64,
    index: usize,
    call: &ToolCall,
    candidate: Candidate,
    track: Arc<CallTrack>,
    record: Record,
) {
    let pipeline = pipeline.clone();
    let myself = myself.clone();
    let (call_id, name, arguments) = (
        call.call_id.clone(),
        call.name.clone(),
        call.arguments.clone(),
    );
    tokio::spawn(async move {
        let record_content = pipeline.config.record_content;
        let span = telemetry::call_span(&name, &call_id, step, None, &arguments, record_content);
        let deadline = if candidate.error.as_ref().is_some_and(|e| e.code.is_abort()) {
            pipeline.config.cancelled_deadline
        } else {
            pipeline.config.user_code_deadline
        };
        let finalize = telemetry::phase_span(&span, "finalize");
        let result = pipeline
            .freeze(&call_id, &name, candidate, &finalize, &track, deadline)
            .await;
        telemetry::record_outcome(&span, &result, record_content);
        let _ = myself.send_message(SchedulerMsg::Closed {
            step,
            index,
            result,
            record,
            started_at: track.started_at(),
        });
    });
}

/// Empty and repeated ids get fresh ones, so pairing by id stays exact within the step; so
/// does a model id of the form dsh derives for sub-calls (`PARENT.subN`,
/// [`crate::is_derived_call_id`]), so that no derived id can be one the model gave. A fresh
/// id, `dsh_STEP_N`, is neither an id of the step (so far, or of this batch) nor of the
/// derived form. `first` is the position of the batch's first call in the step; `seen` holds
/// the ids of the step's earlier calls and gains the batch's.
fn assign_ids(
    step: u64,
    first: usize,
    seen: &mut HashSet<String>,
    calls: &mut [&mut ToolCall],
) -> Vec<RenamedCallId> {
    let taken: HashSet<String> = calls.iter().map(|c| c.call_id.clone()).collect();
    let mut renamed = Vec::new();
    for (offset, call) in calls.iter_mut().enumerate() {
        let index = first + offset;
        if call.call_id.is_empty()
            || seen.contains(&call.call_id)
            || crate::subcall::is_derived_call_id(&call.call_id)
        {
            let mut n = index;
            let mut fresh = format!("dsh_{step}_{n}");
            while taken.contains(&fresh) || seen.contains(&fresh) {
                n += 1_000_000;
                fresh = format!("dsh_{step}_{n}");
            }
            tracing::warn!(index, original = %call.call_id, assigned = %fresh, "call id missing, repeated or of the derived form; assigned a fresh one");
            renamed.push(RenamedCallId {
                index,
                original: std::mem::replace(&mut call.call_id, fresh.clone()),
                assigned: fresh,
            });
        }
        seen.insert(call.call_id.clone());
    }
    renamed
}

/// The ids one whole step's calls get, as the scheduler gives them (empty, repeated and
/// derived-form ids replaced by `dsh_STEP_N`), and their arguments bounded as a recorded call's
/// are: for a caller that judges calls without running them (`dsh run --dry-run`), so its
/// call ids are the ones a run would log.
pub fn prepare_step_calls(step: u64, calls: &mut [ToolCall]) -> Vec<RenamedCallId> {
    let mut refs: Vec<&mut ToolCall> = calls.iter_mut().collect();
    let renamed = assign_ids(step, 0, &mut HashSet::new(), &mut refs);
    for call in calls.iter_mut() {
        call.arguments = std::mem::replace(
            &mut call.arguments,
            Arguments::Json(serde_json::Value::Null),
        )
        .within_limits();
    }
    renamed
}

fn call_event(call: &ToolCall, agent: &str) -> EventBody {
    EventBody::ToolCall(ToolCallData {
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        arguments: call.arguments.to_logged(),
        arguments_text: call.arguments.logged_text().map(str::to_string),
        agent: agent.to_string(),
        parent: None,
    })
}

impl SchedulerState {
    /// Begins a step: it gets its number, and the calls it gathered while queued take
    /// their places.
    fn begin(&mut self, myself: &ActorRef<SchedulerMsg>, pending: PendingStep) {
        // SPEC.md "Limits of numbers": a session at the largest step takes no more steps.
        let step = self.next_step;
        if step > dsh_core::event::MAX_STEP {
            pending.refuse(step_limit_reached);
            for queued in self.queue.drain(..) {
                queued.refuse(step_limit_reached);
            }
            return;
        }
        self.next_step = step + 1;
        let PendingStep {
            token,
            agent,
            context,
            calls,
            cancelled_tickets,
            closed,
            reply,
            cancelled,
        } = pending;
        let (handle, signal) = CancelHandle::new();
        if let Some(reason) = &cancelled {
            handle.cancel(reason.clone());
        }
        self.current = Some(StepRun {
            token,
            step,
            agent,
            context,
            slots: Vec::new(),
            ids: HashSet::new(),
            closed: false,
            finishing: false,
            next: 0,
            running: 0,
            exclusive_running: false,
            finished: 0,
            handle,
            signal,
            stopping: cancelled,
            deferred: Vec::new(),
            records: Vec::new(),
            log_error: None,
            renamed: Vec::new(),
            reply,
        });
        self.push(myself, calls);
        if let Some(run) = self.current.as_mut() {
            for slot in run.slots.iter_mut() {
                if cancelled_tickets.contains(&slot.ticket) {
                    slot.cancel_requested = Some(CancelReason::Caller(String::new()));
                }
            }
            run.closed = closed;
        }
        self.pump(myself);
    }

    /// Calls join the running step (which must be open), each placed as it arrives.
    fn push(&mut self, myself: &ActorRef<SchedulerMsg>, calls: Vec<Pushed>) {
        let Some(run) = self.current.as_mut() else {
            return;
        };
        let first = run.slots.len();
        let mut calls = calls;
        let renamed = {
            let mut refs: Vec<&mut ToolCall> = calls.iter_mut().map(|p| &mut p.call).collect();
            assign_ids(run.step, first, &mut run.ids, &mut refs)
        };
        run.renamed.extend(renamed);
        for pushed in calls {
            let mut call = pushed.call;
            // However a call was built, what it records must read back (SPEC.md's
            // "Oversized arguments").
            call.arguments = std::mem::replace(
                &mut call.arguments,
                Arguments::Json(serde_json::Value::Null),
            )
            .within_limits();
            run.slots.push(Slot {
                parallel: is_parallel(&self.pipeline, &call),
                call,
                ticket: pushed.ticket,
                notify: pushed.notify,
                cancel_requested: None,
                state: SlotState::Waiting,
                result: None,
            });
        }
        self.pump(myself);
    }

    /// Starts every call that may start now, synthesizes the ones the step will never reach,
    /// and finishes the step when every call has its result.
    fn pump(&mut self, myself: &ActorRef<SchedulerMsg>) {
        let Some(run) = self.current.as_mut() else {
            return;
        };
        let cap = self.config.max_parallel_tool_calls.max(1);
        while run.next < run.slots.len() {
            let i = run.next;
            if let Some(reason) = run
                .stopping
                .clone()
                .or_else(|| run.slots[i].cancel_requested.clone())
            {
                never_reached(&self.pipeline, &self.log, myself, run, i, reason);
                run.next += 1;
                continue;
            }
            let slot = &run.slots[i];
            let may_start = if slot.parallel {
                !run.exclusive_running && run.running < cap
            } else {
                run.running == 0
            };
            if !may_start {
                break;
            }
            start_call(&self.pipeline, &self.log, myself, run, i, cap);
            run.next += 1;
        }
        if run.closed && !run.finishing && run.finished == run.slots.len() {
            self.finish(myself);
        }
    }

    fn finish(&mut self, myself: &ActorRef<SchedulerMsg>) {
        let Some(run) = self.current.as_mut() else {
            return;
        };
        if run.finishing {
            return;
        }
        run.finishing = true;
        let reply = run.reply.take();
        let step = run.step;
        let records = std::mem::take(&mut run.records);
        let deferred = std::mem::take(&mut run.deferred);
        let mut log_error = run.log_error.take();
        let results: Vec<FrozenResult> = run
            .slots
            .iter()
            .map(|s| {
                // Every slot has its result by now; this only keeps the answer whole if not
                // (unreachable, so not worth a trip through finalize_content).
                s.result.clone().unwrap_or_else(|| {
                    FrozenResult::error(
                        &s.call.call_id,
                        &s.call.name,
                        ToolError::new(ErrorCode::PipelineError, "the call has no result"),
                    )
                })
            })
            .collect();
        let renamed = std::mem::take(&mut run.renamed);
        let log = self.log.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            for record in records {
                if let Err(e) = record.await {
                    log_error.get_or_insert(e);
                }
            }
            // Deferred context goes after every result of the step, first in first out.
            let acks: Vec<_> = deferred
                .iter()
                .map(|d| {
                    log.send(
                        step,
                        EventBody::UserMessage(UserMessageData {
                            content: d.content.clone(),
                            origin: d.origin.clone(),
                        }),
                    )
                })
                .collect();
            for ack in acks {
                if let Err(e) = ack.await {
                    log_error.get_or_insert(e);
                }
            }
            let outcome = StepOutcome {
                step,
                results,
                deferred,
                renamed,
            };
            let answer = match log_error {
                None => Ok(outcome),
                Some(error) => Err(SchedulerError::LogFailed {
                    error,
                    outcome: Box::new(outcome),
                }),
            };
            if let Some(reply) = reply {
                let _ = reply.send(answer);
            }
            let _ = myself.send_message(SchedulerMsg::StepDone { step });
        });
    }

    /// Calls pushed into step `token`: placed at once when it runs, gathered when it waits,
    /// refused (their waiters told why) when it is closed or gone.
    fn push_to(&mut self, myself: &ActorRef<SchedulerMsg>, token: u64, calls: Vec<Pushed>) {
        let gone = |draining: bool| {
            move || {
                if draining {
                    SchedulerError::ShutDown
                } else {
                    SchedulerError::Unavailable("the step is finished".into())
                }
            }
        };
        let draining = self.draining.is_some();
        if let Some(run) = self.current.as_ref().filter(|r| r.token == token) {
            if run.closed {
                refuse_calls(calls, gone(draining));
            } else {
                self.push(myself, calls);
            }
        } else if let Some(queued) = self.queue.iter_mut().find(|q| q.token == token) {
            if queued.closed {
                refuse_calls(calls, gone(draining));
            } else {
                queued.calls.extend(calls);
            }
        } else {
            // A step refused when it began (the step limit) is gone before its calls or its
            // finish arrive: they get the reason, not "not open".
            let limit = self.next_step > dsh_core::event::MAX_STEP;
            refuse_calls(calls, move || {
                if limit && !draining {
                    step_limit_reached()
                } else {
                    gone(draining)()
                }
            });
        }
    }

    /// Step `token` takes no more calls; it ends (and answers `reply`) once every call of it
    /// has its result.
    fn finish_step(
        &mut self,
        myself: &ActorRef<SchedulerMsg>,
        token: u64,
        reply: Option<StepReply>,
    ) {
        if let Some(run) = self.current.as_mut().filter(|r| r.token == token) {
            if run.finishing {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(SchedulerError::ShutDown));
                }
                return;
            }
            run.closed = true;
            if reply.is_some() {
                run.reply = reply;
            }
            self.pump(myself);
        } else if let Some(queued) = self.queue.iter_mut().find(|q| q.token == token) {
            queued.closed = true;
            if reply.is_some() {
                queued.reply = reply;
            }
        } else if let Some(reply) = reply {
            let _ = reply.send(Err(if self.draining.is_some() {
                SchedulerError::ShutDown
            } else if self.next_step > dsh_core::event::MAX_STEP {
                step_limit_reached()
            } else {
                SchedulerError::Unavailable("the step is not open".into())
            }));
        }
    }

    fn cancel(&mut self, myself: &ActorRef<SchedulerMsg>, target: CancelTarget) {
        if target == CancelTarget::Session {
            for queued in self.queue.iter_mut() {
                queued.cancelled.get_or_insert(CancelReason::Session);
            }
        }
        let Some(run) = self.current.as_mut() else {
            return;
        };
        match target {
            CancelTarget::Call(id) => {
                let Some(slot) = run.slots.iter_mut().find(|s| s.call.call_id == id) else {
                    tracing::debug!(call_id = %id, "cancel: no such call in the running step");
                    return;
                };
                cancel_slot(slot);
            }
            CancelTarget::Step | CancelTarget::Session => {
                let reason = if target == CancelTarget::Session {
                    CancelReason::Session
                } else {
                    CancelReason::Step
                };
                stop_running(run, reason);
            }
        }
        self.pump(myself);
    }

    fn call_done(
        &mut self,
        myself: &ActorRef<SchedulerMsg>,
        step: u64,
        index: usize,
        recorded: Result<u64, SessionError>,
        outcome: Option<CallOutcome>,
    ) {
        let Some(run) = self.current.as_mut().filter(|r| r.step == step) else {
            tracing::warn!(step, index, "a call finished after its step; ignored");
            return;
        };
        let Some(slot) = run.slots.get_mut(index) else {
            return;
        };
        let SlotState::Running {
            handle,
            track,
            input,
            ..
        } = std::mem::replace(&mut slot.state, SlotState::Closing)
        else {
            return;
        };
        run.running -= 1;
        if !slot.parallel {
            run.exclusive_running = false;
        }
        match (recorded, outcome) {
            (Ok(seq), Some(outcome)) => {
                if let Some(e) = outcome.log_error {
                    run.log_error.get_or_insert(e);
                }
                run.deferred
                    .extend(outcome.contexts.into_iter().map(|content| DeferredMessage {
                        content,
                        origin: slot.call.call_id.clone(),
                    }));
                let ack = record_result(
                    &self.log,
                    run.step,
                    seq,
                    &outcome.result,
                    track.started_at(),
                );
                run.records.push(ack.clone().boxed());
                self.settle(myself, index, outcome.result, Ok(ack));
            }
            (Ok(seq), None) => {
                // The call actor ended without answering (killed, or failed).
                let candidate = if handle.is_cancelled() || input.signal.is_cancelled() {
                    interrupted(&input, &track)
                } else {
                    Candidate::failed(
                        ErrorCode::PipelineError,
                        "the call's lifecycle ended without a result",
                    )
                };
                close_later(
                    &self.pipeline,
                    myself,
                    step,
                    index,
                    &slot.call,
                    candidate,
                    track,
                    Record::AtSeq(seq),
                );
            }
            (Err(e), _) => {
                // Nothing of it ran (write-ahead), and nothing of it is in the log.
                let message =
                    format!("the call was not run: its tool/call could not be recorded ({e})");
                run.log_error.get_or_insert(e.clone());
                close_later(
                    &self.pipeline,
                    myself,
                    step,
                    index,
                    &slot.call,
                    Candidate::failed(ErrorCode::PipelineError, message),
                    track,
                    Record::Nowhere(e),
                );
            }
        }
    }

    /// A result a closing task froze: record it and settle its slot.
    fn closed(
        &mut self,
        myself: &ActorRef<SchedulerMsg>,
        step: u64,
        index: usize,
        result: FrozenResult,
        record: Record,
        started_at: Option<u64>,
    ) {
        let Some(run) = self.current.as_mut().filter(|r| r.step == step) else {
            tracing::warn!(step, index, "a call was closed after its step; ignored");
            return;
        };
        if !run
            .slots
            .get(index)
            .is_some_and(|s| matches!(s.state, SlotState::Closing))
        {
            return;
        }
        let ack = match record {
            Record::AtSeq(seq) => Ok(record_result(&self.log, step, seq, &result, started_at)),
            Record::AfterCall(call_ack) => {
                let data = ToolResultData {
                    started_at,
                    ..ToolResultData::from_frozen(&result)
                };
                let log = self.log.clone();
                Ok(async move {
                    let seq = call_ack.await?;
                    log.send(step, EventBody::result(data, seq)).await
                }
                .boxed()
                .shared())
            }
            Record::Nowhere(e) => Err(e),
        };
        if let Ok(ack) = &ack {
            run.records.push(ack.clone().boxed());
        }
        self.settle(myself, index, result, ack);
    }

    /// A slot has its result: count it, answer its own waiter once its `tool/result` is
    /// recorded (`ack`; `Err` when its `tool/call` could not be), apply the sibling policy, and
    /// start what may start.
    fn settle(
        &mut self,
        myself: &ActorRef<SchedulerMsg>,
        index: usize,
        result: FrozenResult,
        ack: Result<SharedAck, SessionError>,
    ) {
        let policy = self.config.sibling_policy;
        let Some(run) = self.current.as_mut() else {
            return;
        };
        let Some(slot) = run.slots.get_mut(index) else {
            return;
        };
        slot.state = SlotState::Done;
        run.finished += 1;
        if let Some(notify) = slot.notify.take() {
            let answer = result.clone();
            tokio::spawn(async move {
                let answer = match ack {
                    Ok(ack) => match ack.await {
                        Ok(_) => Ok(answer),
                        Err(error) => Err(SchedulerError::CallNotRecorded {
                            error,
                            result: Box::new(answer),
                        }),
                    },
                    Err(error) => Err(SchedulerError::CallNotRecorded {
                        error,
                        result: Box::new(answer),
                    }),
                };
                let _ = notify.send(answer);
            });
        }
        let failed = result.code().is_some_and(|c| !c.is_abort());
        let call_id = result.call_id().to_string();
        slot.result = Some(result);
        if failed && policy == SiblingPolicy::CancelSiblings && run.stopping.is_none() {
            stop_running(run, CancelReason::SiblingFailed(call_id));
        }
        self.pump(myself);
    }
}

fn stop_running(run: &mut StepRun, reason: CancelReason) {
    if run.stopping.is_none() {
        run.stopping = Some(reason.clone());
    }
    run.handle.cancel(reason);
    for slot in &run.slots {
        if let SlotState::Running {
            actor: Some(actor), ..
        } = &slot.state
        {
            actor.stop(Some("cancelled".into()));
        }
    }
}

/// Refuses calls that cannot join their step: nothing of them runs or is recorded.
/// SPEC.md "Limits of numbers": a session at the largest step takes no more steps.
fn step_limit_reached() -> SchedulerError {
    SchedulerError::Unavailable(format!(
        "the session has reached the largest step a log may hold ({}, 2^63 - 1); \
         no step can follow",
        dsh_core::event::MAX_STEP
    ))
}

fn refuse_calls(calls: Vec<Pushed>, error: impl Fn() -> SchedulerError) {
    for pushed in calls {
        if let Some(notify) = pushed.notify {
            let _ = notify.send(Err(error()));
        }
    }
}

/// Cancels one call of the running step: a running one is stopped, a waiting one will be
/// closed when the step reaches it.
fn cancel_slot(slot: &mut Slot) {
    match &slot.state {
        SlotState::Running { actor, handle, .. } => {
            handle.cancel(CancelReason::Caller(String::new()));
            if let Some(actor) = actor {
                actor.stop(Some("cancelled".into()));
            }
        }
        SlotState::Waiting => {
            slot.cancel_requested = Some(CancelReason::Caller(String::new()));
        }
        SlotState::Closing | SlotState::Done => {}
    }
}

fn record_result(
    log: &SessionLog,
    step: u64,
    call_seq: u64,
    result: &FrozenResult,
    started_at: Option<u64>,
) -> SharedAck {
    let data = ToolResultData {
        started_at,
        ..ToolResultData::from_frozen(result)
    };
    log.send(step, EventBody::result(data, call_seq))
        .boxed()
        .shared()
}

/// A call the step will never reach: a synthesized `tool/call` + `tool/result` pair. The call
/// is sent now (block order); its result once its closing task has frozen it.
fn never_reached(
    pipeline: &Arc<Pipeline>,
    log: &SessionLog,
    myself: &ActorRef<SchedulerMsg>,
    run: &mut StepRun,
    i: usize,
    reason: CancelReason,
) {
    let slot = &mut run.slots[i];
    let call_ack = log.send(run.step, call_event(&slot.call, &run.agent));
    slot.state = SlotState::Closing;
    close_later(
        pipeline,
        myself,
        run.step,
        i,
        &slot.call,
        Candidate::failed(
            ErrorCode::AbortedBeforeDispatch,
            format!("the call was cancelled before it started: {reason}"),
        ),
        Arc::new(CallTrack::default()),
        Record::AfterCall(call_ack.boxed()),
    );
}

fn start_call(
    pipeline: &Arc<Pipeline>,
    log: &SessionLog,
    myself: &ActorRef<SchedulerMsg>,
    run: &mut StepRun,
    i: usize,
    cap: usize,
) {
    let step = run.step;
    let slot = &mut run.slots[i];
    let (handle, signal) = CancelHandle::child_of(&run.signal);
    let input = ToolExecutionInput {
        call_id: slot.call.call_id.clone(),
        name: slot.call.name.clone(),
        arguments: slot.call.arguments.clone(),
        agent: run.agent.clone(),
        signal,
        parent: None,
    };
    let recorded: SharedAck = log
        .send(step, call_event(&slot.call, &run.agent))
        .boxed()
        .shared();
    let track = Arc::new(CallTrack::default());
    let reply = CallReply::new(myself.clone(), step, i, recorded.clone());
    let args = CallArgs {
        pipeline: pipeline.clone(),
        input: input.clone(),
        recorded: recorded.clone(),
        track: track.clone(),
        reply,
        subcalls: Arc::new(SubCalls::new(
            pipeline.clone(),
            log.clone(),
            step,
            slot.call.call_id.clone(),
            cap,
        )),
        span: telemetry::call_span(
            &slot.call.name,
            &slot.call.call_id,
            step,
            None,
            &slot.call.arguments,
            pipeline.config.record_content,
        ),
        contexts_in_result: run.context == DeferredContext::InResults,
    };
    // The actor starts in the background; a failure to start drops `reply`, which reports it
    // like any call that ended without an answer.
    let actor = match ractor::ActorRuntime::spawn_linked_instant(
        None,
        CallLifecycle,
        args,
        myself.get_cell(),
    ) {
        Ok((actor, _)) => Some(actor),
        Err(e) => {
            tracing::error!(error = %e, "could not spawn a call actor");
            None
        }
    };
    slot.state = SlotState::Running {
        actor,
        handle,
        track,
        input,
    };
    run.running += 1;
    if !slot.parallel {
        run.exclusive_running = true;
    }
}

impl Actor for Scheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        args: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        let next_step = args.config.first_step.max(1);
        let writer = args.log.actor_cell().get_id();
        Ok(SchedulerState {
            pipeline: args.pipeline,
            log: args.log,
            config: args.config,
            next_step,
            writer,
            current: None,
            queue: VecDeque::new(),
            draining: None,
            _live: LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SchedulerMsg>,
        msg: SchedulerMsg,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SchedulerMsg::Open {
                token,
                agent,
                context,
            } => {
                let pending = PendingStep {
                    token,
                    agent,
                    context,
                    calls: Vec::new(),
                    cancelled_tickets: HashSet::new(),
                    closed: false,
                    reply: None,
                    cancelled: None,
                };
                if state.draining.is_some() {
                    // Nothing of it is recorded: its calls and its finish hear `ShutDown`.
                } else if state.current.is_some() {
                    state.queue.push_back(pending);
                } else {
                    state.begin(&myself, pending);
                }
            }
            SchedulerMsg::Push { token, calls } => state.push_to(&myself, token, calls),
            SchedulerMsg::Finish { token, reply } => state.finish_step(&myself, token, reply),
            SchedulerMsg::CancelPushed { token, ticket } => {
                if let Some(run) = state.current.as_mut().filter(|r| r.token == token) {
                    if let Some(slot) = run.slots.iter_mut().find(|s| s.ticket == ticket) {
                        cancel_slot(slot);
                    }
                    state.pump(&myself);
                } else if let Some(queued) = state.queue.iter_mut().find(|q| q.token == token) {
                    queued.cancelled_tickets.insert(ticket);
                }
            }
            SchedulerMsg::CancelStep { token } => {
                if let Some(run) = state.current.as_mut().filter(|r| r.token == token) {
                    stop_running(run, CancelReason::Step);
                    state.pump(&myself);
                } else if let Some(queued) = state.queue.iter_mut().find(|q| q.token == token) {
                    queued.cancelled.get_or_insert(CancelReason::Step);
                }
            }
            SchedulerMsg::Cancel(target) => state.cancel(&myself, target),
            SchedulerMsg::CallDone {
                step,
                index,
                recorded,
                outcome,
            } => state.call_done(&myself, step, index, recorded, outcome),
            SchedulerMsg::Closed {
                step,
                index,
                result,
                record,
                started_at,
            } => state.closed(&myself, step, index, result, record, started_at),
            SchedulerMsg::StepDone { step } => {
                if state.current.as_ref().is_some_and(|r| r.step == step) {
                    state.current = None;
                }
                if let Some(waiters) = state.draining.as_mut() {
                    for w in waiters.drain(..) {
                        let _ = w.send(());
                    }
                } else if let Some(pending) = state.queue.pop_front() {
                    state.begin(&myself, pending);
                }
            }
            SchedulerMsg::Drain { busy, reply } => {
                // Steps that have not started are refused: nothing of them is in the log. The
                // running one takes no more calls, and ends once its calls have their results.
                for queued in state.queue.drain(..) {
                    queued.refuse(|| SchedulerError::ShutDown);
                }
                if let Some(run) = state.current.as_mut() {
                    run.closed = true;
                }
                state.pump(&myself);
                let _ = busy.send(state.current.is_some());
                let waiters = state.draining.get_or_insert_with(Vec::new);
                if state.current.is_none() {
                    let _ = reply.send(());
                } else {
                    waiters.push(reply);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        evt: SupervisionEvent,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        // A call actor's end is reconciled through its answer port, not here: its answer may
        // still be on the way when this notice arrives. The writer is different: without it
        // the session cannot record anything, so the scheduler fails and its supervisor (the
        // host's, if any) hears of it.
        match evt {
            SupervisionEvent::ActorFailed(cell, err) if cell.get_id() == state.writer => {
                return Err(format!("the session writer failed: {err}").into());
            }
            SupervisionEvent::ActorTerminated(cell, _, reason)
                if cell.get_id() == state.writer && state.draining.is_none() =>
            {
                return Err(format!(
                    "the session writer stopped ({})",
                    reason.unwrap_or_else(|| "no reason".into())
                )
                .into());
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!(actor = %cell.get_id(), error = %err, "a call actor failed");
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<SchedulerMsg>,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(run) = state.current.as_mut() {
            stop_running(run, CancelReason::Session);
        }
        myself
            .stop_children_and_wait(
                Some("scheduler stopped".into()),
                Some(std::time::Duration::from_secs(5)),
            )
            .await;
        Ok(())
    }
}
