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
//!
//! What one call's sub-calls add to the log is bounded ([`SubCallLimits`]): a sub-call is
//! admitted only while the bytes its call's sub-calls have recorded, plus the arguments of
//! those admitted and not yet recorded, plus its own, stay within `max_log_bytes`; it is
//! checked again when it gets its turn to run, since results recorded meanwhile count too.
//! Past the budget a sub-call does not run and ends `DENIED` naming the budget (binding:
//! retrying gets the same answer), recorded with the omitted-arguments marker instead of its
//! arguments, so a refusal costs a few hundred bytes. A call may make at most `max_subcalls`
//! sub-calls; past that, a sub-call is refused the same way and not recorded at all. So one
//! call adds at most `max_log_bytes`, plus the results of the sub-calls running when the budget
//! ran out (at most the pool's size, each cut to `max_content_bytes`), plus `max_subcalls`
//! short refusal records.
//!
//! Sub-call ids are derived from their parent's: `PARENT.subN` ([`sub_call_id`]). The
//! scheduler renames any model id of that form ([`is_derived_call_id`]), so a derived id is
//! never an id the model gave in the same step; and two derived ids never meet, since the
//! parent's id is all that precedes the last `.sub`, and parents' ids are unique in a step.

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

/// What one call's sub-calls may add to the session log (SPEC.md's `tool/code-dispatch`
/// events), and how many sub-calls one call may make. Part of
/// [`PipelineConfig`](crate::PipelineConfig).
///
/// ```
/// use dsh_scheduler::{PipelineConfig, SubCallLimits};
/// let config = PipelineConfig {
///     subcalls: SubCallLimits { max_log_bytes: 1 << 20, ..SubCallLimits::default() },
///     ..PipelineConfig::default()
/// };
/// assert_eq!(config.subcalls.max_subcalls, 1000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubCallLimits {
    /// Bytes of `tool/code-dispatch` records one call's sub-calls may add (default 8 MiB).
    /// Past it, sub-calls are refused (`DENIED`) and recorded without their arguments.
    pub max_log_bytes: usize,
    /// Sub-calls one call may make (default 1000); past it they are refused and not recorded.
    pub max_subcalls: usize,
}

impl Default for SubCallLimits {
    fn default() -> Self {
        SubCallLimits {
            max_log_bytes: 8 << 20,
            max_subcalls: 1000,
        }
    }
}

/// What a record costs beside its arguments, content and error: the envelope, the ids, the
/// names of the fields.
const RECORD_OVERHEAD: usize = 256;

/// The id of sub-call number `n` (from 1) of the call `parent`.
pub(crate) fn sub_call_id(parent: &str, n: u64) -> String {
    format!("{parent}.sub{n}")
}

/// Whether `id` has the form of a derived sub-call id (`ANYTHING.subDIGITS`). The scheduler
/// renames model ids of this form, so that no id dsh derives can be one the model gave.
///
/// ```
/// use dsh_scheduler::is_derived_call_id;
/// assert!(is_derived_call_id("r.sub1"));
/// assert!(is_derived_call_id("a.sub2.sub10"));
/// assert!(!is_derived_call_id("call_abc"));
/// assert!(!is_derived_call_id("functions.read_file:0"));
/// assert!(!is_derived_call_id("r.sub"));
/// assert!(!is_derived_call_id("r.subway"));
/// ```
pub fn is_derived_call_id(id: &str) -> bool {
    id.rsplit_once(".sub")
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Bytes `write` writes (a value as compact JSON), without keeping the text.
fn json_len(write: impl FnOnce(&mut dyn std::io::Write) -> serde_json::Result<()>) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = write(&mut count);
    count.0
}

/// Why a sub-call was refused before it ran.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The call's sub-calls reached their log budget.
    Budget { used: usize, max: usize },
    /// The call made all the sub-calls it may.
    Count { max: usize },
}

impl Refusal {
    fn message(self) -> String {
        match self {
            Refusal::Budget { used, max } => format!(
                "refused: this call's sub-calls have already added {used} bytes to the session \
                 log, and with this one would pass their log budget of {max} bytes; the \
                 sub-call did not run and its arguments were not logged"
            ),
            Refusal::Count { max } => format!(
                "refused: this call has already made {max} sub-calls, the most one call may \
                 make; the sub-call did not run and is not logged"
            ),
        }
    }

