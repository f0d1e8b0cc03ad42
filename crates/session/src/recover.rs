//! Reading a log back: whole lines, a torn tail, seq continuity, and the calls a crash left
//! open. Pure functions over the file's bytes, shared by [`crate::FileBackend::open`] (which
//! then repairs the file) and [`crate::replay`] (which repairs only its in-memory view).

use crate::check::{CheckReport, StreamCheck, Violation};
use crate::error::SessionError;
use crate::limits::MAX_GROUP_BYTES;
use crate::lines::{Line, for_each_line};
use dsh_core::event::{MAX_EVENT_BYTES, ToolResultData};
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
    /// Bytes of a torn tail that were cut off: what a crash can leave of the last group
    /// commit (the next event lines as far as they were written, zeros for lost pages; see
    /// [`crate::FileBackend::open`]).
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

/// True when `bytes` is JSON cut short: a start that some ending would make whole.
fn is_json_prefix(bytes: &[u8]) -> bool {
    let cut = |b: &[u8]| {
        serde_json::from_slice::<serde::de::IgnoredAny>(b)
            .is_err_and(|e| e.classify() == serde_json::error::Category::Eof)
    };
    // serde_json calls a number cut after its `-`, `.`, `e` or sign invalid, not cut short;
    // a digit more tells a cut number from a bad one.
    cut(bytes)
        || matches!(bytes.last(), Some(b'-' | b'+' | b'.' | b'e' | b'E'))
            && cut(&[bytes, b"0"].concat())
}

/// Why `line` cannot be the start of the event `next_seq` as dsh writes it, cut short by a
/// crash: the bytes that reached the disk start as that event's line does (`{"seq":N,"step":`
/// then JSON cut short), and zeros follow where pages were lost.
fn not_a_torn_start(line: &[u8], next_seq: u64) -> Option<String> {
    let written = line.split(|b| *b == 0).next().unwrap_or_default();
    if written.is_empty() {
        return None;
    }
    let expected = format!("{{\"seq\":{next_seq},\"step\":");
    let expected = expected.as_bytes();
    let fits = match written.strip_prefix(expected) {
        None => expected.starts_with(written),
        // The step's digits, then the `type` key, then JSON cut short.
        Some(rest) => {
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            let after = &rest[digits..];
            let key = br#","type":""#;
            let keyed = if after.len() <= key.len() {
                key.starts_with(after)
            } else {
                after.starts_with(key)
            };
            (digits > 0 || rest.is_empty()) && keyed && is_json_prefix(written)
        }
    };
    (!fits).then(|| {
        format!(
            "it is not the start of the event seq {next_seq} cut short (`{{\"seq\":{next_seq},…`)"
        )
    })
}

/// Bytes no line of a log holds: dsh escapes every control character it writes.
fn foreign_byte(line: &[u8]) -> Option<u8> {
    line.iter().copied().find(|b| *b < 0x20 && *b != 0)
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
    /// Why the run it starts is not a torn tail, once that is known.
    pub not_torn: Option<String>,
}

impl BadLine {
    /// The line named as the first of a tail that is not torn, for `why`.
    fn not_torn(&self, why: impl std::fmt::Display) -> BadLine {
        BadLine {
            not_torn: Some(why.to_string()),
            ..self.clone()
        }
    }

    /// What is wrong with the line, and with the run it starts.
    pub fn explained(&self) -> String {
        match &self.not_torn {
            Some(why) => format!("{}; {why}, so this is not a torn tail", self.reason),
            None => self.reason.clone(),
        }
    }
}

