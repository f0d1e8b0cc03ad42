//! # dsh-fuzz-targets
//!
//! One function per fuzz target, taking the fuzzer's bytes. `fuzz/` (cargo-fuzz, libFuzzer)
//! calls them from its targets, and `tests/replay_corpora.rs` runs every committed corpus
//! file through them on stable Rust in CI, so a crash once found stays fixed.
//!
//! Each function panics only when it finds a bug: an invariant the code under test promises
//! (a path resolved inside the root, a recovered log that passes the checker) that does not
//! hold. Errors on bad input are the expected outcome, not findings.
//!
//! ```
//! dsh_fuzz_targets::transcript_line(br#"{"role":"assistant","tool_calls":[]}"#);
//! dsh_fuzz_targets::edit(b"a b a\xffa\xffc");
//! ```
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The targets, by name (the names of `fuzz/fuzz_targets/*.rs` and `fuzz/corpus/*`).
pub const TARGETS: &[(&str, Target)] = &[
    ("transcript_line", transcript_line),
    ("patch", patch),
    ("edit", edit),
    ("path", path),
    ("recovery", recovery),
    ("log_events", log_events),
];

/// The transcript parsers: any line parses or is refused, never panics; a parsed message
/// renders back.
pub fn transcript_line(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(parsed) = dsh_formats::parse_line(&text) {
        for call in &parsed.calls {
            let _ = call.arguments.to_logged();
        }
    }
}

/// The patch parser and applier: a parsed patch's hunks apply or fail with an error, on the
/// patch's own text as the file and on a file made of its context lines.
pub fn patch(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(parsed) = dsh_tool_fs::patch::parse(&text) else {
        return;
    };
    for op in &parsed.ops {
        if let dsh_tool_fs::patch::FileOp::Update { path, hunks, .. } = op {
            let _ = dsh_tool_fs::patch::apply_hunks(path, &text, hunks);
            let mut file = String::new();
            for h in hunks {
                for line in &h.lines {
                    match line {
                        dsh_tool_fs::patch::HunkLine::Context(l)
                        | dsh_tool_fs::patch::HunkLine::Remove(l) => {
                            file.push_str(l);
                            file.push('\n');
                        }
                        dsh_tool_fs::patch::HunkLine::Add(_) => {}
                    }
                }
            }
            let _ = dsh_tool_fs::patch::apply_hunks(path, &file, hunks);
        }
    }
}

/// `edit_file`'s logic on `content 0xFF old 0xFF new`: an edit either fails with an error or
/// replaces exactly the occurrences it counts. In a CRLF file an `old` that is not there as
/// written is matched with CRLF endings, and `new` is always inserted with CRLF endings; so the
/// edited file is the original with `replacements` copies of the matched text turned into the
/// inserted text, byte for byte.
///
/// The oracle compares bytes, not line endings normalized afterwards: a `new` ending in a bare
/// CR, inserted before an LF, reads as CRLF once normalized, and an earlier oracle that
/// normalized both sides flagged that as a lost edit (the first finding of this target, a
/// false positive: the bytes were right).
pub fn edit(data: &[u8]) {
    use dsh_tool_fs::edit::{apply_edit, uses_crlf};
    let mut parts = data.splitn(3, |b| *b == 0xFF);
    let content = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let old = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let new = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let replace_all = data.len().is_multiple_of(2);
    let Ok(edited) = apply_edit(&content, &old, &new, replace_all) else {
        return;
    };
    let crlf = |t: &str| t.replace("\r\n", "\n").replace('\n', "\r\n");
    let is_crlf = uses_crlf(&content);
    let matched = if is_crlf && !content.contains(old.as_ref()) {
        crlf(&old)
    } else {
        old.to_string()
    };
    let inserted = if is_crlf { crlf(&new) } else { new.to_string() };
    let found = content.matches(matched.as_str()).count();
    assert!(
        edited.replacements >= 1 && (found == 1 || replace_all),
        "an edit succeeded with {} replacement(s) of {found} occurrence(s)",
        edited.replacements
    );
    assert_eq!(
        edited.replacements, found,
        "not every occurrence was replaced"
    );
    let grown = edited.content.len() as i128 - content.len() as i128;
    let per = inserted.len() as i128 - matched.len() as i128;
    assert_eq!(
        grown,
        per * found as i128,
        "the edit changed more than the matches"
    );
    // Nothing before the first match or after the last one moves.
    let first = content.find(matched.as_str()).unwrap_or_default();
    let after_last = content.rfind(matched.as_str()).unwrap_or_default() + matched.len();
    let tail = &content[after_last..];
    assert!(
        edited.content.starts_with(&content[..first]) && edited.content.ends_with(tail),
        "the edit changed text outside the matches"
    );
    assert!(
        edited.content[first..].starts_with(&inserted),
        "the inserted text is not where the first match was"
    );
}

/// The path resolver: whatever it accepts stays inside the workspace root.
pub fn path(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let root = Path::new("/work/space");
    if let Ok(resolved) = dsh_tool_fs::sandbox::normalize(root, &text) {
        assert!(
            resolved.is_relative(),
            "{text:?} resolved to an absolute path"
        );
        assert!(
            !resolved
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir)),
            "{text:?} resolved outside the root: {resolved:?}"
        );
    }
}

