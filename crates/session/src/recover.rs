//! Reading a log back: whole lines, a torn tail, seq continuity, and the calls a crash left
//! open. Pure functions over the file's bytes, shared by [`crate::FileBackend::open`] (which
//! then repairs the file) and [`crate::replay`] (which repairs only its in-memory view).

use crate::error::SessionError;
use crate::lines::for_each_line;
use dsh_core::event::ToolResultData;
use dsh_core::{ContentBlock, ErrorCode, EventBody, SessionEvent, ToolError};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::Read;

/// What opening an existing log found and repaired.
///
/// ```
/// use dsh_session::Recovery;
/// let fresh = Recovery::default();
/// assert!(!fresh.repaired());
/// assert_eq!((fresh.next_seq, fresh.next_step), (1, 1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Whole events read from the file (not counting the ones recovery appended).
    pub events_read: u64,
    /// Bytes of a torn last line that were cut off.
    pub torn_bytes_cut: u64,
    /// The last line was a whole event without its newline; the newline was added.
    pub newline_added: bool,
    /// Calls that had no result, in seq order; each got a synthesized `ABORTED` result.
    pub closed_calls: Vec<String>,
    /// The seq the next appended event gets.
    pub next_seq: u64,
    /// The step a resumed session continues with (the highest step in the log, plus one):
    /// give it to the scheduler as `SchedulerConfig.first_step`.
    pub next_step: u64,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery {
            events_read: 0,
            torn_bytes_cut: 0,
            newline_added: false,
            closed_calls: Vec::new(),
            next_seq: 1,
            next_step: 1,
        }
    }
}

impl Recovery {
    /// True when recovery changed the file.
    pub fn repaired(&self) -> bool {
        self.torn_bytes_cut > 0 || self.newline_added || !self.closed_calls.is_empty()
    }
}

/// Where the whole lines of a log end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tail {
    /// Length of the part made of whole events (the torn tail excluded).
    pub valid_len: u64,
    /// Bytes after `valid_len` that are not a whole event.
    pub torn_bytes: u64,
    /// The last event has no newline after it.
    pub missing_newline: bool,
}

fn parse_line(line: &[u8]) -> Result<SessionEvent, String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err("blank line".into());
    }
    serde_json::from_slice::<SessionEvent>(line).map_err(|e| e.to_string())
}

/// A complete JSON value cannot be a torn write of one of ours: an object cut short does not
/// parse. So a last line that is whole JSON but not an event is corruption, not a tear.
fn is_whole_json(line: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
}

/// Parses every line `reader` gives, in order, verifying that seqs run 1, 2, 3, ..., and hands
/// each event to `each`. A last segment without a newline is a whole event when it parses, and
/// a torn tail otherwise; any other bad line is [`SessionError::Corrupt`]. `what` names the log
/// in I/O errors.
pub(crate) fn scan(
    reader: impl Read,
    what: &str,
    mut each: impl FnMut(SessionEvent),
) -> Result<Tail, SessionError> {
    let mut expected = 1u64;
    let mut tail = None;
    let total = for_each_line(
        reader,
        |line| {
            let len = line.bytes.len() as u64;
            match parse_line(line.bytes) {
                Ok(event) => {
                    if event.seq != expected {
                        return Err(SessionError::Corrupt {
                            line: line.number,
                            reason: format!("seq {} where {expected} was expected", event.seq),
                        });
                    }
                    expected += 1;
                    each(event);
                    if !line.terminated {
                        tail = Some(Tail {
                            valid_len: line.offset + len,
                            torn_bytes: 0,
                            missing_newline: true,
                        });
                    }
                    Ok(())
                }
                Err(reason) if line.terminated || is_whole_json(line.bytes) => {
                    Err(SessionError::Corrupt {
                        line: line.number,
                        reason,
                    })
                }
                Err(_) => {
                    tail = Some(Tail {
                        valid_len: line.offset,
                        torn_bytes: len,
                        missing_newline: false,
                    });
                    Ok(())
                }
            }
        },
        |e| SessionError::io(format!("reading {what}"), &e),
    )?;
    Ok(tail.unwrap_or(Tail {
        valid_len: total,
        torn_bytes: 0,
        missing_newline: false,
    }))
}

