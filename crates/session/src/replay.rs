//! Replay: the model-visible transcript, rebuilt from the log alone.
//!
//! A step's calls come in block order (the order of their `tool/call` seqs), its results in
//! call order whatever order they finished in, then its `user/message` events. A
//! `tool/code-dispatch` is not model-visible (the `run_code` result that contains its effect
//! is), and neither is a result's `meta`. Rendering the [`Transcript`] into a model's format is
//! `dsh-formats`' job.
//!
//! ```
//! use dsh_core::event::{EventBody, SessionEvent, ToolCallData, ToolResultData};
//! use dsh_core::ContentBlock;
//! use dsh_session::replay::rebuild;
//! let call = |seq, id: &str| SessionEvent { at: None,
//!     seq,
//!     step: 1,
//!     body: EventBody::ToolCall(ToolCallData {
//!         call_id: id.into(),
//!         name: "t".into(),
//!         arguments: serde_json::json!({}),
//!         arguments_text: None,
//!         agent: "main".into(),
//!         parent: None,
//!     }),
//! };
//! let result = |seq, id: &str, call_seq| SessionEvent { at: None,
//!     seq,
//!     step: 1,
//!     body: EventBody::result(
//!         ToolResultData { started_at: None, call_id: id.into(), message: vec![ContentBlock::text(id)], error: None, meta: None },
//!         call_seq,
//!     ),
//! };
//! // b finished first; the transcript still lists a's result first.
//! let log = [call(1, "a"), call(2, "b"), result(3, "b", 2), result(4, "a", 1)];
//! let transcript = rebuild(&log);
//! let step = &transcript.steps[0];
//! assert_eq!(step.calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
//! assert_eq!(step.results.iter().map(|r| r.call_id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
//! ```

use crate::error::SessionError;
use crate::parallel_replay;
use crate::recover;
use dsh_core::transcript::{Transcript, TranscriptCall, TranscriptResult, TranscriptStep};
use dsh_core::{EventBody, SessionEvent};
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug)]
struct StepParts {
    step: u64,
    calls: Vec<TranscriptCall>,
    results: Vec<Option<TranscriptResult>>,
    user_messages: Vec<String>,
}

/// Builds a [`Transcript`] one event at a time, so a large log never has to be held as events.
///
/// It assumes a log that passes [`crate::check::check`]; on other logs it does what it can: a
/// result that names no known call is left out, and a call without a result has none (unless
/// [`TranscriptBuilder::close_open_calls`] gives it the result recovery would).
#[derive(Debug, Default)]
pub struct TranscriptBuilder {
    steps: Vec<StepParts>,
    /// Step number -> position in `steps`.
    positions: HashMap<u64, usize>,
    /// Calls still waiting for their result: seq -> (step position, call index).
    open: HashMap<u64, (usize, usize)>,
}

impl TranscriptBuilder {
    /// An empty transcript.
    pub fn new() -> TranscriptBuilder {
        TranscriptBuilder::default()
    }

    fn step_position(&mut self, step: u64) -> usize {
        // Events of one step come together; skip the map for the common case.
        if let Some(last) = self.steps.last()
            && last.step == step
        {
            return self.steps.len() - 1;
        }
        let steps = &mut self.steps;
        *self.positions.entry(step).or_insert_with(|| {
            steps.push(StepParts {
                step,
                calls: Vec::new(),
                results: Vec::new(),
                user_messages: Vec::new(),
            });
            steps.len() - 1
        })
    }

    /// Adds the next event of the log.
    pub fn push(&mut self, event: SessionEvent) {
        match event.body {
            EventBody::ToolCall(data) => {
                let pos = self.step_position(event.step);
                let parts = &mut self.steps[pos];
                self.open.insert(event.seq, (pos, parts.calls.len()));
                parts.calls.push(TranscriptCall {
                    call_id: data.call_id,
                    name: data.name,
                    arguments: data.arguments,
                    arguments_text: data.arguments_text,
                });
                parts.results.push(None);
            }
            EventBody::ToolResult {
                data,
                source_event_seqs,
                ..
            } => {
                let slot = source_event_seqs
                    .first()
                    .and_then(|seq| self.open.remove(seq));
                let Some((pos, index)) = slot else {
                    tracing::debug!(
                        seq = event.seq,
                        "replay: a tool/result names no open call; left out"
                    );
                    return;
                };
                self.steps[pos].results[index] = Some(TranscriptResult {
                    call_id: data.call_id,
                    content: data.message,
                    error: data.error,
                });
            }
            EventBody::CodeDispatch(_) => {}
            EventBody::UserMessage(data) => {
                let pos = self.step_position(event.step);
                self.steps[pos].user_messages.push(data.content);
            }
        }
    }

