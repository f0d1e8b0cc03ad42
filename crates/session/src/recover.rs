//! Reading a log back: whole lines, a torn tail, seq continuity, and the calls a crash left
//! open. Pure functions over the file's bytes, shared by [`crate::FileBackend::open`] (which
//! then repairs the file) and [`crate::replay`] (which repairs only its in-memory view).

use crate::check::{StreamCheck, Violation};
use crate::error::SessionError;
use crate::lines::for_each_line;
use dsh_core::event::ToolResultData;
use dsh_core::{ContentBlock, ErrorCode, EventBody, SessionEvent, ToolError};
use serde_json::{Map, Value};
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
    /// Bytes of a torn tail that were cut off: a torn last line, or every line from the first
    /// bad one to the end when none of them is whole (what a crash under `batch` can leave).
    pub torn_bytes_cut: u64,
    /// The 1-based line the cut torn tail started at.
    pub torn_line: Option<usize>,
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
            torn_line: None,
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
    /// The 1-based line the torn tail starts at, when there is one.
    pub torn_line: Option<usize>,
    /// The last event has no newline after it.
    pub missing_newline: bool,
}

impl Tail {
    /// Nothing to repair at the end of the file (or no file at all: events from memory).
    pub const CLEAN: Tail = Tail {
        valid_len: 0,
        torn_bytes: 0,
        torn_line: None,
        missing_newline: false,
    };
}

fn parse_line(line: &[u8]) -> Result<SessionEvent, String> {
    if is_blank(line) {
        return Err("blank line".into());
    }
    serde_json::from_slice::<SessionEvent>(line).map_err(|e| e.to_string())
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// A complete JSON value cannot be a torn write of one of ours: an object cut short does not
/// parse. So a last line that is whole JSON but not an event is corruption, not a tear.
fn is_whole_json(line: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
}

/// The first bad line of a run of bad lines that may turn out to be a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadLine {
    /// 1-based line number.
    pub line: usize,
    /// Byte offset of its start.
    pub offset: u64,
    /// Why it is not an event.
    pub reason: String,
}

/// Tells a torn tail from corruption, one bad line at a time.
///
/// A crash under `batch` (or with no fsync at all) can leave more than a cut last line: the
/// region written since the last sync may hold several lines of garbage (blocks of zeros,
/// pieces of lines), newline-terminated or not. So a run of bad lines that reaches the end of
/// the file is a torn tail, cut as a whole; a bad line followed by anything whole (an event,
/// or any complete JSON value) is corruption, named by the run's first line. A line that
/// cannot be garbage from a torn write (blank, or whole JSON that is not an event) does not
/// start such a run: it is corruption at once.
#[derive(Debug, Default)]
pub(crate) struct TornRun {
    first: Option<BadLine>,
}

/// What [`TornRun`] makes of a line.
pub(crate) enum Verdict {
    /// A whole event, outside any run of bad lines.
    Event(SessionEvent),
    /// A bad line that may be part of a torn tail; keep reading.
    Suspect,
    /// Corruption: the line, and why.
    Corrupt(BadLine),
}

impl TornRun {
    /// Classifies the line `number` (starting at byte `offset`).
    pub fn line(&mut self, number: usize, offset: u64, bytes: &[u8]) -> Verdict {
        let parsed = parse_line(bytes);
        if let Some(first) = &self.first {
            if parsed.is_ok() || is_whole_json(bytes) {
                let what = if parsed.is_ok() {
                    "a whole event"
                } else {
                    "a whole JSON value"
                };
                return Verdict::Corrupt(BadLine {
                    reason: format!(
                        "{}; {what} follows at line {number}, so this is not a torn tail",
                        first.reason
                    ),
                    ..first.clone()
                });
            }
            return Verdict::Suspect;
        }
        match parsed {
            Ok(event) => Verdict::Event(event),
            Err(reason) if is_blank(bytes) || is_whole_json(bytes) => Verdict::Corrupt(BadLine {
                line: number,
                offset,
                reason,
            }),
            Err(reason) => {
                self.first = Some(BadLine {
                    line: number,
                    offset,
                    reason,
                });
                Verdict::Suspect
            }
        }
    }

    /// The torn tail found at the end of the file, if any.
    pub fn finish(self) -> Option<BadLine> {
        self.first
    }
}

