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
    ("recover_any_file", recover_any_file),
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

/// `edit_file`'s logic on `content 0xFF old 0xFF new`, against a model of its documented
/// contract written apart from it: the same answer (the edited text byte for byte and the
/// count, or the same refusal).
///
/// The contract: an empty `old` or `old == new` is refused; in a file whose line endings are
/// mostly CRLF (at least as many CRLF as bare LF endings, and some), an `old` that is not
/// there as written is matched with CRLF endings and `new` is inserted with CRLF endings;
/// then no match is refused, one match is replaced, several are refused unless
/// `replace_all`, which replaces every one (left to right, not overlapping).
///
/// The first oracle normalized line endings on both sides before comparing, and flagged a
/// `new` ending in a bare CR inserted before an LF (which reads as CRLF once normalized): the
/// first finding of this target, a false positive, since the bytes were right.
pub fn edit(data: &[u8]) {
    use dsh_tool_fs::FsError;
    let mut parts = data.splitn(3, |b| *b == 0xFF);
    let content = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let old = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let new = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let replace_all = data.len().is_multiple_of(2);
    let actual = dsh_tool_fs::edit::apply_edit(&content, &old, &new, replace_all);
    match (actual, edit_model(&content, &old, &new, replace_all)) {
        (Ok(edited), Ok((text, count))) => {
            assert_eq!(edited.replacements, count, "replacement count");
            assert!(
                edited.content == text,
                "the edited text differs from the model's"
            );
        }
        (Err(FsError::EditEmptyOld), Err(EditRefusal::EmptyOld))
        | (Err(FsError::EditNoop), Err(EditRefusal::Noop))
        | (Err(FsError::EditNoMatch), Err(EditRefusal::NoMatch)) => {}
        (Err(FsError::EditAmbiguous { count }), Err(EditRefusal::Ambiguous(n))) => {
            assert_eq!(count, n, "ambiguous count");
        }
        (actual, model) => panic!("apply_edit gave {actual:?}, the contract says {model:?}"),
    }
}

/// Why the model refuses an edit.
#[derive(Debug)]
enum EditRefusal {
    EmptyOld,
    Noop,
    NoMatch,
    Ambiguous(usize),
}

/// The contract of `edit_file`, from its documentation (see [`edit`]).
fn edit_model(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, usize), EditRefusal> {
    if old.is_empty() {
        return Err(EditRefusal::EmptyOld);
    }
    if old == new {
        return Err(EditRefusal::Noop);
    }
    let bytes = content.as_bytes();
    let lf = bytes.iter().filter(|b| **b == b'\n').count();
    let crlf = bytes.windows(2).filter(|w| w == b"\r\n").count();
    let crlf_file = crlf > 0 && crlf * 2 >= lf;
    // Every line ending (CRLF or a bare LF) as CRLF; a bare CR stays as it is.
    let with_crlf = |t: &str| {
        let mut out = String::new();
        let mut chars = t.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\r' && chars.peek() == Some(&'\n') {
                chars.next();
                out.push_str("\r\n");
            } else if c == '\n' {
                out.push_str("\r\n");
            } else {
                out.push(c);
            }
        }
        out
    };
    let matched = if crlf_file && !content.contains(old) {
        with_crlf(old)
    } else {
        old.to_string()
    };
    let inserted = if crlf_file {
        with_crlf(new)
    } else {
        new.to_string()
    };
    // Non-overlapping occurrences, left to right.
    let mut starts = Vec::new();
    let mut from = 0;
    while let Some(i) = content[from..].find(&matched) {
        starts.push(from + i);
        from += i + matched.len();
    }
    match starts.len() {
        0 => return Err(EditRefusal::NoMatch),
        1 => {}
        n if !replace_all => return Err(EditRefusal::Ambiguous(n)),
        _ => {}
    }
    let mut out = String::new();
    let mut last = 0;
    for start in &starts {
        out.push_str(&content[last..*start]);
        out.push_str(&inserted);
        last = start + matched.len();
    }
    out.push_str(&content[last..]);
    Ok((out, starts.len()))
}

/// The path resolver: whatever it accepts stays inside the workspace root. Then the walks
/// (`walk` below): a file the path policy hides never shows, whatever its name and the
/// ignore files around it.
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
    walk(&text);
}

/// What a hidden file and a file outside the workspace hold: never in any walk's output.
const HIDDEN: &str = "FUZZ-HIDDEN-SENTINEL";
const OUTSIDE: &str = "FUZZ-OUTSIDE-SENTINEL";

