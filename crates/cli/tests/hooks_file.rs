//! `dsh run --hooks FILE`: command hooks in Claude Code's settings shape guard the calls of
//! a recorded transcript, and what they add is in the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, dsh, log_events, replay, run, sample_workspace, transcript};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const STEP: &str = r#"{"role":"assistant","tool_calls":[
    {"id":"w","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"docs/new.md\",\"content\":\"hi\\n\"}"}},
    {"id":"r","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/lib.rs\"}"}}]}"#;

fn script(path: &Path, body: &str) -> String {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn hooks_deny_before_and_add_context_after_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let no_writes = script(
        &dir.path().join("no-writes.sh"),
        "cat > /dev/null\necho 'the docs are frozen' >&2\nexit 2",
    );
    let seen = dir.path().join("seen.json");
    let after_read = script(
        &dir.path().join("after-read.sh"),
        &format!(
            "cat > '{}'\necho '{{\"hookSpecificOutput\": {{\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"lib.rs is generated; do not edit it\"}}}}'",
            seen.display()
        ),
    );
    // A settings file as Claude Code keeps it, with keys dsh does not use.
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({
            "permissions": {"allow": ["Bash(ls:*)"]},
            "hooks": {
                "PreToolUse": [{"matcher": "write_file|edit_file",
                                "hooks": [{"type": "command", "command": no_writes}]}],
                "PostToolUse": [{"matcher": "read_file",
                                 "hooks": [{"type": "command", "command": after_read, "timeout": 10}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "true"}]}]
            }
        })
        .to_string(),
    )
    .unwrap();
    let t = transcript(dir.path(), "t.jsonl", &[&STEP.replace('\n', " ")]);

    let ran = run(&t, &ws, &log, &["--hooks", settings.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);

    let write = ran.tool_content("w");
    assert!(
        write.starts_with("DENIED: ") && write.contains("the docs are frozen"),
        "{write}"
    );
    assert!(!ws.join("docs/new.md").exists());
    assert!(ran.tool_content("r").contains("a + b"));
    let user: Vec<Value> = ran
        .messages()
        .into_iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(
        user,
        [json!({"role": "user", "content": "lib.rs is generated; do not edit it"})]
    );

    let input: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(input["hook_event_name"], "PostToolUse");
    assert_eq!(input["tool_name"], "read_file");
    assert_eq!(input["tool_input"], json!({"path": "src/lib.rs"}));
    assert_eq!(input["session_id"], "session");
    assert_eq!(
        Path::new(input["cwd"].as_str().unwrap()),
        ws.canonicalize().unwrap()
    );
    assert_eq!(
        Path::new(input["transcript_path"].as_str().unwrap()),
        log.as_path()
    );

    let types: Vec<Value> = log_events(&log).iter().map(|e| e["type"].clone()).collect();
    assert_eq!(types.last().unwrap(), "user/message");
    assert_eq!(check(&log).code, 0);
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
}

#[test]
fn a_bad_hooks_file_is_a_usage_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let bad = dir.path().join("hooks.json");
    std::fs::write(
        &bad,
        r#"{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}"#,
    )
    .unwrap();
    let t = transcript(dir.path(), "t.jsonl", &[&STEP.replace('\n', " ")]);
    let log = dir.path().join("log.jsonl");
    let ran = run(&t, &ws, &log, &["--hooks", bad.to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("hooks.json") && ran.stderr.contains("hooks.PreToolUse[0]"),
        "{}",
        ran.stderr
    );
    assert!(!log.exists(), "nothing ran");

    let missing = dsh(&[
        "run",
        t.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
        "--log",
        log.to_str().unwrap(),
        "--hooks",
        "/nonexistent/hooks.json",
    ]);
    assert_eq!(missing.code, 3, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("/nonexistent/hooks.json"),
        "{}",
        missing.stderr
    );
}