/// Parses every line `reader` gives, in order, verifying that seqs run 1, 2, 3, ..., and hands
/// each event to `each`. A last segment without a newline is a whole event when it parses. A
/// run of lines none of which is whole, from the first bad line to the end of the file, is a
/// torn tail (see [`TornRun`]); any other bad line is [`SessionError::Corrupt`] naming it.
/// `what` names the log in I/O errors.
pub(crate) fn scan(
    reader: impl Read,
    what: &str,
    mut each: impl FnMut(SessionEvent),
) -> Result<Tail, SessionError> {
    let mut expected = 1u64;
    let mut missing_newline = false;
    let mut run = TornRun::default();
    let total = for_each_line(
        reader,
        |line| match run.line(line.number, line.offset, line.bytes) {
            Verdict::Event(event) => {
                if event.seq != expected {
                    return Err(SessionError::Corrupt {
                        line: line.number,
                        reason: format!("seq {} where {expected} was expected", event.seq),
                    });
                }
                expected += 1;
                each(event);
                missing_newline = !line.terminated;
                Ok(())
            }
            Verdict::Suspect => Ok(()),
            Verdict::Corrupt(bad) => Err(SessionError::Corrupt {
                line: bad.line,
                reason: bad.reason,
            }),
        },
        |e| SessionError::io(format!("reading {what}"), &e),
    )?;
    Ok(match run.finish() {
        Some(torn) => Tail {
            valid_len: torn.offset,
            torn_bytes: total - torn.offset,
            torn_line: Some(torn.line),
            missing_newline: false,
        },
        None => Tail {
            valid_len: total,
            torn_bytes: 0,
            torn_line: None,
            missing_newline,
        },
    })
}

