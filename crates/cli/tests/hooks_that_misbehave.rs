//! `dsh run --hooks`: a `PreToolUse` hook's denial holds when the hook misbehaves: when it
//! leaves a child behind, and when its answer is too large to read whole.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, log_events, run, sample_workspace, transcript};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn script(path: &Path, body: &str) -> String {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// A settings file with `command` as the one `PreToolUse` hook of the file-writing tools.
fn settings(dir: &Path, command: &str) -> String {
    let path = dir.join("settings.json");
    std::fs::write(
        &path,
        json!({"hooks": {"PreToolUse": [{"matcher": "write_file|edit_file",
            "hooks": [{"type": "command", "command": command}]}]}})
        .to_string(),
    )
    .unwrap();
    path.display().to_string()
}

/// One assistant message writing `content` to `path` (call id `w`).
fn write_step(path: &str, content: &str) -> String {
    let args = json!({"path": path, "content": content}).to_string();
    json!({"role": "assistant", "tool_calls": [{"id": "w", "type": "function",
        "function": {"name": "write_file", "arguments": args}}]})
    .to_string()
}

/// The `error.code` of call `id`'s `tool/result` in the log.
fn logged_code(log: &Path, id: &str) -> Value {
    log_events(log)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == id)
        .unwrap_or_else(|| panic!("no result for {id}"))["data"]["error"]["code"]
        .clone()
}

/// At most the first 300 characters of `text`, for failure messages.
fn short(text: &str) -> String {
    text.chars().take(300).collect()
}

/// The processes still running (not zombies) with `marker` as an argument, after giving a
/// just-killed one a moment to go.
fn survivors(marker: &str) -> Vec<String> {
    let scan = || {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            if cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes())
                && !stat.is_empty()
                && !stat.contains(") Z ")
            {
                found.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        found
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let found = scan();
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_deny_is_not_lost_when_the_hook_leaves_a_child_behind() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    // A `sleep` long past the hook's 60 s timeout, with an argument no other process has.
    let marker = format!("100.{}{}", std::process::id(), line!());
    let hook = script(
        &dir.path().join("no-writes.sh"),
        &format!("cat > /dev/null\necho 'no writes today' >&2\n(sleep {marker} &)\nexit 2"),
    );
    let settings = settings(dir.path(), &hook);
    let t = transcript(dir.path(), "t.jsonl", &[&write_step("docs/new.md", "hi\n")]);

    let started = Instant::now();
    let ran = run(&t, &ws, &log, &["--hooks", &settings]);
    let took = started.elapsed();
    let left = survivors(&marker);
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid])
            .status();
    }
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let write = ran.tool_content("w");
    assert!(
        write.starts_with("DENIED: ") && write.contains("no writes today"),
        "{write}"
    );
    assert!(!ws.join("docs/new.md").exists(), "the write did not happen");
    assert_eq!(logged_code(&log, "w"), "DENIED");
    assert!(
        took < Duration::from_secs(15),
        "decided by the exit, not the hook's timeout: {took:?}"
    );
    assert_eq!(left, Vec::<String>::new(), "the hook's child was killed");
    assert_eq!(check(&log).code, 0);
}

#[test]
fn a_deny_is_not_lost_when_its_answer_quotes_a_large_input() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    // It refuses every write, quoting the whole input (escaped for JSON) in its reason.
    let hook = script(
        &dir.path().join("quote.sh"),
        r#"input=$(cat)
esc=$(printf '%s' "$input" | sed 's/\\/\\\\/g; s/"/\\"/g')
printf '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "refused: %s"}}\n' "$esc""#,
    );
    let settings = settings(dir.path(), &format!("AUDIT_TOKEN=sk-live-secret {hook}"));

    // A small write: the hook's own reason.
    let log = dir.path().join("small.jsonl");
    let t = transcript(
        dir.path(),
        "small.jsonl.in",
        &[&write_step("docs/a.md", "hi\n")],
    );
    let ran = run(&t, &ws, &log, &["--hooks", &settings]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let write = ran.tool_content("w");
    assert!(write.starts_with("DENIED: refused: "), "{}", short(&write));
    assert!(!ws.join("docs/a.md").exists());

    // 1.1 MB: the answer passes the output cap; it still denies, and says so on stderr.
    let log = dir.path().join("large.jsonl");
    let big = "z".repeat(1_100_000);
    let t = transcript(
        dir.path(),
        "large.jsonl.in",
        &[&write_step("docs/b.md", &big)],
    );
    let ran = run(&t, &ws, &log, &["--hooks", &settings]);
    assert_eq!(ran.code, 0, "{}", short(&ran.stderr));
    let write = ran.tool_content("w");
    assert!(
        write.starts_with("DENIED: ") && write.contains("PreToolUse hook #1"),
        "{}",
        short(&write)
    );
    assert!(!ws.join("docs/b.md").exists(), "the write did not happen");
    assert_eq!(logged_code(&log, "w"), "DENIED");
    assert!(
        ran.stderr.contains("PreToolUse hook #1") && ran.stderr.contains("cut"),
        "{}",
        short(&ran.stderr)
    );
    for said in [&write, &ran.stderr] {
        assert!(!said.contains("sk-live-secret"), "{}", short(said));
    }
    assert_eq!(check(&log).code, 0);
}
