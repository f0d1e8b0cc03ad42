//! `dsh run --profile claude-code`: Claude Code's tools, its session files, its hooks and its
//! settings work unchanged, and the profile's tools are held exactly like the built-ins.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{
    Run, check, dsh_with, log_events, message, replay, run, sample_workspace, session_file,
    transcript,
};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const PROFILE: [&str; 2] = ["--profile", "claude-code"];

/// The text of the `tool_result` block answering `id` (Anthropic output).
fn result_text(ran: &Run, id: &str) -> String {
    for m in ran.messages() {
        for block in m["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" && block["tool_use_id"] == id {
                let content = &block["content"];
                return match content {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    other => other.to_string(),
                };
            }
        }
    }
    panic!("no result for {id} in\n{}", ran.stdout)
}

fn is_error(ran: &Run, id: &str) -> bool {
    ran.messages().iter().any(|m| {
        m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == id && b["is_error"] == true)
    })
}

fn denied(ran: &Run, id: &str) -> bool {
    is_error(ran, id) && result_text(ran, id).starts_with("DENIED")
}

fn run_lines(dir: &Path, ws: &Path, lines: &[String], extra: &[&str]) -> Run {
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let t = transcript(dir, "t.jsonl", &refs);
    let mut args: Vec<&str> = PROFILE.to_vec();
    args.extend_from_slice(extra);
    run(&t, ws, &dir.join("log.jsonl"), &args)
}

#[test]
fn a_claude_code_session_file_runs_replays_and_checks() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let session = session_file(dir.path(), &ws);
    let log = dir.path().join("log.jsonl");
    let ran = run(&session, &ws, &log, &PROFILE);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // Four messages with tool calls, each one step; every other line skipped and counted.
    assert!(
        ran.stderr.contains("skipped 10 line(s)") && ran.stderr.contains("file-history-snapshot"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("ran steps 1-4"), "{}", ran.stderr);
    for id in [
        "toolu_01R",
        "toolu_01G",
        "toolu_01Gl",
        "toolu_01L",
        "toolu_01E",
        "toolu_01M",
    ] {
        assert!(!is_error(&ran, id), "{id}: {}", result_text(&ran, id));
    }
    assert!(result_text(&ran, "toolu_01R").contains("a + b"));
    assert!(result_text(&ran, "toolu_01G").contains("pub fn add"));
    assert!(result_text(&ran, "toolu_01Gl").contains("src/main.rs"));
    let listing = result_text(&ran, "toolu_01L");
    assert!(
        listing.contains("src") && !listing.contains("README.md"),
        "{listing}"
    );
    let lib = std::fs::read_to_string(ws.join("src/lib.rs")).unwrap();
    assert!(
        lib.contains("a.wrapping_add(b)") && lib.contains("a.wrapping_mul(b)"),
        "{lib}"
    );
    assert!(!lib.contains("TODO"), "{lib}");

    // The log keeps the names and arguments the model used.
    let calls: Vec<Value> = log_events(&log)
        .into_iter()
        .filter(|e| e["type"] == "tool/call")
        .collect();
    let names: Vec<&str> = calls
        .iter()
        .map(|c| c["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Read", "Grep", "Glob", "LS", "Edit", "MultiEdit"]);
    assert_eq!(
        calls[0]["data"]["arguments"]["file_path"],
        format!("{}/src/lib.rs", ws.display())
    );
    assert_eq!(
        calls[5]["data"]["arguments"]["edits"][1]["new_string"],
        "a.wrapping_mul(b)"
    );
    // Parallel calls of one message id share a step.
    assert_eq!(calls[0]["step"], calls[1]["step"]);
    assert_ne!(calls[1]["step"], calls[2]["step"]);

    let replayed = replay(&log, "anthropic");
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert_eq!(replayed.stdout, ran.stdout);
    assert_eq!(check(&log).code, 0);
}

