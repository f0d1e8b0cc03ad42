//! The checker: verifies every invariant of SPEC.md's log section and names the first
//! violation (what `dsh check` reports).
//!
//! Invariants, each with its [`Violation`]:
//! - seq starts at 1 and increases by exactly 1 ([`Violation::SeqOutOfOrder`]);
//! - steps never go backwards ([`Violation::StepBackwards`]), nor past 2^63 − 1
//!   ([`Violation::StepTooLarge`]);
//! - within a step, no two `tool/call` events, and no `tool/call` and `tool/code-dispatch`,
//!   share a `callId` ([`Violation::DuplicateCallId`]);
//! - a `tool/result` has `surfaceOp: "append"` ([`Violation::SurfaceOp`]) and its
//!   `sourceEventSeqs` names exactly one event ([`Violation::SourceCount`]): a `tool/call`
//!   ([`Violation::UnknownCall`]) that comes before it ([`Violation::ResultBeforeCall`]), in the
//!   same step ([`Violation::ResultInOtherStep`]), with the same `callId`
//!   ([`Violation::CallIdMismatch`]), and not already answered
//!   ([`Violation::DuplicateResult`]);
//! - every `tool/call` has a result ([`Violation::MissingResult`]);
//! - a step's `user/message` events come after all of that step's results
//!   ([`Violation::UserMessageBeforeResult`]);
//! - a `tool/code-dispatch` sits between its parent call and that call's result, in the
//!   parent's step ([`Violation::DispatchOutsideParent`]).
//!
//! "First" is log order: the violation found at the earliest event, reading from the top.
//!
//! [`check_file`] also tells a log that only needs recovery from a broken one: a torn tail, or
//! calls of the last step left without a result, and nothing else wrong, is
//! [`Violation::NeedsRecovery`] (still a failure: the log is not whole until it is recovered).
//!
//! ```
//! use dsh_core::event::{EventBody, SessionEvent, UserMessageData};
//! use dsh_session::check::{check, Violation};
//! let user = |seq, step| SessionEvent { at: None,
//!     seq,
//!     step,
//!     body: EventBody::UserMessage(UserMessageData { content: "x".into(), origin: "c".into() }),
//! };
//! assert_eq!(check(&[user(1, 1), user(2, 2)]).unwrap().events, 2);
//! assert!(matches!(
//!     check(&[user(1, 2), user(2, 1)]),
//!     Err(Violation::StepBackwards { seq: 2, .. })
//! ));
//! ```

use crate::error::SessionError;
use crate::lines::for_each_line;
use crate::open;
use crate::recover::{BadLine, Tail, TornRun, Tracker, Verdict};
use dsh_core::event::{MAX_STEP, SURFACE_APPEND};
use dsh_core::{EventBody, SessionEvent};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

/// What a log that passes the checker holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Events in the log.
    pub events: u64,
    /// Distinct steps.
    pub steps: u64,
    /// `tool/call` events (each with its one result).
    pub calls: u64,
    /// `tool/code-dispatch` events.
    pub code_dispatches: u64,
    /// `user/message` events.
    pub user_messages: u64,
}