/// The result recovery gives a call that a crash left without one: `ABORTED`, marked in its
/// meta (kept, never shown to the model) as written by recovery.
pub(crate) fn aborted_result(call_id: &str) -> ToolResultData {
    let message = "the call was interrupted: the session stopped before the call finished";
    let mut meta = Map::new();
    meta.insert("dsh.recovered".into(), Value::Bool(true));
    ToolResultData {
        call_id: call_id.to_string(),
        message: vec![ContentBlock::text(message)],
        error: Some(ToolError::new(ErrorCode::Aborted, message)),
        meta: Some(meta),
    }
}

/// Follows a log event by event to learn what recovery must append and where it resumes.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    events: u64,
    max_step: u64,
    /// Calls without a result yet: seq -> (step, call id).
    open: BTreeMap<u64, (u64, String)>,
}

impl Tracker {
    pub fn observe(&mut self, event: &SessionEvent) {
        self.events += 1;
        self.max_step = self.max_step.max(event.step);
        match &event.body {
            EventBody::ToolCall(d) => {
                self.open.insert(event.seq, (event.step, d.call_id.clone()));
            }
            EventBody::ToolResult {
                source_event_seqs, ..
            } => {
                for seq in source_event_seqs {
                    self.open.remove(seq);
                }
            }
            EventBody::CodeDispatch(_) | EventBody::UserMessage(_) => {}
        }
    }

    /// The synthesized `ABORTED` results for every open call (in call order, seqs following
    /// the log's last), and the recovery report.
    pub fn finish(self, tail: Tail) -> (Vec<SessionEvent>, Recovery) {
        let mut seq = self.events + 1;
        let mut closings = Vec::with_capacity(self.open.len());
        let mut closed_calls = Vec::with_capacity(self.open.len());
        for (call_seq, (step, call_id)) in self.open {
            closings.push(SessionEvent {
                seq,
                step,
                body: EventBody::result(aborted_result(&call_id), call_seq),
            });
            closed_calls.push(call_id);
            seq += 1;
        }
        let recovery = Recovery {
            events_read: self.events,
            torn_bytes_cut: tail.torn_bytes,
            newline_added: tail.missing_newline,
            closed_calls,
            next_seq: seq,
            next_step: self.max_step + 1,
        };
        (closings, recovery)
    }
}