/// Tells a torn tail from corruption, one bad line at a time.
///
/// A crash under `batch` (or with no fsync at all) can leave more than a cut last line: the
/// group written since the last sync may come back with pages lost (zeros) between pieces
/// that were written, in several lines, newline-terminated or not. So a run of bad lines that
/// reaches the end of the file is a torn tail, cut as a whole, when it is what a torn write
/// leaves:
///
/// - its first line starts as the next event does (`{"seq":N,"step":…` cut short) or with
///   zeros: a tail is written from the end of the last whole line on;
/// - no line holds a control byte other than zero (dsh's lines never do);
/// - lines ended by a newline were written whole, so unless the run is one line without its
///   newline, some page of it was lost: the run holds zeros;
/// - it is at most one group commit long ([`MAX_GROUP_BYTES`]);
/// - when it starts at the first line (a crash during the first write, so nothing whole
///   says the file is a log), every line of it is the next event as far as it was written,
///   with zeros for lost pages: a line that does not start with zeros starts as its event does
///   (`{"seq":1,…`, `{"seq":2,…`), and one ended by a newline holds zeros. Later in a log,
///   pieces of lines after a lost page are taken as the tear they look like.
///
/// A bad line followed by anything whole (an event, or any complete JSON value) is
/// corruption, named by the run's first line; so is a line that cannot be garbage from a
/// torn write (blank, or whole JSON that is not an event) starting a run, and a run that
/// breaks a rule above. Text appended to a log, or a file that is not a log, is never taken
/// for a torn tail.
#[derive(Debug, Default)]
pub(crate) struct TornRun {
    first: Option<BadLine>,
    /// A zero byte (a lost page) somewhere in the run.
    zeros: bool,
    /// Lines in the run.
    lines: usize,
    /// The run's last line ended with a newline.
    terminated: bool,
    /// The seq the run's first line would have had.
    first_seq: u64,
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
    /// Classifies `line`, where the next whole event would be `next_seq`.
    pub fn line(&mut self, line: &Line<'_>, next_seq: u64) -> Verdict {
        let bytes = line.bytes;
        let number = line.number;
        let parsed = parse_line(bytes);
        let end = line.offset + bytes.len() as u64 + u64::from(line.terminated);
        if let Some(first) = &self.first {
            if parsed.is_ok() || is_whole_json(bytes) {
                let what = if parsed.is_ok() {
                    "a whole event"
                } else {
                    "a whole JSON value"
                };
                return Verdict::Corrupt(
                    first.not_torn(format!("{what} follows at line {number}")),
                );
            }
            if let Some(b) = foreign_byte(bytes) {
                return Verdict::Corrupt(first.not_torn(format!(
                    "line {number} holds the control byte {b:#04x}, which no log line holds"
                )));
            }
            if end - first.offset > MAX_GROUP_BYTES as u64 {
                return Verdict::Corrupt(first.not_torn(format!(
                    "it runs on for more than the {MAX_GROUP_BYTES} bytes one group commit \
                     writes"
                )));
            }
            if first.line == 1
                && let Some(why) = self.not_a_first_write(bytes, line.terminated)
            {
                return Verdict::Corrupt(first.not_torn(format!("line {number} {why}")));
            }
            self.note(bytes, line.terminated);
            return Verdict::Suspect;
        }
        let reason = match parsed {
            Ok(event) => return Verdict::Event(event),
            Err(reason) => reason,
        };
        let bad = BadLine {
            line: number,
            offset: line.offset,
            reason,
            not_torn: None,
        };
        if is_blank(bytes) || is_whole_json(bytes) {
            return Verdict::Corrupt(bad);
        }
        let not_torn = not_a_torn_start(bytes, next_seq)
            .or_else(|| {
                foreign_byte(bytes)
                    .map(|b| format!("it holds the control byte {b:#04x}, which no log line holds"))
            })
            .or_else(|| {
                (end - line.offset > MAX_GROUP_BYTES as u64).then(|| {
                    format!("it is longer than the {MAX_GROUP_BYTES} bytes one group commit writes")
                })
            });
        if let Some(why) = not_torn {
            return Verdict::Corrupt(bad.not_torn(why));
        }
        self.first = Some(bad);
        self.first_seq = next_seq;
        self.note(bytes, line.terminated);
        Verdict::Suspect
    }

    /// Why a later line of a run that started at the file's first line is not what the first
    /// write of a log leaves, if it is not.
    fn not_a_first_write(&self, bytes: &[u8], terminated: bool) -> Option<String> {
        let seq = self.first_seq.saturating_add(self.lines as u64);
        if bytes.first() == Some(&0) {
            // It starts in a lost page: whatever follows is a piece of the line.
            return None;
        }
        if let Some(why) = not_a_torn_start(bytes, seq) {
            return Some(why.replacen("it is", "is", 1));
        }
        (terminated && memchr::memchr(0, bytes).is_none())
            .then(|| "ends with a newline, so it was written whole, yet is no event".to_string())
    }

