//! Replay of a large, clean log on two threads.
//!
//! Parsing the JSON lines is nearly all of a replay's time, and it does not depend on order,
//! so the file is cut into chunks: this thread parses the even ones, a helper the odd ones
//! (at most two chunks ahead, so memory stays bounded by a few chunks' events), and this
//! thread checks and builds every event in log order. A chunk owns the lines that start in
//! it.
//!
//! It is an optimistic path: anything short of a clean log (a line that is not a whole event,
//! an unterminated last line, a seq out of order, a broken invariant, an I/O error) gives up,
//! and [`crate::replay::replay_file`] replays sequentially, which reports precisely what is
//! wrong or repairs its view of a torn tail. So the two paths cannot disagree on a log.

use crate::limits::MAX_LINE;
use crate::lines::ReadAt;
use crate::recover::{Tail, Tracker};
use crate::replay::TranscriptBuilder;
use dsh_core::SessionEvent;
use dsh_core::transcript::Transcript;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};

/// Reads the rest of a line (through its newline) into `line`, giving up (`None`) on a line
/// longer than any a log holds: the sequential path then names it.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> Option<usize> {
    let n = reader
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', line)
        .ok()?;
    (n <= MAX_LINE || line.last() == Some(&b'\n')).then_some(n)
}

/// The chunk each thread parses at a time.
pub(crate) const CHUNK: u64 = 4 << 20;
/// The read buffer of a chunk's reader.
const READ_BUF: usize = 256 << 10;
/// Below this, a second thread costs more than it saves.
pub(crate) const MIN_PARALLEL: u64 = 16 << 20;

/// The events of the lines that start in `start..end`, or `None` when one of them is not a
/// whole, newline-terminated event.
fn parse_chunk(file: &File, start: u64, end: u64) -> Option<Vec<SessionEvent>> {
    let from = start.saturating_sub(1);
    // Small against the chunk: the last line's end is read past `end`, with one buffer.
    let capacity = usize::try_from(end - start).map_or(READ_BUF, |n| n.clamp(64, READ_BUF));
    let mut reader = BufReader::with_capacity(capacity, ReadAt::new(file, from));
    let mut pos = from;
    let mut line = Vec::new();
    if start > 0 {
        // The line running into this chunk belongs to an earlier one; reading from the byte
        // before `start` finds where the first line of this chunk begins (at `start` itself
        // when that byte is a newline).
        pos += read_line(&mut reader, &mut line)? as u64;
    }
    let mut events = Vec::new();
    while pos < end {
        line.clear();
        let n = read_line(&mut reader, &mut line)?;
        if n == 0 {
            break;
        }
        pos += n as u64;
        if line.pop() != Some(b'\n') {
            return None;
        }
        events.push(serde_json::from_slice::<SessionEvent>(&line).ok()?);
    }
    Some(events)
}

/// The transcript of the clean log `file`, parsed in chunks of `chunk` bytes on two threads;
/// `None` when the log is not clean (or cannot be read), for the sequential path to handle.
pub(crate) fn replay(file: &File, chunk: u64) -> Option<Transcript> {
    let len = file.metadata().ok()?.len();
    let chunk = chunk.max(1);
    let chunks = len.div_ceil(chunk);
    let bounds = move |i: u64| (i * chunk, ((i + 1) * chunk).min(len));
    std::thread::scope(|scope| {
        // Two chunks of lead: enough to keep the helper busy, little to hold.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Option<Vec<SessionEvent>>>(2);
        let helper = scope.spawn(move || {
            for i in (1..chunks).step_by(2) {
                let (start, end) = bounds(i);
                let parsed = parse_chunk(file, start, end);
                let failed = parsed.is_none();
                // A send fails when this side gave up: stop too.
                if tx.send(parsed).is_err() || failed {
                    break;
                }
            }
        });
        let built = build_in_order(file, chunks, &bounds, &rx);
        // Stop the helper (a send to a dropped receiver fails), then join it here: a helper
        // that panicked is one more reason for the sequential path, not a panic of ours.
        drop(rx);
        let helper_ok = helper.join().is_ok();
        built.filter(|_| helper_ok)
    })
}