#[test]
fn multi_edit_is_all_or_nothing_and_edits_need_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let before = std::fs::read_to_string(ws.join("src/lib.rs")).unwrap();
    let lines = [
        message(&[(
            "e0",
            "Edit",
            json!({"file_path": "src/lib.rs", "old_string": "a + b", "new_string": "b + a"}),
        )]),
        message(&[(
            "r",
            "Read",
            json!({"file_path": "src/lib.rs", "offset": 1, "limit": 5}),
        )]),
        message(&[(
            "m",
            "MultiEdit",
            json!({"file_path": "src/lib.rs", "edits": [
            {"old_string": "a + b", "new_string": "b + a"},
            {"old_string": "not in the file", "new_string": "x"}]}),
        )]),
    ];
    let ran = run_lines(dir.path(), &ws, &lines, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(is_error(&ran, "e0"), "an edit before any read is refused");
    assert!(
        result_text(&ran, "e0").contains("read"),
        "{}",
        result_text(&ran, "e0")
    );
    assert!(!is_error(&ran, "r"));
    let multi = result_text(&ran, "m");
    assert!(
        is_error(&ran, "m") && multi.contains("edit 2 of 2"),
        "{multi}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("src/lib.rs")).unwrap(),
        before
    );
}

#[test]
fn absolute_paths_inside_work_outside_and_through_symlinks_out_are_denied() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
    let inside = |p: &str| format!("{}/{p}", ws.display());
    let out = |p: &str| format!("{}/{p}", outside.display());
    let lines = [
        message(&[
            ("r-in", "Read", json!({"file_path": inside("src/lib.rs")})),
            ("r-out", "Read", json!({"file_path": out("secret.txt")})),
            ("r-link", "Read", json!({"file_path": "out/secret.txt"})),
            ("ls-out", "LS", json!({"path": outside.to_str().unwrap()})),
            (
                "g-out",
                "Grep",
                json!({"pattern": "secret", "path": outside.to_str().unwrap()}),
            ),
            ("gl-out", "Glob", json!({"pattern": "*", "path": out("")})),
        ]),
        message(&[(
            "w-in",
            "Write",
            json!({"file_path": inside("docs/new.md"), "content": "new\n"}),
        )]),
        message(&[(
            "w-out",
            "Write",
            json!({"file_path": out("new.txt"), "content": "x"}),
        )]),
        message(&[(
            "w-link",
            "Write",
            json!({"file_path": "out/new.txt", "content": "x"}),
        )]),
        message(&[(
            "e-out",
            "Edit",
            json!({"file_path": out("secret.txt"), "old_string": "secret", "new_string": "x"}),
        )]),
        message(&[(
            "m-link",
            "MultiEdit",
            json!({"file_path": "out/secret.txt", "edits": [{"old_string": "secret", "new_string": "x"}]}),
        )]),
        message(&[(
            "b-out",
            "Bash",
            json!({"command": format!("echo x > {}", out("bash.txt")), "description": "write outside"}),
        )]),
    ];
    let ran = run_lines(dir.path(), &ws, &lines, &["--approve", "allow"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!is_error(&ran, "r-in"), "{}", result_text(&ran, "r-in"));
    assert!(!is_error(&ran, "w-in"), "{}", result_text(&ran, "w-in"));
    assert_eq!(
        std::fs::read_to_string(ws.join("docs/new.md")).unwrap(),
        "new\n"
    );
    for id in [
        "r-out", "r-link", "ls-out", "g-out", "gl-out", "w-out", "w-link", "e-out", "m-link",
    ] {
        assert!(denied(&ran, id), "{id}: {}", result_text(&ran, id));
    }
    // The shell's OS sandbox: the command runs and fails to write.
    let bash = result_text(&ran, "b-out");
    assert!(!bash.starts_with("exit code 0"), "{bash}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "nothing was written outside"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret\n"
    );
}