/// Refuses reading one path (and what is inside it, if it is a folder).
#[derive(Debug)]
struct HideOne(std::path::PathBuf);

impl dsh_core::PathPolicy for HideOne {
    fn refuses(&self, _: &str, access: dsh_core::Access, path: &Path) -> Option<String> {
        (access == dsh_core::Access::Read && path.starts_with(&self.0)).then(|| "hidden".into())
    }
}

/// The walks of `grep`, `glob` and `list_dir`, on a workspace made from the input: its first
/// line names a file (holding [`HIDDEN`]) that the path policy hides, the other lines are the
/// root's `.gitignore` (whitelists, hidden names, ...), and `sub/.ignore` is a symlink to a
/// file outside holding the same lines and [`OUTSIDE`]. Whatever the names and the ignore
/// lines, no output shows the hidden file's name or content, nor the outside file's.
fn walk(text: &str) {
    let (first, ignore) = text.split_once('\n').unwrap_or((text, ""));
    let Ok(rel) = dsh_tool_fs::sandbox::normalize(Path::new("/"), first) else {
        return;
    };
    let names: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
    if names.is_empty()
        || names.len() > 6
        || names.len() != rel.iter().count()
        || first.len() > 200
        || names.iter().any(|n| n.contains(['*', '?', '[', '{', '\\']))
    {
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let base = dir.path().canonicalize().expect("a canonical temp dir");
    let (ws, outside) = (base.join("ws"), base.join("outside.txt"));
    let target = ws.join(&rel);
    let made = std::fs::create_dir_all(target.parent().unwrap_or(&ws))
        .and_then(|()| std::fs::write(&target, format!("{HIDDEN}\n")))
        .and_then(|()| std::fs::write(&outside, format!("{ignore}\n{OUTSIDE}\n")))
        .and_then(|()| std::fs::create_dir_all(ws.join("sub")))
        .and_then(|()| std::os::unix::fs::symlink(&outside, ws.join("sub/.ignore")))
        .and_then(|()| std::fs::write(ws.join("sub/seen.txt"), "x\n"));
    if made.is_err() {
        // A name the file system refuses, or one that collides with `sub`.
        return;
    }
    if !ignore.is_empty() && !ws.join(".gitignore").exists() {
        let _ = std::fs::write(ws.join(".gitignore"), ignore);
    }
    let policy = dsh_core::PathPolicies::new(vec![std::sync::Arc::new(HideOne(target.clone()))]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let toolset = dsh_tool_fs::FsToolset::builder(&ws)
            .build()
            .await
            .expect("the toolset");
        let hidden_name = rel.to_string_lossy().into_owned();
        for (tool, args) in [
            (
                "grep",
                serde_json::json!({"pattern": "SENTINEL", "output_mode": "content"}),
            ),
            (
                "grep",
                serde_json::json!({"pattern": "SENTINEL", "glob": first}),
            ),
            (
                "grep",
                serde_json::json!({"pattern": "SENTINEL", "glob": "**"}),
            ),
            ("glob", serde_json::json!({"pattern": "**"})),
            ("glob", serde_json::json!({"pattern": "**/.*"})),
            ("glob", serde_json::json!({"pattern": first})),
            ("list_dir", serde_json::json!({"path": "."})),
        ] {
            let definition = toolset
                .tools()
                .into_iter()
                .find(|t| t.name() == tool)
                .expect("the tool");
            let ctx = dsh_core::ToolContext {
                policy: policy.clone(),
                ..dsh_core::ToolContext::detached("fuzz")
            };
            let Ok(value) = definition.execute(args.clone(), ctx).await else {
                continue;
            };
            let shown: String = definition
                .present(&value)
                .iter()
                .filter_map(|b| b.as_text())
                .collect();
            assert!(
                !shown.contains(HIDDEN) && !shown.contains(OUTSIDE),
                "{tool} {args} showed a sentinel:\n{shown}"
            );
            let listed = shown.lines().any(|l| {
                l == hidden_name
                    || [":", "-", "  (", "@"]
                        .iter()
                        .any(|after| l.starts_with(&format!("{hidden_name}{after}")))
            });
            assert!(!listed, "{tool} {args} listed the hidden file:\n{shown}");
        }
        toolset.shutdown().await;
    });
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

/// Recovery on any file: it either leaves a dsh log that passes the checker, having only cut
/// a torn tail (at most one group commit of it) and appended what it adds (a newline, the
/// `ABORTED` results), or it refuses and leaves the file byte for byte as it was. Whatever it
/// refuses, the checker does not pass either.
///
/// The bytes are taken as they come, and also after a whole event line made from them, so the
/// fuzzer reaches a tail after a real log as easily as a file that is no log at all.
pub fn recover_any_file(data: &[u8]) {
    use dsh_core::event::{EventBody, SessionEvent, UserMessageData};
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("log.jsonl");
    let first = SessionEvent {
        at: None,
        seq: 1,
        step: 1,
        body: EventBody::UserMessage(UserMessageData {
            content: "before".into(),
            origin: "fuzz".into(),
        }),
    };
    let after_a_log = [first.to_json_line().as_bytes(), b"\n", data].concat();
    for input in [data, &after_a_log[..]] {
        std::fs::write(&file, input).expect("writing the input");
        let checked_before = dsh_session::check::check_file(&file);
        match dsh_session::FileBackend::open(&file) {
            Ok((backend, recovery)) => {
                drop(backend);
                let after = std::fs::read(&file).expect("reading the recovered log");
                let kept = input.len() as u64 - recovery.torn_bytes_cut;
                let kept = usize::try_from(kept).expect("a small input");
                assert!(
                    after.starts_with(&input[..kept]),
                    "recovery changed bytes it kept: {recovery:?}"
                );
                let checked = dsh_session::check::check_file(&file);
                assert!(
                    checked.is_ok(),
                    "a recovered log breaks an invariant: {checked:?}"
                );
                if recovery.torn_bytes_cut > 0 || !recovery.closed_calls.is_empty() {
                    assert!(
                        matches!(
                            checked_before,
                            Err(dsh_session::check::Violation::NeedsRecovery { .. })
                        ),
                        "recovery repaired what check called {checked_before:?}"
                    );
                } else if recovery.newline_added {
                    // A whole last event without its newline passes the checker as it is.
                    assert!(
                        checked_before.is_ok(),
                        "recovery only ended the last line, but check said {checked_before:?}"
                    );
                    assert!(
                        after == [input, b"\n"].concat(),
                        "more than a newline added"
                    );
                } else {
                    assert!(after == input, "an unrepaired log was changed");
                    assert!(
                        checked_before.is_ok(),
                        "opened untouched, but check said {checked_before:?}"
                    );
                }
            }
            Err(e) => {
                let after = std::fs::read(&file).expect("reading the refused file");
                assert!(after == input, "a refused file was changed ({e})");
                assert!(
                    !matches!(
                        checked_before,
                        Ok(_) | Err(dsh_session::check::Violation::NeedsRecovery { .. })
                    ),
                    "recovery refused ({e}) what check passed: {checked_before:?}"
                );
            }
        }
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
    let cut = usize::from(data.last().copied().unwrap_or_default());
    for pair in data.chunks_exact(2).take(64) {
        let (op, arg) = (pair[0], pair[1]);
        let seq = events.len() as u64 + 1;
        let id = ids[usize::from(arg) % ids.len()].to_string();
        let body = match op % 8 {
            0 | 1 => EventBody::ToolCall(ToolCallData {
                call_id: id,
                name: "t".into(),
                arguments: serde_json::Value::Null,
                arguments_text: None,
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
                    started_at: None,
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
        events.push(SessionEvent {
            at: None,
            seq,
            step,
            body,
        });
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
    let last_step = events.last().map(|e| e.step);
    match (&strict, check_file(&file)) {
        (Ok(a), Ok(b)) => assert_eq!(a, &b, "check and check_file count differently"),
        (Err(a), Err(b)) if a == &b => {}
        // Only calls of the last step left open are what a crash leaves.
        (Err(a @ Violation::MissingResult { step, .. }), Err(Violation::NeedsRecovery { .. })) => {
            assert_eq!(
                Some(*step),
                last_step,
                "check says {a}, check_file says it needs recovery"
            )
        }
        (a, b) => panic!("check says {a:?}, check_file says {b:?}"),
    }
    reopen_and_check(&file, strict.is_ok(), strict.is_ok());

    // A crash's leftovers: the same log with its last bytes cut off. Any prefix of a whole
    // log is what a crash can leave, so recovery must take it.
    if !bytes.is_empty() {
        let keep = bytes.len() - cut % bytes.len().min(200);
        std::fs::write(&file, &bytes[..keep]).expect("writing the cut log");
        reopen_and_check(&file, false, strict.is_ok());
    }
}

/// Opens (recovers) the log at `file`: refused (unless `must_open`), or a log that passes the
/// checker; `whole` logs are opened without a repair.
fn reopen_and_check(file: &Path, whole: bool, must_open: bool) {
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
        Err(e) => assert!(!must_open, "a log a crash could leave was refused: {e}"),
    }
}