/// The first invariant a log breaks. `seq` fields name the offending event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The file could not be read.
    Unreadable {
        /// The OS error.
        reason: String,
    },
    /// A line of the file is not a whole event.
    Parse {
        /// 1-based line number.
        line: usize,
        /// What the parser said.
        reason: String,
    },
    /// The event at `line` (its 1-based position in the log) does not have the next seq.
    SeqOutOfOrder {
        /// 1-based position (the line, in a file).
        line: usize,
        /// The seq it should have.
        expected: u64,
        /// The seq it has.
        found: u64,
    },
    /// An event's step is smaller than the step before it.
    StepBackwards {
        /// The event.
        seq: u64,
        /// Its step.
        step: u64,
        /// The step before it.
        previous: u64,
    },
    /// A `tool/result` whose `surfaceOp` is not `append`.
    SurfaceOp {
        /// The result.
        seq: u64,
        /// The `surfaceOp` it has.
        found: String,
    },
    /// A `tool/result` whose `sourceEventSeqs` does not name exactly one event.
    SourceCount {
        /// The result.
        seq: u64,
        /// The `sourceEventSeqs` it has.
        found: Vec<u64>,
    },
    /// A `tool/result` that comes before the `tool/call` it names.
    ResultBeforeCall {
        /// The result.
        seq: u64,
        /// The call's seq.
        call_seq: u64,
    },
    /// A `tool/result` naming a seq that is not a `tool/call`.
    UnknownCall {
        /// The result.
        seq: u64,
        /// The seq it names.
        call_seq: u64,
    },
    /// A second `tool/result` for a call.
    DuplicateResult {
        /// The second result.
        seq: u64,
        /// The call.
        call_seq: u64,
        /// The first result.
        first: u64,
    },
    /// A call whose result is in another step.
    ResultInOtherStep {
        /// The result.
        seq: u64,
        /// The call.
        call_seq: u64,
        /// The call's step.
        call_step: u64,
        /// The result's step.
        step: u64,
    },
    /// A `tool/result` whose `callId` is not its call's.
    CallIdMismatch {
        /// The result.
        seq: u64,
        /// The call.
        call_seq: u64,
        /// The call's id.
        expected: String,
        /// The id the result has.
        found: String,
    },
    /// A `tool/call` with no `tool/result` at all.
    MissingResult {
        /// The call.
        call_seq: u64,
        /// Its id.
        call_id: String,
        /// Its step.
        step: u64,
    },
    /// A `user/message` that comes before one of its step's results.
    UserMessageBeforeResult {
        /// The user message.
        seq: u64,
        /// The result after it.
        result_seq: u64,
        /// The step.
        step: u64,
    },
    /// A `tool/code-dispatch` that is not between its parent call and that call's result.
    DispatchOutsideParent {
        /// The dispatch.
        seq: u64,
        /// The parent it names.
        parent_call_id: String,
        /// Where it is instead.
        reason: String,
    },
    /// A `tool/call` whose `callId` a `tool/call` or `tool/code-dispatch` of the same step
    /// already has, or a `tool/code-dispatch` whose `callId` a `tool/call` of the step has:
    /// pairing by id would be ambiguous.
    DuplicateCallId {
        /// The second event with the id.
        seq: u64,
        /// The id.
        call_id: String,
        /// The step.
        step: u64,
        /// The first event with the id.
        first: u64,
    },
    /// An event whose step is past [`MAX_STEP`] (2^63 − 1, SPEC.md's "Limits of numbers").
    StepTooLarge {
        /// The event.
        seq: u64,
        /// Its step.
        step: u64,
    },
    /// A `tool/result` naming a seq that is not a call of its step awaiting a result: what the
    /// checker can tell reading event by event, as recovery does. [`check`] and [`check_file`]
    /// never report it: holding the whole log, they say which it is
    /// ([`Violation::UnknownCall`], [`Violation::ResultBeforeCall`],
    /// [`Violation::DuplicateResult`] or [`Violation::ResultInOtherStep`]).
    NotAnOpenCall {
        /// The result.
        seq: u64,
        /// The seq it names.
        call_seq: u64,
    },
    /// What a crash leaves, and nothing else: a torn tail, calls of the last step without a
    /// result, or both. Recovery (opening the log for writing) repairs it; the log breaks no
    /// invariant once it is recovered. Only [`check_file`] reports it.
    NeedsRecovery {
        /// The 1-based line the torn tail starts at (it runs to the end of the file).
        torn_line: Option<usize>,
        /// The torn tail's size in bytes.
        torn_bytes: u64,
        /// The ids of the calls left open, in seq order.
        open_calls: Vec<String>,
    },
}

/// At most this many open call ids are named in a message.
const NAMED_CALLS: usize = 5;