#[test]
fn read_only_holds_for_write_edit_multi_edit_and_bash() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let before = std::fs::read_to_string(ws.join("src/lib.rs")).unwrap();
    let lines = [
        message(&[("r", "Read", json!({"file_path": "src/lib.rs"}))]),
        message(&[(
            "w",
            "Write",
            json!({"file_path": "new.txt", "content": "x"}),
        )]),
        message(&[(
            "e",
            "Edit",
            json!({"file_path": "src/lib.rs", "old_string": "a + b", "new_string": "b + a"}),
        )]),
        message(&[(
            "m",
            "MultiEdit",
            json!({"file_path": "src/lib.rs", "edits": [{"old_string": "a * b", "new_string": "b * a"}]}),
        )]),
        message(&[("b", "Bash", json!({"command": "echo x > bash.txt"}))]),
    ];
    let ran = run_lines(dir.path(), &ws, &lines, &["--read-only"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!is_error(&ran, "r"));
    for id in ["w", "e", "m"] {
        let text = result_text(&ran, id);
        assert!(
            denied(&ran, id) && text.contains("read-only"),
            "{id}: {text}"
        );
    }
    let bash = result_text(&ran, "b");
    assert!(!bash.starts_with("exit code 0"), "{bash}");
    assert!(!ws.join("new.txt").exists() && !ws.join("bash.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("src/lib.rs")).unwrap(),
        before
    );
}

#[test]
fn deny_rules_naming_the_profiles_tools_hold_in_the_rules_and_in_the_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    std::fs::create_dir(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/key.txt"), "hunter2\n").unwrap();
    std::os::unix::fs::symlink("secrets", ws.join("alias")).unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        r#"
allow = ["Read", "Grep", "Edit", "MultiEdit", "Write", "Bash(echo:*)"]
deny = ["Read(secrets/**)", "Edit(src/**)", "Write(src/**)", "Bash(rm:*)"]
"#,
    )
    .unwrap();
    let lines = [
        message(&[
            ("r-lib", "Read", json!({"file_path": "src/lib.rs"})),
            ("r-key", "Read", json!({"file_path": "alias/key.txt"})),
            (
                "g",
                "Grep",
                json!({"pattern": "hunter2", "output_mode": "content"}),
            ),
        ]),
        message(&[(
            "e",
            "Edit",
            json!({"file_path": "src/lib.rs", "old_string": "a + b", "new_string": "b + a"}),
        )]),
        // The rule names Edit; MultiEdit's body is edit_file's, which the rule binds too.
        message(&[(
            "m",
            "MultiEdit",
            json!({"file_path": "src/lib.rs", "edits": [{"old_string": "a * b", "new_string": "b * a"}]}),
        )]),
        message(&[(
            "w",
            "Write",
            json!({"file_path": format!("{}/src/new.rs", ws.display()), "content": "x"}),
        )]),
        message(&[("b-rm", "Bash", json!({"command": "rm -f README.md"}))]),
        message(&[("b-echo", "Bash", json!({"command": "echo hello"}))]),
        message(&[("b-ask", "Bash", json!({"command": "touch made.txt"}))]),
    ];
    let ran = run_lines(
        dir.path(),
        &ws,
        &lines,
        &["--policy", policy.to_str().unwrap(), "--approve", "deny"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!is_error(&ran, "r-lib"));
    for id in ["r-key", "e", "m", "w", "b-rm"] {
        assert!(denied(&ran, id), "{id}: {}", result_text(&ran, id));
    }
    assert!(
        !result_text(&ran, "g").contains("hunter2:"),
        "{}",
        result_text(&ran, "g")
    );
    assert!(
        result_text(&ran, "b-echo").contains("hello"),
        "{}",
        result_text(&ran, "b-echo")
    );
    // Unmatched Bash is asked about under this profile; `--approve deny` refuses it.
    assert!(denied(&ran, "b-ask"), "{}", result_text(&ran, "b-ask"));
    assert!(ws.join("README.md").exists() && !ws.join("made.txt").exists());
    assert!(!ws.join("src/new.rs").exists());
}

/// The intent rules `read(…)`/`write(…)` bind whatever tool reads or writes a path: the
/// profile's tools declare the paths of the built-in they stand for.
#[test]
fn intent_rules_bind_the_profiles_tools_by_the_paths_they_declare() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    std::fs::create_dir(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/key.txt"), "hunter2\n").unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "allow = [\"Read\", \"Write\"]\ndeny = [\"read(secrets/**)\", \"write(src/**)\"]\n",
    )
    .unwrap();
    let lines = [message(&[
        ("r-key", "Read", json!({"file_path": "secrets/key.txt"})),
        ("r-ok", "Read", json!({"file_path": "README.md"})),
        (
            "w-src",
            "Write",
            json!({"file_path": "src/new.rs", "content": "x"}),
        ),
        (
            "w-ok",
            "Write",
            json!({"file_path": "notes.txt", "content": "y"}),
        ),
    ])];
    let ran = run_lines(
        dir.path(),
        &ws,
        &lines,
        &["--policy", policy.to_str().unwrap(), "--approve", "deny"],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(denied(&ran, "r-key"), "{}", result_text(&ran, "r-key"));
    assert!(!result_text(&ran, "r-key").contains("hunter2"));
    assert!(denied(&ran, "w-src"), "{}", result_text(&ran, "w-src"));
    // Refused by the rules stage, before any body runs (not only by the body's own checks).
    for (id, rule) in [("r-key", "read(secrets/**)"), ("w-src", "write(src/**)")] {
        assert_eq!(
            result_text(&ran, id),
            format!("DENIED: denied by permission rule `{rule}`")
        );
    }
    assert!(!ws.join("src/new.rs").exists());
    assert!(!is_error(&ran, "r-ok"), "{}", result_text(&ran, "r-ok"));
    assert!(!is_error(&ran, "w-ok"), "{}", result_text(&ran, "w-ok"));
    assert_eq!(std::fs::read_to_string(ws.join("notes.txt")).unwrap(), "y");
}

fn script(path: &Path, body: &str) -> String {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// Hook scripts written the way Claude Code users write them.
fn claude_hooks(dir: &Path) -> Value {
    // A Bash guard reading `tool_input.command` with jq.
    let no_rm = script(
        &dir.join("no-rm.sh"),
        "#!/bin/sh\ncmd=$(jq -r '.tool_input.command')\ncase \"$cmd\" in\n  *'rm -rf'*) echo \"Blocked: $cmd\" >&2; exit 2;;\nesac\nexit 0\n",
    );
    // A Write|Edit guard reading `tool_input.file_path`.
    let no_env = script(
        &dir.join("no-env.sh"),
        "#!/bin/sh\npath=$(jq -r '.tool_input.file_path // empty')\ncase \"$path\" in\n  *.env) echo \"$path is protected\" >&2; exit 2;;\nesac\nexit 0\n",
    );
    // A Python hook answering `permissionDecision`.
    let py = script(
        &dir.join("decide.py"),
        r#"#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
name = data["tool_name"]
path = data["tool_input"].get("file_path", "")
decision, reason = "allow", "fine"
if name == "MultiEdit" and path.endswith("main.rs"):
    decision, reason = "deny", "main.rs is frozen"
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
    "permissionDecision": decision, "permissionDecisionReason": reason}}))
"#,
    );
    let seen = dir.join("seen.jsonl");
    let log_input = script(
        &dir.join("log-input.sh"),
        &format!(
            "#!/bin/sh\ncat >> '{}'\necho >> '{}'\n",
            seen.display(),
            seen.display()
        ),
    );
    json!({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": no_rm}]},
        {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": no_env}]},
        {"matcher": "MultiEdit", "hooks": [{"type": "command", "command": py}]},
        {"matcher": "*", "hooks": [{"type": "command", "command": log_input}]}
    ]}})
}

