//! Arguments are logged so the log always reads back and a replay gives the provider its own
//! bytes (SPEC.md's amendments "Oversized arguments" and "Exact arguments"): arguments nested
//! or sized past the limits are answered `TOOL_INPUT_ERROR` and logged as a marker, and the
//! exact text of OpenAI `arguments` comes back from `dsh replay` byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::{Value, json};

fn openai_line_raw(id: &str, tool: &str, arguments: &str) -> String {
    json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": tool, "arguments": arguments}}]})
    .to_string()
}

fn nested(depth: usize) -> String {
    format!("{{\"x\":{}{}}}", "[".repeat(depth), "]".repeat(depth))
}

/// The `tool/call` event of a call id.
fn call_event(events: &[Value], id: &str) -> Value {
    events
        .iter()
        .find(|e| e["type"] == "tool/call" && e["data"]["callId"] == id)
        .unwrap_or_else(|| panic!("no tool/call for {id}"))
        .clone()
}

#[test]
fn deeply_nested_arguments_are_refused_and_the_log_stays_readable_and_continuable() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let anthropic_deep = {
        let mut input = json!(1);
        for _ in 0..100 {
            input = json!([input]);
        }
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "a1", "name": "glob", "input": {"pattern": "*", "x": input}}
        ]})
        .to_string()
    };
    let t = transcript(
        dir.path(),
        "deep.jsonl",
        &[
            &openai_line_raw("c1", "glob", &nested(125)),
            &openai_line_raw("c2", "glob", r#"{"pattern": "*.md"}"#),
            &anthropic_deep,
        ],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let refused = out.tool_content("c1");
    assert!(
        refused.starts_with("TOOL_INPUT_ERROR") && refused.contains("nest"),
        "{refused}"
    );

    let events = log_events(&log);
    for id in ["c1", "a1"] {
        let call = call_event(&events, id);
        assert_eq!(call["data"]["arguments"]["$dsh"], "omitted", "{id}: {call}");
        assert!(call["data"]["arguments"]["bytes"].as_u64().unwrap() > 200);
        assert!(call["data"].get("argumentsText").is_none());
        let result = events
            .iter()
            .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == id)
            .unwrap();
        assert_eq!(result["data"]["error"]["code"], "TOOL_INPUT_ERROR");
    }
    assert_eq!(check(&log).code, 0, "{}", check(&log).stderr);
    let replayed = replay(&log, "openai");
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);

    // The session can be continued.
    let again = run(&t, &ws, &log, &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(check(&log).code, 0);
}

#[test]
fn oversized_arguments_log_only_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let big = json!({"path": "big.txt", "content": "y".repeat(5 * 1024 * 1024)}).to_string();
    let t = transcript(
        dir.path(),
        "big.jsonl",
        &[&openai_line_raw("w1", "write_file", &big)],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.tool_content("w1").starts_with("TOOL_INPUT_ERROR"));
    assert!(!ws.join("big.txt").exists(), "an oversized call never runs");
    assert!(
        std::fs::metadata(&log).unwrap().len() < 64 * 1024,
        "the log keeps a marker, not the arguments"
    );
    let call = call_event(&log_events(&log), "w1");
    assert_eq!(call["data"]["arguments"]["$dsh"], "omitted");
    assert_eq!(
        call["data"]["arguments"]["bytes"].as_u64().unwrap(),
        big.len() as u64
    );
    assert_eq!(check(&log).code, 0);
}

#[test]
fn a_run_code_sub_call_with_deep_arguments_is_refused_and_logged_as_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let code = r#"
        let deep = 1;
        for (let i = 0; i < 120; i++) deep = [deep];
        let outcome = "ran";
        try { await tools.glob({ pattern: "*", x: deep }); } catch (e) { outcome = e.name + ": " + e.message; }
        return outcome;
    "#;
    let args = json!({ "code": code }).to_string();
    let t = transcript(
        dir.path(),
        "code.jsonl",
        &[&openai_line_raw("r1", "run_code", &args)],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = log_events(&log);
    let dispatch = events
        .iter()
        .find(|e| e["type"] == "tool/code-dispatch")
        .expect("the sub-call is on record");
    assert_eq!(
        dispatch["data"]["arguments"]["$dsh"], "omitted",
        "{dispatch}"
    );
    assert_eq!(dispatch["data"]["error"]["code"], "TOOL_INPUT_ERROR");
    let c = check(&log);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert_eq!(replay(&log, "openai").code, 0);
}

#[test]
fn replay_gives_back_the_exact_argument_text() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    // Keys out of order, spacing, and an integer no f64 holds: re-serializing changes all three.
    let exact = r#"{ "pattern": "*.md",  "path": ".", "n": 123456789012345678901234567890 }"#;
    let plain = r#"{"pattern":"*.rs"}"#;
    let t = transcript(
        dir.path(),
        "exact.jsonl",
        &[
            &openai_line_raw("e1", "glob", exact),
            &openai_line_raw("e2", "glob", plain),
        ],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = log_events(&log);
    assert_eq!(call_event(&events, "e1")["data"]["argumentsText"], exact);
    assert!(
        call_event(&events, "e2")["data"]
            .get("argumentsText")
            .is_none(),
        "argumentsText is there only when it is needed"
    );

    let replayed = replay(&log, "openai");
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    let sent: Vec<String> = replayed
        .messages()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            m["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(sent, vec![exact.to_string(), plain.to_string()]);
    assert_eq!(replayed.stdout, out.stdout, "replay equals run");
}