impl Violation {
    /// The seq of the event the violation is about, when there is one.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Violation::Unreadable { .. }
            | Violation::Parse { .. }
            | Violation::SeqOutOfOrder { .. }
            | Violation::NeedsRecovery { .. } => None,
            Violation::MissingResult { call_seq, .. } => Some(*call_seq),
            Violation::StepBackwards { seq, .. }
            | Violation::SurfaceOp { seq, .. }
            | Violation::SourceCount { seq, .. }
            | Violation::ResultBeforeCall { seq, .. }
            | Violation::UnknownCall { seq, .. }
            | Violation::NotAnOpenCall { seq, .. }
            | Violation::DuplicateResult { seq, .. }
            | Violation::ResultInOtherStep { seq, .. }
            | Violation::CallIdMismatch { seq, .. }
            | Violation::UserMessageBeforeResult { seq, .. }
            | Violation::DispatchOutsideParent { seq, .. }
            | Violation::DuplicateCallId { seq, .. }
            | Violation::StepTooLarge { seq, .. } => Some(*seq),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Unreadable { reason } => write!(f, "the log cannot be read: {reason}"),
            Violation::Parse { line, reason } => {
                write!(f, "line {line} is not a whole session event: {reason}")
            }
            Violation::SeqOutOfOrder {
                line,
                expected,
                found,
            } => write!(
                f,
                "line {line} has seq {found} where {expected} was expected \
                 (seq starts at 1 and increases by exactly 1)"
            ),
            Violation::StepBackwards {
                seq,
                step,
                previous,
            } => write!(
                f,
                "seq {seq} is in step {step}, after step {previous}: steps never go backwards"
            ),
            Violation::SurfaceOp { seq, found } => write!(
                f,
                "seq {seq}: tool/result has surfaceOp `{found}`, not `{SURFACE_APPEND}`"
            ),
            Violation::SourceCount { seq, found } => write!(
                f,
                "seq {seq}: tool/result sourceEventSeqs is {found:?}; it must name exactly one tool/call"
            ),
            Violation::ResultBeforeCall { seq, call_seq } => write!(
                f,
                "seq {seq}: tool/result comes before its tool/call (seq {call_seq})"
            ),
            Violation::UnknownCall { seq, call_seq } => write!(
                f,
                "seq {seq}: tool/result names seq {call_seq}, which is not a tool/call"
            ),
            Violation::NotAnOpenCall { seq, call_seq } => write!(
                f,
                "seq {seq}: tool/result names seq {call_seq}, which is not a tool/call of this \
                 step awaiting its result (not a call, answered already, in another step, or \
                 after this result)"
            ),
            Violation::DuplicateResult {
                seq,
                call_seq,
                first,
            } => write!(
                f,
                "seq {seq}: a second tool/result for the tool/call at seq {call_seq} \
                 (the first is seq {first})"
            ),
            Violation::ResultInOtherStep {
                seq,
                call_seq,
                call_step,
                step,
            } => write!(
                f,
                "seq {seq}: the tool/result is in step {step} but its tool/call (seq {call_seq}) \
                 is in step {call_step}"
            ),
            Violation::CallIdMismatch {
                seq,
                call_seq,
                expected,
                found,
            } => write!(
                f,
                "seq {seq}: tool/result has callId `{found}` but its tool/call (seq {call_seq}) \
                 has `{expected}`"
            ),
            Violation::MissingResult {
                call_seq,
                call_id,
                step,
            } => write!(
                f,
                "seq {call_seq}: tool/call `{call_id}` has no tool/result in step {step}"
            ),
            Violation::UserMessageBeforeResult {
                seq,
                result_seq,
                step,
            } => write!(
                f,
                "seq {seq}: user/message comes before the tool/result at seq {result_seq} of \
                 the same step {step}"
            ),
            Violation::DispatchOutsideParent {
                seq,
                parent_call_id,
                reason,
            } => write!(
                f,
                "seq {seq}: tool/code-dispatch for parent `{parent_call_id}` {reason}"
            ),
            Violation::DuplicateCallId {
                seq,
                call_id,
                step,
                first,
            } => write!(
                f,
                "seq {seq}: callId `{call_id}` is used a second time in step {step} (first at \
                 seq {first}); ids must be unique within a step for results to pair with calls"
            ),
            Violation::StepTooLarge { seq, step } => write!(
                f,
                "seq {seq}: step {step} is past the largest step a log may hold, \
                 {MAX_STEP} (2^63 - 1)"
            ),
            Violation::NeedsRecovery {
                torn_line,
                torn_bytes,
                open_calls,
            } => {
                f.write_str(
                    "the log needs recovery (what a crash leaves, not a broken invariant): ",
                )?;
                if let Some(line) = torn_line {
                    write!(
                        f,
                        "a torn tail at line {line} ({torn_bytes} bytes to the end of the file)"
                    )?;
                    if !open_calls.is_empty() {
                        f.write_str(", and ")?;
                    }
                }
                if !open_calls.is_empty() {
                    let mut named = open_calls
                        .iter()
                        .take(NAMED_CALLS)
                        .map(|id| format!("`{id}`"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    if open_calls.len() > NAMED_CALLS {
                        named.push_str(&format!(" and {} more", open_calls.len() - NAMED_CALLS));
                    }
                    write!(
                        f,
                        "{} call(s) left open without a result ({named})",
                        open_calls.len()
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Violation {}

impl From<Violation> for SessionError {
    fn from(v: Violation) -> SessionError {
        let seq = v.seq().unwrap_or(0);
        let message = v.to_string();
        // The error names the seq itself.
        let message = match message.strip_prefix(&format!("seq {seq}: ")) {
            Some(rest) => rest.to_string(),
            None => message,
        };
        SessionError::Invariant { seq, message }
    }
}

#[derive(Clone)]
struct OpenCall {
    call_id: String,
    step: u64,
}

/// The invariants, checked one event at a time with state bounded by the current step: its
/// open calls, and the ids of its calls and sub-calls (for [`Violation::DuplicateCallId`]).
/// So recovery can vouch for a log of any length as it streams it.
///
/// Three violations need to see other events to be told apart, and this pass reports them in
/// their plainest form: a step that ends with a call open is [`Violation::MissingResult`] (its
/// result may come later, in another step); a result naming any seq that is not an open call
/// of this step is [`Violation::NotAnOpenCall`] (it may be answered already, or come later); a
/// misplaced dispatch says only that its parent is not open. [`check`] and [`check_file`] then
/// name each precisely ([`explain`]), reading the log again.
#[derive(Default, Clone)]
pub(crate) struct StreamCheck {
    next_seq: u64,
    step: Option<u64>,
    /// Calls of the current step still without a result, by seq.
    open: BTreeMap<u64, OpenCall>,
    /// The current step's `tool/call` ids, and where each first appears.
    call_ids: HashMap<String, u64>,
    /// The current step's `tool/code-dispatch` ids, and where each first appears.
    dispatch_ids: HashMap<String, u64>,
    /// The current step's first `user/message`.
    first_user: Option<u64>,
    report: CheckReport,
}

impl StreamCheck {
    /// The calls of the current step still without a result: (seq, step, call id), in seq
    /// order.
    pub fn open_calls(&self) -> impl Iterator<Item = (u64, u64, &str)> {
        self.open
            .iter()
            .map(|(seq, c)| (*seq, c.step, c.call_id.as_str()))
    }

    /// Checks the next event of the log.
    pub fn push(&mut self, event: &SessionEvent) -> Result<(), Violation> {
        let expected = self.next_seq.max(1);
        if event.seq != expected {
            return Err(Violation::SeqOutOfOrder {
                line: usize::try_from(expected).unwrap_or(usize::MAX),
                expected,
                found: event.seq,
            });
        }
        // Contiguous from 1, a seq cannot pass MAX_SEQ in any file that exists.
        self.next_seq = expected.saturating_add(1);
        if event.step > MAX_STEP {
            return Err(Violation::StepTooLarge {
                seq: event.seq,
                step: event.step,
            });
        }
        match self.step {
            Some(previous) if event.step < previous => {
                return Err(Violation::StepBackwards {
                    seq: event.seq,
                    step: event.step,
                    previous,
                });
            }
            Some(previous) if event.step == previous => {}
            _ => {
                self.close_step()?;
                self.step = Some(event.step);
                self.first_user = None;
                self.call_ids.clear();
                self.dispatch_ids.clear();
                self.report.steps += 1;
            }
        }
        self.report.events += 1;
        match &event.body {
            EventBody::ToolCall(d) => {
                self.report.calls += 1;
                let first = self
                    .call_ids
                    .get(&d.call_id)
                    .or_else(|| self.dispatch_ids.get(&d.call_id));
                if let Some(&first) = first {
                    return Err(self.duplicate(event, &d.call_id, first));
                }
                self.call_ids.insert(d.call_id.clone(), event.seq);
                self.open.insert(
                    event.seq,
                    OpenCall {
                        call_id: d.call_id.clone(),
                        step: event.step,
                    },
                );
            }
            EventBody::ToolResult {
                data,
                surface_op,
                source_event_seqs,
            } => self.result(event, &data.call_id, surface_op, source_event_seqs)?,
            EventBody::CodeDispatch(d) => {
                self.report.code_dispatches += 1;
                if !self.open.values().any(|c| c.call_id == d.parent_call_id) {
                    return Err(Violation::DispatchOutsideParent {
                        seq: event.seq,
                        parent_call_id: d.parent_call_id.clone(),
                        reason: "names no open tool/call of its step".to_string(),
                    });
                }
                if let Some(&first) = self.call_ids.get(&d.call_id) {
                    return Err(self.duplicate(event, &d.call_id, first));
                }
                self.dispatch_ids
                    .entry(d.call_id.clone())
                    .or_insert(event.seq);
            }
            EventBody::UserMessage(_) => {
                self.report.user_messages += 1;
                self.first_user.get_or_insert(event.seq);
            }
        }
        Ok(())
    }

    fn duplicate(&self, event: &SessionEvent, call_id: &str, first: u64) -> Violation {
        Violation::DuplicateCallId {
            seq: event.seq,
            call_id: call_id.to_string(),
            step: event.step,
            first,
        }
    }

    /// The end of the log: the last step must have no call open.
    pub fn finish(mut self) -> Result<CheckReport, Violation> {
        self.close_step()?;
        Ok(self.report)
    }

    /// The calls a step left open when the next step begins (or the log ends).
    fn close_step(&mut self) -> Result<(), Violation> {
        match self.open.iter().next() {
            None => Ok(()),
            Some((&call_seq, call)) => Err(Violation::MissingResult {
                call_seq,
                call_id: call.call_id.clone(),
                step: call.step,
            }),
        }
    }

    fn result(
        &mut self,
        event: &SessionEvent,
        call_id: &str,
        surface_op: &str,
        sources: &[u64],
    ) -> Result<(), Violation> {
        let seq = event.seq;
        if surface_op != SURFACE_APPEND {
            return Err(Violation::SurfaceOp {
                seq,
                found: surface_op.to_string(),
            });
        }
        let &[call_seq] = sources else {
            return Err(Violation::SourceCount {
                seq,
                found: sources.to_vec(),
            });
        };
        // Only this step's calls can be open (a step that ends with one open is a violation),
        // so an open call is one that comes before this result, in its step, unanswered.
        let Some(call) = self.open.get(&call_seq) else {
            return Err(Violation::NotAnOpenCall { seq, call_seq });
        };
        if call.call_id != call_id {
            return Err(Violation::CallIdMismatch {
                seq,
                call_seq,
                expected: call.call_id.clone(),
                found: call_id.to_string(),
            });
        }
        if let Some(user) = self.first_user {
            return Err(Violation::UserMessageBeforeResult {
                seq: user,
                result_seq: seq,
                step: event.step,
            });
        }
        self.open.remove(&call_seq);
        Ok(())
    }
}

/// The events of a whole log, read from the start as many times as explaining a violation
/// needs. `each` answers whether to go on.
trait Events {
    fn scan(&mut self, each: &mut dyn FnMut(&SessionEvent) -> bool);
}

impl Events for &[SessionEvent] {
    fn scan(&mut self, each: &mut dyn FnMut(&SessionEvent) -> bool) {
        for e in self.iter() {
            if !each(e) {
                break;
            }
        }
    }
}

/// A log file, read again: the events before its first bad line (which is where the checking
/// pass stopped too). An I/O error ends the reading; the explanation then says less.
struct FileEvents<'a>(&'a Path);

impl Events for FileEvents<'_> {
    fn scan(&mut self, each: &mut dyn FnMut(&SessionEvent) -> bool) {
        let Ok(file) = open::for_reading(self.0) else {
            return;
        };
        let mut run = TornRun::default();
        let mut next = 1u64;
        let _ = for_each_line(
            file,
            |line| match run.line(&line, next) {
                Verdict::Event(event) => {
                    next += 1;
                    if each(&event) { Ok(()) } else { Err(()) }
                }
                Verdict::Suspect => Ok(()),
                Verdict::Corrupt(_) => Err(()),
            },
            |_| (),
            |_, _| (),
        );
    }
}

/// The step of the event `seq`, and whether it is a `tool/call`.
fn event_at(events: &mut dyn Events, seq: u64) -> Option<(u64, bool)> {
    let mut found = None;
    events.scan(&mut |e| {
        if e.seq == seq {
            found = Some((e.step, matches!(e.body, EventBody::ToolCall(_))));
        }
        e.seq < seq
    });
    found
}

/// The first `tool/result` naming `call_seq`: (seq, step).
fn result_of(events: &mut dyn Events, call_seq: u64) -> Option<(u64, u64)> {
    let mut found = None;
    events.scan(&mut |e| {
        if let EventBody::ToolResult {
            source_event_seqs, ..
        } = &e.body
            && source_event_seqs.first() == Some(&call_seq)
        {
            found = Some((e.seq, e.step));
        }
        found.is_none()
    });
    found
}

fn misplaced_dispatch(events: &mut dyn Events, seq: u64, step: u64, parent: &str) -> String {
    // Of the calls named `parent`: the first after the dispatch, the last in another step,
    // and the last of all.
    let mut later = None;
    let mut other_step = None;
    let mut last = None;
    events.scan(&mut |e| {
        if matches!(&e.body, EventBody::ToolCall(d) if d.call_id == parent) {
            if e.seq > seq && later.is_none() {
                later = Some(e.seq);
            }
            if e.step != step {
                other_step = Some((e.seq, e.step));
            }
            last = Some(e.seq);
        }
        later.is_none()
    });
    if let Some(later) = later {
        return format!("comes before its parent tool/call (seq {later})");
    }
    if let Some((other, other_step)) = other_step {
        return format!(
            "is in step {step} but its parent tool/call (seq {other}) is in step {other_step}"
        );
    }
    if let Some(call) = last {
        let answered = result_of(events, call).map_or(0, |(r, _)| r);
        return format!(
            "comes after its parent's tool/result (seq {answered}; the call is seq {call})"
        );
    }
    "names no tool/call".to_string()
}

/// Names precisely a violation [`StreamCheck`] reported in its plainest form, by reading the
/// log again.
fn explain(events: &mut dyn Events, violation: Violation) -> Violation {
    match violation {
        Violation::MissingResult {
            call_seq,
            call_id,
            step,
        } => match result_of(events, call_seq) {
            Some((seq, result_step)) => Violation::ResultInOtherStep {
                seq,
                call_seq,
                call_step: step,
                step: result_step,
            },
            None => Violation::MissingResult {
                call_seq,
                call_id,
                step,
            },
        },
        Violation::NotAnOpenCall { seq, call_seq } => {
            let Some((call_step, true)) = event_at(events, call_seq) else {
                return Violation::UnknownCall { seq, call_seq };
            };
            if call_seq > seq {
                return Violation::ResultBeforeCall { seq, call_seq };
            }
            // An earlier call that is not open: answered already, or (when its step had ended
            // without a result, which the pass would have reported first) in another step.
            match result_of(events, call_seq).filter(|(r, _)| *r < seq) {
                Some((first, _)) => Violation::DuplicateResult {
                    seq,
                    call_seq,
                    first,
                },
                None => Violation::ResultInOtherStep {
                    seq,
                    call_seq,
                    call_step,
                    step: event_at(events, seq).map_or(0, |(s, _)| s),
                },
            }
        }
        Violation::DispatchOutsideParent {
            seq,
            parent_call_id,
            reason,
        } => {
            let reason = match event_at(events, seq) {
                Some((step, _)) => misplaced_dispatch(events, seq, step, &parent_call_id),
                None => reason,
            };
            Violation::DispatchOutsideParent {
                seq,
                parent_call_id,
                reason,
            }
        }
        other => other,
    }
}

/// Checks `events` (a whole log, in order) against every invariant of SPEC.md's log section.
pub fn check(events: &[SessionEvent]) -> Result<CheckReport, Violation> {
    let mut pass = StreamCheck::default();
    for event in events {
        pass.push(event).map_err(|v| explain(&mut &events[..], v))?;
    }
    pass.finish().map_err(|v| explain(&mut &events[..], v))
}

/// A bad line of a file, as the checker says it: at the first line, the file is no log.
fn parse_violation(line: usize, reason: String) -> Violation {
    let reason = if line == 1 {
        format!("{reason}; this is not a dsh log (a dsh log starts with the event seq 1)")
    } else {
        reason
    };
    Violation::Parse { line, reason }
}

fn bad_line(bad: BadLine) -> Violation {
    let reason = match (&bad.not_torn, bad.line) {
        (Some(why), 1) => format!("{}, nor what a crash leaves of one ({why})", bad.reason),
        _ => bad.explained(),
    };
    parse_violation(bad.line, reason)
}

/// Checks `events` (a whole log read from a store where no write is ever torn, such as the
/// PostgreSQL backend) as [`check_file`] checks a file: calls of the last step left open, that
/// recovery's `ABORTED` results would close, are [`Violation::NeedsRecovery`]; any other fault
/// is reported as itself.
pub fn check_stored(events: &[SessionEvent]) -> Result<CheckReport, Violation> {
    let mut tracker = Tracker::default();
    for event in events {
        tracker
            .observe(event)
            .map_err(|v| explain(&mut &events[..], v))?;
    }
    let strict = tracker.strict();
    if let Ok(report) = strict {
        return Ok(report);
    }
    match tracker.finish(Tail::CLEAN) {
        Ok((_, recovery)) => Err(Violation::NeedsRecovery {
            torn_line: None,
            torn_bytes: 0,
            open_calls: recovery.closed_calls,
        }),
        Err(after) => Err(explain(&mut &events[..], strict.err().unwrap_or(after))),
    }
}

/// Checks the JSON Lines log at `path`: every line must be a whole event (a last line lacking
/// only its newline is accepted), then [`check`]. An empty file is a valid, empty log. The
/// log is streamed: memory holds one line and the current step's calls, whatever its length
/// (a violation is then explained by reading the file again). A file that is not a regular
/// file (a FIFO, a device, a directory) is [`Violation::Unreadable`], refused before reading.
///
/// A log that only needs recovery is [`Violation::NeedsRecovery`]: its only faults are a torn
/// tail (the bad lines recovery would cut, see [`crate::FileBackend::open`]) and calls left
/// open that recovery's `ABORTED` results would close without breaking any invariant. Any
/// other fault is reported as itself, the first in the file: an event that breaks an
/// invariant, or a bad line before it that something whole follows, or text that is not what
/// a torn write leaves, as a [`Violation::Parse`] naming it (saying "this is not a dsh log"
/// at the first line).
pub fn check_file(path: impl AsRef<Path>) -> Result<CheckReport, Violation> {
    let path = path.as_ref();
    let unreadable = |e: std::io::Error| Violation::Unreadable {
        reason: format!("{}: {e}", path.display()),
    };
    let file = open::for_reading(path).map_err(unreadable)?;
    let mut run = TornRun::default();
    let mut tracker = Tracker::default();
    let mut broken: Option<Violation> = None;
    let mut next = 1u64;
    let scanned = for_each_line(
        file,
        |line| match run.line(&line, next) {
            Verdict::Event(event) => {
                next = next.saturating_add(1);
                if broken.is_none() {
                    broken = tracker.observe(&event).err();
                }
                Ok(())
            }
            Verdict::Suspect => Ok(()),
            Verdict::Corrupt(bad) => Err(bad_line(bad)),
        },
        unreadable,
        |line, _| parse_violation(line, crate::recover::too_long()),
    )
    .and_then(|total| Ok((total, run.finish().map_err(bad_line)?)));
    // The first fault in the file wins: a broken event comes before the bad line the reading
    // stopped at.
    if let Some(violation) = broken {
        return Err(explain(&mut FileEvents(path), violation));
    }
    let (total, torn) = scanned?;
    let strict = tracker.strict();
    if torn.is_none()
        && let Ok(report) = strict
    {
        return Ok(report);
    }
    // Would recovery leave a whole log? Then this is a crash's leftovers, not a violation.
    match tracker.finish(Tail::CLEAN) {
        Ok((_, recovery)) => Err(Violation::NeedsRecovery {
            torn_line: torn.as_ref().map(|t| t.line),
            torn_bytes: torn.map_or(0, |t| total - t.offset),
            open_calls: recovery.closed_calls,
        }),
        Err(after) => Err(explain(
            &mut FileEvents(path),
            strict.err().unwrap_or(after),
        )),
    }
}