fn hook_transcript(ws: &Path) -> Vec<String> {
    vec![
        message(&[
            (
                "r-main",
                "Read",
                json!({"file_path": format!("{}/src/main.rs", ws.display())}),
            ),
            ("r-lib", "Read", json!({"file_path": "src/lib.rs"})),
        ]),
        message(&[(
            "b-rm",
            "Bash",
            json!({"command": "rm -rf src", "description": "delete"}),
        )]),
        message(&[("b-ok", "Bash", json!({"command": "echo fine"}))]),
        message(&[(
            "w-env",
            "Write",
            json!({"file_path": "prod.env", "content": "K=V\n"}),
        )]),
        message(&[(
            "w-ok",
            "Write",
            json!({"file_path": "notes.md", "content": "ok\n"}),
        )]),
        message(&[(
            "m-main",
            "MultiEdit",
            json!({"file_path": "src/main.rs", "edits": [{"old_string": "fn", "new_string": "fn"}]}),
        )]),
        message(&[(
            "m-lib",
            "MultiEdit",
            json!({"file_path": "src/lib.rs", "edits": [{"old_string": "a + b", "new_string": "b + a"}]}),
        )]),
    ]
}

fn assert_hooks_held(ran: &Run, ws: &Path, seen: &Path) {
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(denied(ran, "b-rm") && result_text(ran, "b-rm").contains("Blocked: rm -rf src"));
    assert!(ws.join("src/lib.rs").exists());
    assert!(
        result_text(ran, "b-ok").contains("fine"),
        "{}",
        result_text(ran, "b-ok")
    );
    assert!(denied(ran, "w-env") && result_text(ran, "w-env").contains("prod.env is protected"));
    assert!(!ws.join("prod.env").exists());
    assert!(!is_error(ran, "w-ok"), "{}", result_text(ran, "w-ok"));
    assert!(denied(ran, "m-main") && result_text(ran, "m-main").contains("main.rs is frozen"));
    assert!(!is_error(ran, "m-lib"), "{}", result_text(ran, "m-lib"));
    assert!(
        std::fs::read_to_string(ws.join("src/lib.rs"))
            .unwrap()
            .contains("b + a")
    );
    // Hooks got Claude Code's names and arguments, and dsh's other fields.
    let inputs: Vec<Value> = std::fs::read_to_string(seen)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        inputs
            .iter()
            .any(|i| i["tool_name"] == "Bash" && i["tool_input"]["command"] == "echo fine")
    );
    let write = inputs
        .iter()
        .find(|i| i["tool_name"] == "Write" && i["tool_input"]["file_path"] == "notes.md")
        .unwrap();
    for key in [
        "session_id",
        "cwd",
        "hook_event_name",
        "permission_mode",
        "transcript_path",
    ] {
        assert!(write.get(key).is_some(), "{key} missing from {write}");
    }
}

