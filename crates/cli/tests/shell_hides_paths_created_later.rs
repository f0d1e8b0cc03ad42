//! Issue 28, break 7 (the rest): what a rule hides is hidden at every call, whenever the file
//! appeared. A `.env` made after the run started (here by a first command; in a long
//! `dsh serve` session, by anyone) cannot be read by the next command, and a path a rule keeps
//! `write_file` from writing, made later, is read-only to the next command.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::json;

#[test]
fn a_hidden_path_made_during_the_run_is_hidden_from_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "allow = [\"shell\"]\ndeny = [\"read_file(**/.env)\", \"write_file(**/*.lock)\"]\n",
    )
    .unwrap();
    let calls: Vec<_> = [
        "mkdir -p app && echo SECRET=hunter2 > app/.env && echo v1 > app/deps.lock && echo made",
        "cat app/.env; echo v2 > app/deps.lock; cat app/deps.lock",
    ]
    .iter()
    .enumerate()
    .map(|(i, command)| {
        json!({"id": format!("c{i}"), "type": "function",
               "function": {"name": "shell", "arguments": json!({"command": command}).to_string()}})
    })
    .collect();
    let line = json!({"role": "assistant", "content": "", "tool_calls": calls}).to_string();
    let t = transcript(dir.path(), "t.jsonl", &[&line]);
    let log = dir.path().join("s.jsonl");
    let r = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.tool_content("c0").contains("made"),
        "{}",
        r.tool_content("c0")
    );
    let second = r.tool_content("c1");
    assert!(
        !second.contains("hunter2"),
        "the new .env was read: {second}"
    );
    assert!(
        !second.contains("v2"),
        "the new lock file was written: {second}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("app/deps.lock")).unwrap(),
        "v1\n"
    );
}
