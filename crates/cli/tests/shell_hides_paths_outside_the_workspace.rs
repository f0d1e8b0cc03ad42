//! Issue 28, break 7 (its first part): a deny-read rule on an absolute path outside the
//! workspace binds `shell` commands too: its literal prefix is hidden from them, and a rule
//! whose prefix would hide everything is refused at start.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::json;

#[test]
fn a_read_rule_outside_the_workspace_hides_its_prefix_from_commands() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let outside = dir.path().canonicalize().unwrap().join("keys");
    std::fs::create_dir_all(outside.join("prod")).unwrap();
    std::fs::write(outside.join("prod/key.pem"), "TOPSECRET-4711\n").unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "allow = [\"shell\"]\ndeny = [\"read({}/*/*.pem)\"]\n",
            outside.display()
        ),
    )
    .unwrap();
    let command = format!("cat {}/prod/key.pem; echo done", outside.display());
    let call = json!({"id": "r1", "type": "function",
                      "function": {"name": "shell", "arguments": json!({"command": command}).to_string()}});
    let line = json!({"role": "assistant", "content": "", "tool_calls": [call]}).to_string();
    let t = transcript(dir.path(), "t.jsonl", &[&line]);
    let log = dir.path().join("s.jsonl");
    let r = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let content = r.tool_content("r1");
    assert!(content.contains("done"), "{content}");
    assert!(
        !content.contains("TOPSECRET"),
        "a hidden file was read: {content}"
    );
}

#[test]
fn a_rule_that_would_hide_everything_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "deny = [\"read(/**/id_rsa)\"]\n").unwrap();
    let t = transcript(dir.path(), "t.jsonl", &[]);
    let log = dir.path().join("s.jsonl");
    let r = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(r.stderr.contains("literal prefix"), "{}", r.stderr);
}