#[test]
fn claude_code_hooks_run_unchanged_from_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let settings = dir.path().join("settings.json");
    std::fs::write(&settings, claude_hooks(dir.path()).to_string()).unwrap();
    let ran = run_lines(
        dir.path(),
        &ws,
        &hook_transcript(&ws),
        &["--hooks", settings.to_str().unwrap()],
    );
    assert_hooks_held(&ran, &ws, &dir.path().join("seen.jsonl"));
}

#[test]
fn claude_settings_load_hooks_and_permissions_with_claude_codes_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::create_dir_all(ws.join(".claude")).unwrap();
    std::fs::create_dir(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/key.txt"), "hunter2\n").unwrap();
    // The project's shared settings: hooks, and an allow-list.
    let mut project = claude_hooks(dir.path());
    project["permissions"] = json!({
        "allow": ["Read", "Bash(echo:*)", "Write(notes.md)", "MultiEdit", "Bash(git status:*)"],
        "ask": ["Bash(git push:*)"]
    });
    std::fs::write(ws.join(".claude/settings.json"), project.to_string()).unwrap();
    // The local settings deny what the shared ones allow: deny wins whichever file says it.
    std::fs::write(
        ws.join(".claude/settings.local.json"),
        json!({"permissions": {"deny": ["Read(./secrets/**)", "Bash(git status:*)"]}}).to_string(),
    )
    .unwrap();
    // The user's settings: an absolute-path rule.
    std::fs::write(
        home.join(".claude/settings.json"),
        json!({"permissions": {"deny": [format!("Edit(/{}/src/main.rs)", ws.display())]}})
            .to_string(),
    )
    .unwrap();
    let mut lines = hook_transcript(&ws);
    lines.push(message(&[(
        "r-key",
        "Read",
        json!({"file_path": "secrets/key.txt"}),
    )]));
    lines.push(message(&[(
        "b-status",
        "Bash",
        json!({"command": "git status"}),
    )]));
    lines.push(message(&[(
        "b-push",
        "Bash",
        json!({"command": "git push origin main"}),
    )]));
    lines.push(message(&[(
        "w-main",
        "Write",
        json!({"file_path": "src/main.rs", "content": "x"}),
    )]));
    lines.push(message(&[(
        "w-other",
        "Write",
        json!({"file_path": "other.md", "content": "x"}),
    )]));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let t = transcript(dir.path(), "t.jsonl", &refs);
    let log = dir.path().join("log.jsonl");
    let ran = dsh_with(
        &[
            "run",
            t.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
            "--log",
            log.to_str().unwrap(),
            "--profile",
            "claude-code",
            "--claude-settings",
            "auto",
            "--approve",
            "deny",
        ],
        |cmd| {
            cmd.env("HOME", &home);
        },
    );
    assert_hooks_held(&ran, &ws, &dir.path().join("seen.jsonl"));
    for id in ["r-key", "b-status", "b-push", "w-main", "w-other"] {
        assert!(denied(&ran, id), "{id}: {}", result_text(&ran, id));
    }
    assert!(result_text(&ran, "b-status").contains("Bash(git status:*)"));
    assert!(
        result_text(&ran, "w-main").contains("denied by permission rule `Write(src/main.rs)`"),
        "{}",
        result_text(&ran, "w-main")
    );
    // Ask (an explicit rule, and the default for unmatched writes) is put to the approver.
    assert!(
        result_text(&ran, "b-push").contains("approver rejected"),
        "{}",
        result_text(&ran, "b-push")
    );
    assert!(!ws.join("other.md").exists());
    assert!(
        !std::fs::read_to_string(ws.join("src/main.rs"))
            .unwrap()
            .starts_with('x')
    );
}