/// [`scan`], with every whole event also checked by a [`Tracker`] before `each` sees it.
/// A bad line anywhere is still [`SessionError::Corrupt`]; otherwise the first event that
/// breaks an invariant is [`SessionError::Invariant`]. Returns the tail and the tracker, for
/// [`Tracker::finish`].
pub(crate) fn scan_tracked(
    reader: impl Read,
    what: &str,
    mut each: impl FnMut(SessionEvent),
) -> Result<(Tail, Tracker), SessionError> {
    let mut tracker = Tracker::default();
    let mut broken = None;
    let tail = scan(reader, what, |e| {
        if broken.is_none() {
            broken = tracker.observe(&e).err();
        }
        each(e);
    })?;
    match broken {
        Some(violation) => Err(violation.into()),
        None => Ok((tail, tracker)),
    }
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

/// Follows a log event by event, checking every invariant as it goes ([`StreamCheck`]), to
/// learn what recovery must append and where it resumes.
///
/// Recovery repairs only what a crash can leave: a torn tail and calls of the last step
/// without a result. A log whose whole events break an invariant was not left so by a crash
/// (or was edited since), and appending to it would only bury the fault, so the tracker
/// refuses it: the first violation, as the streaming pass sees it.
#[derive(Default)]
pub(crate) struct Tracker {
    check: StreamCheck,
    events: u64,
    max_step: u64,
}

impl Tracker {
    pub fn observe(&mut self, event: &SessionEvent) -> Result<(), Violation> {
        self.events += 1;
        self.max_step = self.max_step.max(event.step);
        self.check.push(event)
    }

    /// The synthesized `ABORTED` results for every open call (in call order, seqs following
    /// the log's last), and the recovery report. The closings pass the same checks as the
    /// events before them: a step that cannot take them (a `user/message` already follows its
    /// open calls) is refused.
    pub fn finish(mut self, tail: Tail) -> Result<(Vec<SessionEvent>, Recovery), Violation> {
        let mut seq = self.events + 1;
        let open: Vec<(u64, u64, String)> = self
            .check
            .open_calls()
            .map(|(s, step, id)| (s, step, id.to_string()))
            .collect();
        let mut closings = Vec::with_capacity(open.len());
        let mut closed_calls = Vec::with_capacity(open.len());
        for (call_seq, step, call_id) in open {
            let closing = SessionEvent {
                seq,
                step,
                body: EventBody::result(aborted_result(&call_id), call_seq),
            };
            self.check.push(&closing)?;
            closings.push(closing);
            closed_calls.push(call_id);
            seq += 1;
        }
        self.check.finish()?;
        let recovery = Recovery {
            events_read: self.events,
            torn_bytes_cut: tail.torn_bytes,
            torn_line: tail.torn_line,
            newline_added: tail.missing_newline,
            closed_calls,
            next_seq: seq,
            next_step: self.max_step + 1,
        };
        Ok((closings, recovery))
    }
}

/// Tells what recovery did, once, at the level it deserves.
pub(crate) fn report(log: &str, recovery: &Recovery) {
    if recovery.repaired() {
        tracing::warn!(
            log,
            events_read = recovery.events_read,
            torn_bytes_cut = recovery.torn_bytes_cut,
            torn_line = ?recovery.torn_line,
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
        assert_eq!(tail.torn_line, Some(3));
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
    fn several_terminated_garbage_lines_to_the_end_are_one_torn_tail() {
        // The unsynced region after a power loss under `batch`: zero blocks and pieces of
        // lines, some of them ended by a newline that did reach the disk.
        let mut bytes = lines(&[user(1, 1), user(2, 1)]);
        let whole = bytes.len() as u64;
        bytes.extend_from_slice(&[0u8; 512]);
        bytes.push(b'\n');
        bytes.extend_from_slice(b"p\":\"user/message\",\"data\":{\"content\":\"x\"}}\n");
        bytes.push(b'\n');
        bytes.extend_from_slice(&[0u8; 100]);
        bytes.push(b'\n');
        bytes.extend_from_slice(&[0u8; 7]);
        let (events, tail) = scan_all(&bytes).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(tail.valid_len, whole);
        assert_eq!(tail.torn_bytes, bytes.len() as u64 - whole);
        assert_eq!(tail.torn_line, Some(3));
        assert!(!tail.missing_newline);

        // Terminated garbage alone (the region ends with a newline) is a tear as well.
        let mut bytes = lines(&[user(1, 1)]);
        let whole = bytes.len() as u64;
        bytes.extend_from_slice(&[0u8; 64]);
        bytes.push(b'\n');
        let (events, tail) = scan_all(&bytes).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!((tail.valid_len, tail.torn_line), (whole, Some(2)));
        assert_eq!(tail.torn_bytes, 65);
    }

    #[test]
    fn garbage_followed_by_anything_whole_is_corrupt_naming_the_first_bad_line() {
        for after in [
            user(3, 1).to_json_line(),
            r#"{"not":"an event"}"#.to_string(),
        ] {
            let mut bytes = lines(&[user(1, 1)]);
            bytes.extend_from_slice(&[0u8; 40]);
            bytes.push(b'\n');
            bytes.extend_from_slice(b"{\"seq\":2,\"st\n");
            bytes.extend_from_slice(after.as_bytes());
            bytes.push(b'\n');
            bytes.extend_from_slice(&[0u8; 40]);
            let err = scan_all(&bytes).unwrap_err();
            match &err {
                SessionError::Corrupt { line, reason } => {
                    assert_eq!(*line, 2, "{err}");
                    assert!(reason.contains("follows at line 4"), "{err}");
                }
                other => panic!("expected Corrupt, got {other}"),
            }
        }
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
        let mut t = Tracker::default();
        t.observe(&call(1, 4, "a")).unwrap();
        t.observe(&call(2, 4, "b")).unwrap();
        t.observe(&SessionEvent {
            seq: 3,
            step: 4,
            body: EventBody::result(aborted_result("a"), 1),
        })
        .unwrap();
        let (closings, rec) = t.finish(Tail::CLEAN).unwrap();
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

    fn call(seq: u64, step: u64, id: &str) -> SessionEvent {
        SessionEvent {
            seq,
            step,
            body: EventBody::ToolCall(dsh_core::event::ToolCallData {
                call_id: id.into(),
                name: "t".into(),
                arguments: Value::Null,
                arguments_text: None,
                agent: "main".into(),
                parent: None,
            }),
        }
    }

    #[test]
    fn the_tracker_refuses_whole_events_that_break_an_invariant() {
        // Found by the `recovery` fuzz target: a result naming its own seq, before a torn
        // tail, was accepted, and the "recovered" log failed `dsh check`.
        let mut t = Tracker::default();
        t.observe(&call(1, 1, "a")).unwrap();
        let err = t
            .observe(&SessionEvent {
                seq: 2,
                step: 1,
                body: EventBody::result(aborted_result("a"), 2),
            })
            .unwrap_err();
        assert_eq!(
            err,
            Violation::NotAnOpenCall {
                seq: 2,
                call_seq: 2
            }
        );
    }

    #[test]
    fn the_tracker_refuses_to_close_a_call_a_user_message_follows() {
        let mut t = Tracker::default();
        t.observe(&call(1, 1, "a")).unwrap();
        t.observe(&user(2, 1)).unwrap();
        let err = t.finish(Tail::CLEAN).unwrap_err();
        assert_eq!(
            err,
            Violation::UserMessageBeforeResult {
                seq: 2,
                result_seq: 3,
                step: 1
            }
        );
    }

    #[test]
    fn the_tracker_refuses_a_call_an_earlier_step_left_open() {
        let mut t = Tracker::default();
        t.observe(&call(1, 1, "a")).unwrap();
        let err = t.observe(&user(2, 2)).unwrap_err();
        assert!(
            matches!(
                err,
                Violation::MissingResult {
                    call_seq: 1,
                    step: 1,
                    ..
                }
            ),
            "{err}"
        );
    }
}
