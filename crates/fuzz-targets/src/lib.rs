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