    /// Refusals past the count are not recorded: their number is not bounded.
    fn recorded(self) -> bool {
        matches!(self, Refusal::Budget { .. })
    }

    fn omitted(self, bytes: usize) -> Value {
        Arguments::Oversized {
            bytes,
            reason: "not logged: the call's sub-calls reached their log budget".to_string(),
        }
        .to_logged()
    }
}

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
    limits: SubCallLimits,
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
    /// Sub-calls asked for.
    made: usize,
    /// Bytes of the records sent so far.
    used: usize,
    /// Bytes set aside for the sub-calls admitted and not yet recorded.
    reserved: usize,
}

impl Ledger {
    /// Admits a sub-call whose record will cost at least `cost`, setting that aside, or says
    /// why not.
    fn admit(&mut self, cost: usize, limits: &SubCallLimits) -> Result<(), Refusal> {
        self.made += 1;
        if self.made > limits.max_subcalls {
            return Err(Refusal::Count {
                max: limits.max_subcalls,
            });
        }
        let after = self.used.saturating_add(self.reserved).saturating_add(cost);
        if after > limits.max_log_bytes {
            return Err(Refusal::Budget {
                used: self.used,
                max: limits.max_log_bytes,
            });
        }
        self.reserved += cost;
        Ok(())
    }

    /// A record of `bytes` was sent; `reserved` was set aside for it.
    fn spend(&mut self, reserved: usize, bytes: usize) {
        self.reserved = self.reserved.saturating_sub(reserved);
        self.used = self.used.saturating_add(bytes);
    }

    /// Whether the records sent so far already fill the budget.
    fn spent(&self, limits: &SubCallLimits) -> Option<Refusal> {
        (self.used >= limits.max_log_bytes).then_some(Refusal::Budget {
            used: self.used,
            max: limits.max_log_bytes,
        })
    }
}

struct InFlight {
    name: String,
    arguments: Value,
    track: Arc<CallTrack>,
    span: Span,
    /// Bytes set aside for its record.
    reserved: usize,
}