    /// Gives every call still without a result the `ABORTED` result recovery would append,
    /// so the transcript is the one a resumed session continues from.
    pub fn close_open_calls(&mut self) {
        for (_, (pos, index)) in self.open.drain() {
            let parts = &mut self.steps[pos];
            let data = recover::aborted_result(&parts.calls[index].call_id);
            parts.results[index] = Some(TranscriptResult {
                call_id: data.call_id,
                content: data.message,
                error: data.error,
            });
        }
    }

    /// The transcript.
    pub fn finish(self) -> Transcript {
        Transcript {
            steps: self
                .steps
                .into_iter()
                .map(|p| TranscriptStep {
                    step: p.step,
                    calls: p.calls,
                    results: p.results.into_iter().flatten().collect(),
                    user_messages: p.user_messages,
                })
                .collect(),
        }
    }
}

/// The model-visible transcript of `events` (a log that passes the checker).
pub fn rebuild(events: &[SessionEvent]) -> Transcript {
    let mut builder = TranscriptBuilder::new();
    for event in events {
        builder.push(event.clone());
    }
    builder.finish()
}

/// Opens a log to read: a regular file only (a FIFO or a device is refused before reading).
fn open(path: &Path) -> Result<std::fs::File, SessionError> {
    crate::open::for_reading(path)
        .map_err(|e| SessionError::io(format!("opening {}", path.display()), &e))
}

/// The events of the log at `path` as opening it would leave them, without changing the file:
/// a torn last line is left out, and every call without a result is followed (at the end) by
/// the `ABORTED` result recovery would append. A bad line elsewhere is
/// [`SessionError::Corrupt`], and whole events that break an invariant are
/// [`SessionError::Invariant`], as opening the log would find; a file that is not a log is
/// [`SessionError::NotALog`]. A file that does not exist is an error, not an empty log, and
/// so is anything but a regular file.
pub fn read_log(path: impl AsRef<Path>) -> Result<Vec<SessionEvent>, SessionError> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let mut events = Vec::new();
    let (tail, tracker) = recover::scan_tracked(open(path)?, &shown, |e| events.push(e))?;
    let (closings, recovery) = tracker.finish(tail)?;
    if recovery.repaired() {
        tracing::info!(
            log = %shown,
            torn_bytes = recovery.torn_bytes_cut,
            open_calls = ?recovery.closed_calls,
            "the log needs recovery; reading it as recovery would leave it"
        );
    }
    events.extend(closings);
    Ok(events)
}

/// `rebuild(&read_log(path)?)`, without holding the events: the transcript of the log at
/// `path` as a resumed session would see it.
///
/// A large log that is clean (every line a whole event, nothing to recover but calls left
/// open) is parsed on two threads; anything else is read on this one, which names what is
/// wrong exactly as [`read_log`] does.
pub fn replay_file(path: impl AsRef<Path>) -> Result<Transcript, SessionError> {
    let path = path.as_ref();
    let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    if parallel {
        let file = open(path)?;
        let large = file
            .metadata()
            .is_ok_and(|m| m.len() >= parallel_replay::MIN_PARALLEL);
        if large && let Some(transcript) = parallel_replay::replay(&file, parallel_replay::CHUNK) {
            return Ok(transcript);
        }
    }
    let mut builder = TranscriptBuilder::new();
    // The same checks as opening the log: what recovery would refuse is refused here too.
    let (_, tracker) = recover::scan_tracked(open(path)?, &path.display().to_string(), |e| {
        builder.push(e)
    })?;
    tracker.finish(recover::Tail::CLEAN)?;
    builder.close_open_calls();
    Ok(builder.finish())
}