/// Parses the even chunks here, takes the odd ones from `rx`, and checks and builds every
/// event in log order.
fn build_in_order(
    file: &File,
    chunks: u64,
    bounds: &dyn Fn(u64) -> (u64, u64),
    rx: &std::sync::mpsc::Receiver<Option<Vec<SessionEvent>>>,
) -> Option<Transcript> {
    let mut builder = TranscriptBuilder::new();
    let mut tracker = Tracker::default();
    let mut expected = 1u64;
    for i in 0..chunks {
        let events = if i % 2 == 0 {
            let (start, end) = bounds(i);
            parse_chunk(file, start, end)
        } else {
            rx.recv().ok().flatten()
        }?;
        for event in events {
            if event.seq != expected || tracker.observe(&event).is_err() {
                return None;
            }
            expected += 1;
            builder.push(event);
        }
    }
    tracker.finish(Tail::CLEAN).ok()?;
    builder.close_open_calls();
    Some(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::event::{ToolCallData, ToolResultData, UserMessageData};
    use dsh_core::{ContentBlock, EventBody};
    use std::io::Write;

    /// A log of `steps` steps: two calls (one with a long argument), their results in the
    /// other order, a user message; the last step's second call left open.
    fn log(steps: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut seq = 0;
        let mut put = |step, body| {
            seq += 1;
            let line = SessionEvent {
                seq,
                step,
                at: None,
                body,
            }
            .to_json_line();
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
            seq
        };
        for step in 1..=steps {
            let call = |id: String, long: usize| {
                EventBody::ToolCall(ToolCallData {
                    call_id: id,
                    name: "t".into(),
                    arguments: serde_json::json!({ "text": "y".repeat(long) }),
                    arguments_text: None,
                    agent: "main".into(),
                    parent: None,
                })
            };
            let a = put(step, call(format!("a{step}"), 3));
            let b = put(step, call(format!("b{step}"), 300));
            let result = |id: String| ToolResultData {
                started_at: None,
                call_id: id.clone(),
                message: vec![ContentBlock::text(id)],
                error: None,
                meta: None,
            };
            if step == steps {
                put(step, EventBody::result(result(format!("a{step}")), a));
                break;
            }
            put(step, EventBody::result(result(format!("b{step}")), b));
            put(step, EventBody::result(result(format!("a{step}")), a));
            put(
                step,
                EventBody::UserMessage(UserMessageData {
                    content: format!("u{step}"),
                    origin: "c".into(),
                }),
            );
        }
        out
    }

    fn file_of(bytes: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        let file = File::open(&path).unwrap();
        (dir, file)
    }

    #[test]
    fn any_chunk_size_gives_the_sequential_transcript() {
        let bytes = log(40);
        let (dir, file) = file_of(&bytes);
        let sequential = crate::replay::replay_file(dir.path().join("log.jsonl")).unwrap();
        assert_eq!(sequential.steps.len(), 40);
        // Chunks smaller than a line, a line's size, odd sizes, one chunk for everything.
        for chunk in [1, 7, 64, 333, 1000, 4096, bytes.len() as u64 + 1] {
            let parallel = replay(&file, chunk).unwrap_or_else(|| panic!("chunk {chunk}"));
            assert_eq!(parallel, sequential, "chunk {chunk}");
        }
    }

    #[test]
    fn anything_short_of_a_clean_log_is_left_to_the_sequential_path() {
        let whole = log(20);
        // A torn tail, a missing final newline, a bad line in the middle, a seq gap, a broken
        // invariant (the result of another step's call).
        let torn = [&whole[..], br#"{"seq":999,"st"#].concat();
        let unterminated = whole[..whole.len() - 1].to_vec();
        let mut middle = whole.clone();
        middle[whole.len() / 2] = b'{';
        let text = String::from_utf8(whole.clone()).unwrap();
        let gap = text.replacen("\"seq\":5,", "\"seq\":6,", 1).into_bytes();
        let other_step = text
            .replacen("\"sourceEventSeqs\":[7]", "\"sourceEventSeqs\":[1]", 1)
            .into_bytes();
        assert_ne!(other_step, whole, "the test log has a result of seq 7");
        for (what, bytes) in [
            ("torn", torn),
            ("unterminated", unterminated),
            ("middle", middle),
            ("gap", gap),
            ("other step", other_step),
        ] {
            let (_dir, file) = file_of(&bytes);
            for chunk in [64, 1000] {
                assert!(replay(&file, chunk).is_none(), "{what}, chunk {chunk}");
            }
        }
    }
}