/// A sub-call's record, and its size in the log.
fn dispatch_event(
    parent_call_id: &str,
    arguments: Value,
    result: &FrozenResult,
) -> (EventBody, usize) {
    let data = CodeDispatchData {
        call_id: result.call_id().to_string(),
        parent_call_id: parent_call_id.to_string(),
        name: result.tool().to_string(),
        arguments,
        message: result.content().to_vec(),
        error: result.error_info().cloned(),
    };
    let bytes = json_len(|w| serde_json::to_writer(w, &data)).saturating_add(RECORD_OVERHEAD);
    (EventBody::CodeDispatch(data), bytes)
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
            limits: pipeline.config.subcalls.clone(),
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
            let (event, bytes) = dispatch_event(&self.parent_call_id, f.arguments, &result);
            ledger.spend(f.reserved, bytes);
            // Sent, not awaited: the order of sends is the order in the log, and the parent's
            // result is sent after this returns.
            drop(self.log.send(self.step, event));
            ledger.closed_out.insert(call_id, result);
        }
        ledger.unrecorded.take()
    }

    /// Runs an admitted sub-call once it has its turn, unless the records sent while it
    /// waited filled the budget: then it is refused without running.
    async fn run_admitted(
        &self,
        input: &ToolExecutionInput,
        track: &Arc<CallTrack>,
        span: &Span,
    ) -> (Candidate, Option<Span>, Option<Refusal>) {
        if let Some(refusal) = self.ledger().spent(&self.limits) {
            let denied = Candidate::failed(ErrorCode::Denied, refusal.message());
            return (denied, None, Some(refusal));
        }
        let (candidate, finalize) = self.pipeline.run(input, track, None, span).await;
        (candidate, Some(finalize), None)
    }

    /// Waits for a record's acknowledgement; a failure withholds the parent's result.
    async fn await_record(
        &self,
        call_id: &str,
        ack: impl std::future::Future<Output = Result<u64, SessionError>>,
    ) {
        if let Err(e) = ack.await {
            tracing::error!(call_id = %call_id, error = %e, "could not record a code dispatch; the parent's result will be withheld");
            self.ledger()
                .unrecorded
                .get_or_insert((call_id.to_string(), e));
        }
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
        let call_id = sub_call_id(&self.parent_call_id, n);
        let (_handle, signal) = CancelHandle::child_of(&parent.signal);
        // Bounded before anything records them: an oversized sub-call logs only its size and
        // ends TOOL_INPUT_ERROR, like a top-level call.
        let bounded = Arguments::from_value(arguments);
        let arguments = bounded.to_logged();
        let argument_bytes = json_len(|w| serde_json::to_writer(w, &arguments));
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
        // What its record costs at least: the arguments, the ids, the name.
        let cost = argument_bytes
            .saturating_add(name.len())
            .saturating_add(call_id.len().saturating_mul(2))
            .saturating_add(RECORD_OVERHEAD);
        let refused = {
            let mut ledger = self.ledger();
            if ledger.closed {
                None
            } else {
                match ledger.admit(cost, &self.limits) {
                    Ok(()) => {
                        ledger.in_flight.insert(
                            call_id.clone(),
                            InFlight {
                                name: name.to_string(),
                                arguments: arguments.clone(),
                                track: track.clone(),
                                span: span.clone(),
                                reserved: cost,
                            },
                        );
                        Some(None)
                    }
                    Err(refusal) => {
                        // Answered and recorded at once, under the ledger's lock like every
                        // record, so it cannot land after the parent's result.
                        let result = self.complete(
                            &call_id,
                            name,
                            Candidate::failed(ErrorCode::Denied, refusal.message()),
                            &span,
                            None,
                        );
                        let ack = refusal.recorded().then(|| {
                            let (event, bytes) = dispatch_event(
                                &self.parent_call_id,
                                refusal.omitted(argument_bytes),
                                &result,
                            );
                            ledger.spend(0, bytes);
                            self.log.send(self.step, event)
                        });
                        Some(Some((result, ack)))
                    }
                }
            }
        };
        let Some(refused) = refused else {
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
        };
        if let Some((result, ack)) = refused {
            if let Some(ack) = ack {
                self.await_record(&call_id, ack).await;
            }
            return result;
        }
        let run = async {
            let run = async {
                if name == crate::RUN_CODE {
                    let denied = Candidate::failed(
                        ErrorCode::Denied,
                        "code cannot call run_code from inside run_code",
                    );
                    (denied, None, None)
                } else if self.is_parallel(name, &arguments) {
                    let _slot = self.pool.acquire().await;
                    let _shared = self.barrier.read().await;
                    self.run_admitted(&input, &track, &span).await
                } else {
                    let _alone = self.barrier.write().await;
                    self.run_admitted(&input, &track, &span).await
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
                    (failed, None, None)
                }
            }
        };
        let (mut candidate, finalize, refusal) = run.instrument(span.clone()).await;
        if !candidate.contexts.is_empty() {
            tracing::info!(
                call_id = %call_id,
                dropped = candidate.contexts.len(),
                "additionalContexts of a sub-call are dropped so run_code and its result stay adjacent"
            );
            candidate.contexts.clear();
        }
        // A sub-call refused when its turn came keeps only the marker of its arguments.
        let arguments = match refusal {
            Some(refusal) => refusal.omitted(argument_bytes),
            None => arguments,
        };
        // Under the ledger's lock, so that `close` either sees the sub-call in flight (and
        // closes it) or finds it frozen and its record sent: never a record after the parent's
        // result.
        let (result, ack) = {
            let mut ledger = self.ledger();
            let Some(flight) = ledger.in_flight.remove(&call_id) else {
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
            };
            let result = self.complete(&call_id, name, candidate, &span, finalize);
            let (event, bytes) = dispatch_event(&self.parent_call_id, arguments, &result);
            ledger.spend(flight.reserved, bytes);
            (result, self.log.send(self.step, event))
        };
        self.await_record(&call_id, ack).await;
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
