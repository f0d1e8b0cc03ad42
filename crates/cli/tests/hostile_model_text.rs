//! What dsh prints about the model's input on stderr cannot drive the terminal: call ids and
//! other model text are shown with their control characters escaped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::json;

#[test]
fn escapes_in_call_ids_and_names_reach_stderr_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let id = "x\u{1b}[2K\r\u{9b}0mfake\u{202E}";
    let line = json!({"role": "assistant", "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "glob", "arguments": "{\"pattern\":\"*\"}"}},
        {"id": id, "type": "function", "function": {"name": "glob", "arguments": "{\"pattern\":\"*\"}"}},
    ]})
    .to_string();
    let t = transcript(
        dir.path(),
        "ids.jsonl",
        &[
            &line,
            "{\"role\": \"user\", \"content\": \"\u{1b}]0;owned\u{7}\"}",
        ],
    );
    let out = run(&t, &ws, &log, &[]);
    assert!(out.stderr.contains("repeats the id"), "{}", out.stderr);
    for bad in ['\u{1b}', '\r', '\u{9b}', '\u{202E}', '\u{7}'] {
        assert!(
            !out.stderr.contains(bad),
            "stderr carries {:?}: {:?}",
            bad,
            out.stderr
        );
    }
    assert!(out.stderr.contains("\\u{1b}"), "{}", out.stderr);
    // Every line of stderr is dsh's own.
    assert!(
        out.stderr.lines().all(|l| l.starts_with("dsh: ")),
        "{}",
        out.stderr
    );
}