/// Log recovery: any bytes either recover into a log that passes the checker, or are refused
/// with an error (corruption named by line).
pub fn recovery(data: &[u8]) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("log.jsonl");
    std::fs::write(&file, data).expect("writing the input");
    if let Ok((backend, _report)) = dsh_session::FileBackend::open(&file) {
        drop(backend);
        let checked = dsh_session::check::check_file(&file);
        assert!(
            checked.is_ok(),
            "a recovered log breaks an invariant: {checked:?}"
        );
    }
}

/// Builds a log from `data`, two bytes per event (what the event is, which call or step it
/// names), so the fuzzer explores the checker's and recovery's logic on well-formed JSON
/// rather than on the JSON parser: calls, results naming any seq with the right or a wrong
/// call id, user messages, code dispatches, steps moving on or back. Then:
///
/// - [`dsh_session::check::check`] answers without panicking, and `dsh check` on the file
///   agrees with it (the same violation, or "needs recovery" when recovery can mend it);
/// - opening the file (recovery) either refuses it or leaves a log that passes the checker,
///   and a log that passed is opened untouched;
/// - the same holds with the file's last bytes cut off, as a crash would leave it.
pub fn log_events(data: &[u8]) {
    use dsh_core::event::{CodeDispatchData, ToolCallData, ToolResultData, UserMessageData};
    use dsh_core::{ContentBlock, EventBody, SessionEvent};
    use dsh_session::check::{Violation, check, check_file};

    let ids = ["a", "b", "c"];
    let mut events: Vec<SessionEvent> = Vec::new();
    let mut step = 1u64;
    let cut = usize::from(data.first().copied().unwrap_or_default());
    for pair in data.chunks_exact(2).take(64) {
        let (op, arg) = (pair[0], pair[1]);
        let seq = events.len() as u64 + 1;
        let id = ids[usize::from(arg) % ids.len()].to_string();
        let body = match op % 8 {
            0 | 1 => EventBody::ToolCall(ToolCallData {
                call_id: id,
                name: "t".into(),
                arguments: serde_json::Value::Null,
                agent: "main".into(),
                parent: None,
            }),
            2 | 3 => {
                // Mostly a seq before this one; sometimes itself or later.
                let named = u64::from(arg >> 2) % (seq + 1) + 1;
                let call_id = match events.get(named as usize - 1).map(|e| &e.body) {
                    Some(EventBody::ToolCall(c)) if op & 0x10 == 0 => c.call_id.clone(),
                    _ => id,
                };
                let result = ToolResultData {
                    call_id,
                    message: vec![ContentBlock::text("ok")],
                    error: None,
                    meta: None,
                };
                let mut body = EventBody::result(result, named);
                if let EventBody::ToolResult {
                    surface_op,
                    source_event_seqs,
                    ..
                } = &mut body
                {
                    if op & 0x20 != 0 && op & 0x40 != 0 {
                        *surface_op = "replace".into();
                    }
                    if op & 0x80 != 0 && op & 0x40 != 0 {
                        source_event_seqs.push(named);
                    }
                }
                body
            }
            4 => EventBody::UserMessage(UserMessageData {
                content: "x".into(),
                origin: "fuzz".into(),
            }),
            5 => EventBody::CodeDispatch(CodeDispatchData {
                call_id: format!("{id}.1"),
                parent_call_id: id,
                name: "t".into(),
                arguments: serde_json::Value::Null,
                message: vec![ContentBlock::text("ok")],
                error: None,
            }),
            6 => {
                step += 1 + u64::from(arg % 2);
                continue;
            }
            _ => {
                step = step.saturating_sub(1).max(1);
                continue;
            }
        };
        events.push(SessionEvent { seq, step, body });
    }

    let strict = check(&events);
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("log.jsonl");
    let mut bytes = Vec::new();
    for e in &events {
        bytes.extend_from_slice(e.to_json_line().as_bytes());
        bytes.push(b'\n');
    }
    std::fs::write(&file, &bytes).expect("writing the log");
    match (&strict, check_file(&file)) {
        (Ok(a), Ok(b)) => assert_eq!(a, &b, "check and check_file count differently"),
        (Err(a), Err(b)) => assert!(
            a == &b || matches!(b, Violation::NeedsRecovery { .. }),
            "check says {a}, check_file says {b}"
        ),
        (a, b) => panic!("check says {a:?}, check_file says {b:?}"),
    }
    reopen_and_check(&file, strict.is_ok());

    // A crash's leftovers: the same log with its last bytes cut off.
    if !bytes.is_empty() {
        let keep = bytes.len() - cut % bytes.len().min(200);
        std::fs::write(&file, &bytes[..keep]).expect("writing the cut log");
        reopen_and_check(&file, false);
    }
}

/// Opens (recovers) the log at `file`: refused, or a log that passes the checker; `whole`
/// logs are opened without a repair.
fn reopen_and_check(file: &Path, whole: bool) {
    match dsh_session::FileBackend::open(file) {
        Ok((backend, recovery)) => {
            drop(backend);
            assert!(
                !(whole && recovery.repaired()),
                "a log that passed the checker was repaired: {recovery:?}"
            );
            let checked = dsh_session::check::check_file(file);
            assert!(
                checked.is_ok(),
                "a recovered log breaks an invariant: {checked:?}"
            );
        }
        Err(e) => assert!(!whole, "a log that passed the checker was refused: {e}"),
    }
}
