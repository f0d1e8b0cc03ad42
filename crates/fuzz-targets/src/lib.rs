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
/// leaves `new` in the content.
pub fn edit(data: &[u8]) {
    let mut parts = data.splitn(3, |b| *b == 0xFF);
    let content = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let old = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let new = String::from_utf8_lossy(parts.next().unwrap_or_default());
    let replace_all = data.len().is_multiple_of(2);
    if let Ok(edited) = dsh_tool_fs::edit::apply_edit(&content, &old, &new, replace_all) {
        let normalized = new.replace("\r\n", "\n");
        let shown = edited.content.replace("\r\n", "\n");
        assert!(
            shown.contains(&normalized),
            "the edit did not leave its new text in the file"
        );
    }
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