    fn note(&mut self, bytes: &[u8], terminated: bool) {
        self.zeros |= memchr::memchr(0, bytes).is_some();
        self.lines += 1;
        self.terminated = terminated;
    }

    /// The torn tail found at the end of the file, if any; an error when the run that reached
    /// the end is not one.
    pub fn finish(self) -> Result<Option<BadLine>, BadLine> {
        match self.first {
            Some(first) if !self.zeros && (self.lines > 1 || self.terminated) => Err(first
                .not_torn(
                    "a line ended by a newline was written whole, and no page of these lines was \
                 lost (no zeros)",
                )),
            first => Ok(first),
        }
    }
}

/// The error for a bad line: a log damaged there, or, at the first line of the file, no log.
pub(crate) fn bad_line_error(bad: BadLine) -> SessionError {
    if bad.line == 1 {
        let torn = match &bad.not_torn {
            Some(why) => format!(", nor what a crash leaves of one ({why})"),
            None => String::new(),
        };
        SessionError::NotALog(format!(
            "its first line is not a session event ({}){torn}; a dsh log starts with the \
             event seq 1",
            bad.reason
        ))
    } else {
        SessionError::Corrupt {
            line: bad.line,
            reason: bad.explained(),
        }
    }
}

/// Why a line longer than any a log holds is refused.
pub(crate) fn too_long() -> String {
    format!(
        "the line is longer than the largest event ({MAX_EVENT_BYTES} bytes), and longer than \
         what a torn write leaves"
    )
}