#[test]
fn grep_takes_claude_codes_options() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let lines = [message(&[
        (
            "type",
            "Grep",
            json!({"pattern": "add", "type": "rust", "output_mode": "files_with_matches"}),
        ),
        (
            "after",
            "Grep",
            json!({"pattern": "pub fn add", "path": "src/lib.rs", "output_mode": "content", "-A": 1, "-B": 0}),
        ),
        (
            "before",
            "Grep",
            json!({"pattern": "pub fn add", "path": "src/lib.rs", "output_mode": "content", "-B": 1}),
        ),
        (
            "multi",
            "Grep",
            json!({"pattern": "fn add.*\\n\\s*a \\+ b", "multiline": true, "output_mode": "files_with_matches"}),
        ),
        (
            "single",
            "Grep",
            json!({"pattern": "fn add.*\\n\\s*a \\+ b", "output_mode": "files_with_matches"}),
        ),
        (
            "head",
            "Grep",
            json!({"pattern": "fn", "output_mode": "content", "head_limit": 1, "-i": true}),
        ),
        (
            "bad-type",
            "Grep",
            json!({"pattern": "x", "type": "no-such-type"}),
        ),
    ])];
    let ran = run_lines(dir.path(), &ws, &lines, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let found = result_text(&ran, "type");
    assert!(
        found.contains("src/lib.rs") && !found.contains(".md"),
        "{found}"
    );
    let after = result_text(&ran, "after");
    assert!(
        after.contains("a + b") && !after.contains("Adds two"),
        "{after}"
    );
    let before = result_text(&ran, "before");
    assert!(
        before.contains("Adds two") && !before.contains("a + b"),
        "{before}"
    );
    assert!(
        result_text(&ran, "multi").contains("src/lib.rs"),
        "{}",
        result_text(&ran, "multi")
    );
    // Without `multiline` a pattern cannot span lines.
    assert!(
        !result_text(&ran, "single").contains("src/lib.rs"),
        "{}",
        result_text(&ran, "single")
    );
    let head = result_text(&ran, "head");
    assert_eq!(
        head.lines().filter(|l| l.starts_with("src/")).count(),
        1,
        "{head}"
    );
    assert!(
        is_error(&ran, "bad-type"),
        "{}",
        result_text(&ran, "bad-type")
    );
}
