//! `run_code` is a built-in tool of `dsh run`: its sub-calls pass the same sandbox and policy,
//! a denial inside the script is binding, and the log stays whole and replayable.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::json;

fn openai_line(id: &str, tool: &str, args: serde_json::Value) -> String {
    json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}}]})
    .to_string()
}

#[test]
fn run_code_sub_calls_go_through_the_sandbox_and_a_denial_binds() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let code = r#"
        const readme = await tools.read_file({ path: "README.md" });
        let escaped = "no";
        try { await tools.write_file({ path: "../outside.txt", content: "x" }); escaped = "yes"; }
        catch (e) { console.log("caught " + e.name); }
        return { lines: readme.text.split("\n").length, escaped };
    "#;
    let t = transcript(
        dir.path(),
        "code.jsonl",
        &[
            &openai_line("c1", "run_code", json!({"code": "return 6 * 7"})),
            &openai_line("c2", "run_code", json!({"code": code})),
        ],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.tool_content("c1").contains("42"),
        "{}",
        out.tool_content("c1")
    );
    let denied = out.tool_content("c2");
    assert!(
        denied.starts_with("DENIED"),
        "a caught denial still binds: {denied}"
    );
    assert!(
        !dir.path().join("outside.txt").exists(),
        "the sandbox held inside the script"
    );

    // The sub-calls are on record, between their parent's call and result.
    let events = log_events(&log);
    let dispatches: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "tool/code-dispatch")
        .collect();
    assert_eq!(dispatches.len(), 2);
    assert_eq!(dispatches[1]["data"]["error"]["code"], "DENIED");
    assert_eq!(check(&log).code, 0);
    assert_eq!(
        replay(&log, "openai").stdout,
        out.stdout,
        "replay equals run"
    );
}
