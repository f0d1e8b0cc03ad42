//! `--timeout-ms` caps every tool: the smaller of a tool's own timeout and the flag wins, so a
//! tool with a long timeout of its own (`shell` asking for 20 s) is still cut at the flag.
//! Without the flag each tool keeps its own timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn line(id: &str, tool: &str, args: serde_json::Value) -> String {
    json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}}]})
    .to_string()
}

#[test]
fn the_flag_cuts_a_tool_whose_own_timeout_is_longer() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(
        dir.path(),
        "slow.jsonl",
        &[
            &line(
                "s1",
                "shell",
                json!({"command": "sleep 20", "timeout_ms": 20000}),
            ),
            &line("r1", "run_code", json!({"code": "while (true) {}"})),
        ],
    );
    let started = Instant::now();
    let out = run(&t, &ws, &log, &["--timeout-ms", "500"]);
    let took = started.elapsed();
    assert_eq!(out.code, 0, "{}", out.stderr);
    for id in ["s1", "r1"] {
        let content = out.tool_content(id);
        assert!(content.starts_with("TOOL_TIMEOUT"), "{id}: {content}");
    }
    assert!(
        took < Duration::from_secs(15),
        "the tools ran past the cap: {took:?}"
    );
    assert_eq!(check(&log).code, 0);
}

#[test]
fn without_the_flag_a_tool_keeps_its_own_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(
        dir.path(),
        "own.jsonl",
        &[&line(
            "s1",
            "shell",
            json!({"command": "sleep 30", "timeout_ms": 300}),
        )],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.tool_content("s1").starts_with("TOOL_TIMEOUT"));
}