/// Parses every line `reader` gives, in order, verifying that seqs run 1, 2, 3, ..., and hands
/// each event to `each`. A last segment without a newline is a whole event when it parses. A
/// run of bad lines to the end of the file that a torn write could leave is a torn tail (see
/// [`TornRun`]); any other bad line is [`SessionError::Corrupt`] naming it, or
/// [`SessionError::NotALog`] when it is the first line. `what` names the log in I/O errors.
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
        |line| match run.line(&line, expected) {
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
            Verdict::Corrupt(bad) => Err(bad_line_error(bad)),
        },
        |e| SessionError::io(format!("reading {what}"), &e),
        |number, _| {
            if number == 1 {
                SessionError::NotALog(format!("its first line: {}", too_long()))
            } else {
                SessionError::Corrupt {
                    line: number,
                    reason: too_long(),
                }
            }
        },
    )?;
    Ok(match run.finish().map_err(bad_line_error)? {
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
/// The first fault in the file is the error: an event that breaks an invariant
/// ([`SessionError::Invariant`]), or a bad line before any such event
/// ([`SessionError::Corrupt`], [`SessionError::NotALog`]). Returns the tail and the tracker, for
/// [`Tracker::finish`].
pub(crate) fn scan_tracked(
    reader: impl Read,
    what: &str,
    mut each: impl FnMut(SessionEvent),
) -> Result<(Tail, Tracker), SessionError> {
    let mut tracker = Tracker::default();
    let mut broken = None;
    let scanned = scan(reader, what, |e| {
        if broken.is_none() {
            broken = tracker.observe(&e).err();
        }
        each(e);
    });
    // The first fault in the file wins: a broken event comes before any bad line the scan
    // stopped at (it stops at the first).
    match (broken, scanned) {
        (Some(violation), _) => Err(violation.into()),
        (None, Err(e)) => Err(e),
        (None, Ok(tail)) => Ok((tail, tracker)),
    }
}

/// The result recovery gives a call that a crash left without one: `ABORTED`, marked in its
/// meta (kept, never shown to the model) as written by recovery.
pub(crate) fn aborted_result(call_id: &str) -> ToolResultData {
    let message = "the call was interrupted: the session stopped before the call finished";
    let mut meta = Map::new();
    meta.insert("dsh.recovered".into(), Value::Bool(true));
    ToolResultData {
        started_at: None,
        call_id: call_id.to_string(),
        message: vec![ContentBlock::text(message)],
        error: Some(ToolError::new(ErrorCode::Aborted, message)),
        meta: Some(meta),
    }
}

/// The result a new owner gives a call that was running on a writer whose lease ended (the
/// PostgreSQL store): `ABORTED` in the log, but the call may well have run to the end there.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn lease_lost_result(call_id: &str, owner: &str) -> ToolResultData {
    let mut result = aborted_result(call_id);
    let message = format!(
        "the call was running on {owner}, whose lease on the session ended before its result \
         was recorded; it may have finished there (its effects may have happened), but its \
         result is unknown"
    );
    result.message = vec![ContentBlock::text(message.clone())];
    result.error = Some(ToolError::new(ErrorCode::Aborted, message));
    result
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
        self.check.push(event)?;
        self.events += 1;
        self.max_step = self.max_step.max(event.step);
        Ok(())
    }

    /// What the checker says of the events so far taken as a whole log (no call may be open).
    pub fn strict(&self) -> Result<CheckReport, Violation> {
        self.check.clone().finish()
    }

    /// The synthesized `ABORTED` results for every open call (in call order, seqs following
    /// the log's last), and the recovery report. The closings pass the same checks as the
    /// events before them: a step that cannot take them (a `user/message` already follows its
    /// open calls) is refused.
    pub fn finish(self, tail: Tail) -> Result<(Vec<SessionEvent>, Recovery), Violation> {
        self.finish_with(tail, aborted_result)
    }

    /// [`Tracker::finish`], with `closing` making the result of each open call.
    pub fn finish_with(
        mut self,
        tail: Tail,
        closing: impl Fn(&str) -> ToolResultData,
    ) -> Result<(Vec<SessionEvent>, Recovery), Violation> {
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
                at: None,
                seq,
                step,
                body: EventBody::result(closing(&call_id), call_seq),
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
            // The checker refused any step past MAX_STEP, so this is at most MAX_STEP + 1: a
            // step the scheduler then refuses to begin.
            next_step: self.max_step.saturating_add(1),
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
            at: None,
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
    fn every_cut_of_an_event_line_is_a_torn_start_and_other_text_is_not() {
        let mut meta = Map::new();
        meta.insert(
            "n".into(),
            serde_json::json!([-1.5e-300, 2e300, -0.0, 12, true, null]),
        );
        let lines = [
            call(7, 3, "日本語 \u{1F600} \"q\" \\ \u{1}").to_json_line(),
            {
                let mut e = call(7, 3, "c");
                if let EventBody::ToolCall(d) = &mut e.body {
                    d.arguments =
                        serde_json::json!({"x": [-1.25e-7, 1e21, -3, u64::MAX, "\u{2028}é"]});
                    d.parent = Some("p".into());
                }
                e.to_json_line()
            },
            SessionEvent {
                at: None,
                seq: 7,
                step: 3,
                body: EventBody::result(
                    ToolResultData {
                        started_at: None,
                        meta: Some(meta),
                        ..aborted_result("c")
                    },
                    6,
                ),
            }
            .to_json_line(),
        ];
        for line in &lines {
            let bytes = line.as_bytes();
            for cut in 1..bytes.len() {
                let prefix = &bytes[..cut];
                assert_eq!(
                    not_a_torn_start(prefix, 7),
                    None,
                    "{:?}",
                    String::from_utf8_lossy(prefix)
                );
                // With lost pages after it, too.
                let zeros = [prefix, &[0u8; 9], b"xyz"].concat();
                assert_eq!(not_a_torn_start(&zeros, 7), None);
                // But not as the start of another seq.
                assert!(not_a_torn_start(prefix, 8).is_none() == (cut <= 7), "{cut}");
            }
            assert!(
                not_a_torn_start(bytes, 7).is_some(),
                "a whole line is not cut"
            );
        }
        for text in [
            &b"# Notes"[..],
            b"{\n",
            b"[rules]",
            b"{\"seq\":7,\"step\":3,\"type\":\"t\"}}",
            b"{\"seq\":7,\"step\":3,,",
            b"{\"seq\":7,\"step\":-",
            b"{\"seq\":7,\"step\":1x",
            b"{\"seq\":70",
            b" {\"seq\":7",
        ] {
            assert!(
                not_a_torn_start(text, 7).is_some(),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn the_tracker_closes_open_calls_in_their_own_step() {
        let mut t = Tracker::default();
        t.observe(&call(1, 4, "a")).unwrap();
        t.observe(&call(2, 4, "b")).unwrap();
        t.observe(&SessionEvent {
            at: None,
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
            at: None,
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
                at: None,
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
