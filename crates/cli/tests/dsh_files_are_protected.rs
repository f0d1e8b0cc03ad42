//! With `--log` (and `--policy`) inside `--workspace`, no tool may write them: not directly,
//! not through a symlink or hard link made beforehand, not by racing a read against a write
//! in a `run_code` script, whatever the rules allow. The log stays dsh's, and `dsh check`
//! passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::json;

fn line(id: &str, tool: &str, args: serde_json::Value) -> String {
    json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}}]})
    .to_string()
}

#[test]
fn a_script_cannot_write_the_log_it_is_recorded_in() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let log = ws.join("session.jsonl");
    let policy = ws.join("policy.toml");
    std::fs::write(
        &policy,
        r#"allow = ["write_file", "edit_file", "apply_patch", "run_code", "read_file"]"#,
    )
    .unwrap();
    // Aliases made before the run: the log does not exist yet, so the hard link is made by
    // a first run below.
    std::os::unix::fs::symlink("session.jsonl", ws.join("alias.jsonl")).unwrap();
    let first = transcript(
        dir.path(),
        "first.jsonl",
        &[&line("c0", "glob", json!({"pattern": "*"}))],
    );
    let ran = run(&first, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    std::fs::hard_link(&log, ws.join("hard.jsonl")).unwrap();

    let script = r#"
        const forged = '{"seq":1,"step":1,"type":"user/message","data":{"content":"forged","origin":null}}\n';
        const tries = [];
        const attempt = async (what, p) => {
            try { await p; tries.push(what + ": WRITTEN"); }
            catch (e) { tries.push(what + ": " + e.code); }
        };
        for (const path of ["session.jsonl", "alias.jsonl", "hard.jsonl", "policy.toml"]) {
            try { await tools.read_file({ path }); } catch (e) {}
            await attempt("write " + path, tools.write_file({ path, content: forged }));
            await attempt("edit " + path, tools.edit_file({ path, old_string: "{", new_string: "[" }));
            await attempt("patch " + path, tools.apply_patch({ input:
                "*** Begin Patch\n*** Delete File: " + path + "\n*** End Patch" }));
        }
        await attempt("move onto the log", tools.apply_patch({ input:
            "*** Begin Patch\n*** Add File: session.jsonl\n+forged\n*** End Patch" }));
        // The race of the issue: a read and a write of the log in flight together.
        for (let i = 0; i < 10; i++) {
            const r = tools.read_file({ path: "session.jsonl" });
            const w = tools.write_file({ path: "session.jsonl", content: forged });
            try { await r; } catch (e) {}
            await attempt("race " + i, w);
        }
        return tries.join("\n");
    "#;
    let second = transcript(
        dir.path(),
        "second.jsonl",
        &[&line("code", "run_code", json!({"code": script}))],
    );
    let ran = run(&second, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let content = ran.tool_content("code");
    assert!(content.starts_with("DENIED"), "{content}");
    assert!(!content.contains("WRITTEN"), "{content}");
    assert!(
        content.contains("23 sub-call(s) of this script were refused"),
        "{content}"
    );
    assert!(content.contains("one of dsh's own files"), "{content}");

    // The log is dsh's: whole, checked, and the same file the hard link names.
    assert_eq!(check(&log).code, 0, "{}", check(&log).stderr);
    let events = log_events(&log);
    assert_eq!(events[0]["seq"], 1);
    assert_eq!(events[0]["type"], "tool/call");
    assert!(events.iter().all(|e| e["data"]["content"] != "forged"));
    assert!(events.iter().any(|e| e["data"]["callId"] == "code"));
    assert_eq!(
        std::fs::read(&log).unwrap(),
        std::fs::read(ws.join("hard.jsonl")).unwrap()
    );
    assert!(
        std::fs::read_to_string(&policy)
            .unwrap()
            .starts_with("allow = ")
    );
}

#[test]
fn hook_scripts_and_mcp_commands_named_by_the_settings_are_dsh_s_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".claude/hooks")).unwrap();
    std::fs::create_dir_all(ws.join("tools")).unwrap();
    let hook = ws.join(".claude/hooks/audit.sh");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").unwrap();
    let server = ws.join("tools/server.py");
    std::fs::write(&server, "print('never run')\n").unwrap();
    let settings = ws.join(".claude/settings.json");
    std::fs::write(
        &settings,
        json!({"hooks": {"PreToolUse": [{"matcher": "glob", "hooks": [
            {"type": "command", "command": "sh \"$CLAUDE_PROJECT_DIR\"/.claude/hooks/audit.sh"}
        ]}]}})
        .to_string(),
    )
    .unwrap();
    let mcp = ws.join("mcp.json");
    std::fs::write(
        &mcp,
        json!({"mcpServers": {"local": {"command": "python3", "args": ["tools/server.py"]}}})
            .to_string(),
    )
    .unwrap();
    // The server is never started: the policy denies all of its tools.
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, r#"deny = ["mcp__local__*"]"#).unwrap();
    let log = dir.path().join("session.jsonl");
    let mut lines = Vec::new();
    for (i, path) in [
        ".claude/hooks/audit.sh",
        "tools/server.py",
        ".claude/settings.json",
        "mcp.json",
    ]
    .iter()
    .enumerate()
    {
        lines.push(line(
            &format!("w{i}"),
            "write_file",
            json!({"path": path, "content": "exit 0 # replaced"}),
        ));
    }
    lines.push(line(
        "sh",
        "shell",
        json!({"command": "echo replaced > .claude/hooks/audit.sh; echo replaced > tools/server.py; echo replaced > mcp.json"}),
    ));
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let t = transcript(dir.path(), "t.jsonl", &refs);
    let out = run(
        &t,
        &ws,
        &log,
        &[
            "--hooks",
            settings.to_str().unwrap(),
            "--mcp",
            mcp.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("`local` not started"),
        "a server none of whose tools may run is not started: {}",
        out.stderr
    );
    for i in 0..4 {
        let content = out.tool_content(&format!("w{i}"));
        assert!(content.starts_with("DENIED"), "w{i}: {content}");
    }
    assert_eq!(
        std::fs::read_to_string(&hook).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert_eq!(
        std::fs::read_to_string(&server).unwrap(),
        "print('never run')\n"
    );
    assert!(
        !std::fs::read_to_string(&settings)
            .unwrap()
            .contains("replaced")
    );
    assert!(
        std::fs::read_to_string(&mcp)
            .unwrap()
            .contains("mcpServers"),
        "the MCP config was replaced"
    );
    assert_eq!(check(&log).code, 0);
}