/// Tells what recovery did, once, at the level it deserves.
pub(crate) fn report(log: &str, recovery: &Recovery) {
    if recovery.repaired() {
        tracing::warn!(
            log,
            events_read = recovery.events_read,
            torn_bytes_cut = recovery.torn_bytes_cut,
            newline_added = recovery.newline_added,
            closed_calls = ?recovery.closed_calls,
            next_seq = recovery.next_seq,
            next_step = recovery.next_step,
            "session log recovered"
        );
    } else {
        tracing::info!(
            log,
            events_read = recovery.events_read,
            next_seq = recovery.next_seq,
            next_step = recovery.next_step,
            "session log opened"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::event::UserMessageData;

    fn user(seq: u64, step: u64) -> SessionEvent {
        SessionEvent {
            seq,
            step,
            body: EventBody::UserMessage(UserMessageData {
                content: "x".into(),
                origin: "c".into(),
            }),
        }
    }

    fn lines(events: &[SessionEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in events {
            out.extend_from_slice(e.to_json_line().as_bytes());
            out.push(b'\n');
        }
        out
    }

    fn scan_all(bytes: &[u8]) -> Result<(Vec<SessionEvent>, Tail), SessionError> {
        let mut out = Vec::new();
        let tail = scan(bytes, "test", |e| out.push(e))?;
        Ok((out, tail))
    }

    #[test]
    fn whole_lines_are_read_and_a_torn_tail_is_measured() {
        let mut bytes = lines(&[user(1, 1), user(2, 1)]);
        let whole = bytes.len() as u64;
        bytes.extend_from_slice(br#"{"seq":3,"step":1,"type":"user/mes"#);
        let (events, tail) = scan_all(&bytes).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(tail.valid_len, whole);
        assert_eq!(tail.torn_bytes, bytes.len() as u64 - whole);
        assert!(!tail.missing_newline);
    }

    #[test]
    fn a_last_line_without_newline_that_parses_is_an_event() {
        let mut bytes = lines(&[user(1, 1), user(2, 1)]);
        bytes.pop();
        let (events, tail) = scan_all(&bytes).unwrap();
        assert_eq!(events.len(), 2);
        assert!(tail.missing_newline);
        assert_eq!(tail.torn_bytes, 0);
    }

    #[test]
    fn a_whole_json_last_line_that_is_no_event_is_corrupt_not_torn() {
        let mut bytes = lines(&[user(1, 1)]);
        bytes.extend_from_slice(br#"{"seq":2,"step":1,"type":"nope","data":{}}"#);
        let err = scan_all(&bytes).unwrap_err();
        assert!(
            matches!(err, SessionError::Corrupt { line: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_bad_middle_line_is_corrupt_naming_it() {
        let mut bytes = lines(&[user(1, 1)]);
        bytes.extend_from_slice(b"{\"seq\":2,\"ste\n");
        bytes.extend_from_slice(&lines(&[user(3, 1)]));
        let err = scan_all(&bytes).unwrap_err();
        assert!(
            matches!(err, SessionError::Corrupt { line: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn blank_lines_and_seq_gaps_are_corrupt() {
        let mut bytes = lines(&[user(1, 1)]);
        bytes.extend_from_slice(b"\n");
        assert!(matches!(
            scan_all(&bytes).unwrap_err(),
            SessionError::Corrupt { line: 2, ref reason } if reason == "blank line"
        ));
        let bytes = lines(&[user(1, 1), user(3, 1)]);
        let err = scan_all(&bytes).unwrap_err();
        assert!(
            matches!(&err, SessionError::Corrupt { line: 2, reason } if reason.contains("seq 3 where 2")),
            "{err}"
        );
        let bytes = lines(&[user(2, 1)]);
        assert!(matches!(
            scan_all(&bytes).unwrap_err(),
            SessionError::Corrupt { line: 1, .. }
        ));
    }

    #[test]
    fn the_tracker_closes_open_calls_in_their_own_step() {
        use dsh_core::event::ToolCallData;
        let call = |seq, step, id: &str| SessionEvent {
            seq,
            step,
            body: EventBody::ToolCall(ToolCallData {
                call_id: id.into(),
                name: "t".into(),
                arguments: Value::Null,
                agent: "main".into(),
                parent: None,
            }),
        };
        let mut t = Tracker::default();
        t.observe(&call(1, 4, "a"));
        t.observe(&call(2, 4, "b"));
        t.observe(&SessionEvent {
            seq: 3,
            step: 4,
            body: EventBody::result(aborted_result("a"), 1),
        });
        let (closings, rec) = t.finish(Tail {
            valid_len: 0,
            torn_bytes: 0,
            missing_newline: false,
        });
        assert_eq!(rec.closed_calls, vec!["b".to_string()]);
        assert_eq!((rec.next_seq, rec.next_step), (5, 5));
        assert_eq!(closings.len(), 1);
        assert_eq!(closings[0].seq, 4);
        assert_eq!(closings[0].step, 4);
        let EventBody::ToolResult {
            data,
            surface_op,
            source_event_seqs,
        } = &closings[0].body
        else {
            panic!("not a result")
        };
        assert_eq!(surface_op, "append");
        assert_eq!(source_event_seqs, &vec![2]);
        assert_eq!(data.error.as_ref().unwrap().code, ErrorCode::Aborted);
    }
}
