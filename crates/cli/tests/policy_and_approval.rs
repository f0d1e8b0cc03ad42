//! `--policy` rules, `--approve` answers and `--read-only` decide which calls run; whatever
//! is refused reaches the model as a `DENIED` result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, replay, run, sample_workspace, transcript};

const STEP: &str = r#"{"role":"assistant","tool_calls":[
    {"id":"w","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"docs/new.md\",\"content\":\"hi\\n\"}"}},
    {"id":"r","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/lib.rs\"}"}},
    {"id":"e","type":"function","function":{"name":"edit_file","arguments":"{\"path\":\"src/lib.rs\",\"old_string\":\"a + b\",\"new_string\":\"b + a\"}"}}]}"#;

const POLICY: &str = r#"
ask = ["write_file"]
deny = ["edit_file(src/**)"]
"#;

fn with_policy(approve: &str) -> (tempfile::TempDir, common::Run) {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let t = transcript(dir.path(), "t.jsonl", &[&STEP.replace('\n', " ")]);
    let ran = run(
        &t,
        &ws,
        &log,
        &["--policy", policy.to_str().unwrap(), "--approve", approve],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(check(&log).code, 0);
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
    (dir, ran)
}

#[test]
fn approve_allow_runs_asked_calls_and_deny_rules_still_hold() {
    let (dir, ran) = with_policy("allow");
    assert!(
        !ran.tool_content("w").starts_with("DENIED"),
        "{}",
        ran.tool_content("w")
    );
    assert!(dir.path().join("workspace/docs/new.md").exists());
    let edit = ran.tool_content("e");
    assert!(
        edit.starts_with("DENIED: ") && edit.contains("edit_file(src/**)"),
        "{edit}"
    );
    let lib = std::fs::read_to_string(dir.path().join("workspace/src/lib.rs")).unwrap();
    assert!(lib.contains("a + b"));
}

#[test]
fn approve_deny_refuses_asked_calls() {
    let (dir, ran) = with_policy("deny");
    let write = ran.tool_content("w");
    assert!(
        write.starts_with("DENIED: ") && write.contains("--approve deny"),
        "{write}"
    );
    assert!(!dir.path().join("workspace/docs/new.md").exists());
    assert!(ran.tool_content("r").contains("a + b"), "unasked calls run");
}

#[test]
fn approve_prompt_without_a_terminal_denies() {
    let (dir, ran) = with_policy("prompt");
    let write = ran.tool_content("w");
    assert!(
        write.starts_with("DENIED: ") && write.contains("no terminal"),
        "{write}"
    );
    assert!(!dir.path().join("workspace/docs/new.md").exists());
}

#[test]
fn read_only_denies_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(dir.path(), "t.jsonl", &[&STEP.replace('\n', " ")]);
    let ran = run(&t, &ws, &log, &["--read-only"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.tool_content("w").starts_with("DENIED: "));
    assert!(ran.tool_content("e").starts_with("DENIED: "));
    assert!(ran.tool_content("r").contains("a + b"));
    assert!(!ws.join("docs/new.md").exists());
    assert!(
        std::fs::read_to_string(ws.join("src/lib.rs"))
            .unwrap()
            .contains("a + b")
    );
}

#[test]
fn a_rule_naming_no_known_tool_stops_the_run_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, r#"deny = ["wirte_file(secrets/**)"]"#).unwrap();
    let step = r#"{"role":"assistant","tool_calls":[{"id":"w","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"secrets/k\",\"content\":\"x\"}"}}]}"#;
    let t = transcript(dir.path(), "t.jsonl", &[step]);
    let ran = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_ne!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("wirte_file(secrets/**)")
            && ran.stderr.contains("names no known tool")
            && ran.stderr.contains("`write_file`"),
        "{}",
        ran.stderr
    );
    assert!(!ws.join("secrets/k").exists(), "nothing ran");
    assert!(!log.exists(), "no log was started");

    // A configured MCP server's tools may be named before the server lists them.
    let mcp = dir.path().join("mcp.json");
    std::fs::write(
        &mcp,
        r#"{"mcpServers": {"github": {"command": "/nonexistent/server"}}}"#,
    )
    .unwrap();
    std::fs::write(&policy, r#"deny = ["mcp__github__*", "mcp__gitlab__push"]"#).unwrap();
    let ran = run(
        &t,
        &ws,
        &log,
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--mcp",
            mcp.to_str().unwrap(),
        ],
    );
    assert_ne!(ran.code, 0);
    assert!(
        ran.stderr.contains("mcp__gitlab__push") && ran.stderr.contains("`mcp__github__*`"),
        "{}",
        ran.stderr
    );
}
