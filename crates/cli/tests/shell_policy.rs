//! The shell tool under a user's policy, end to end through `dsh run`: a rule that denies
//! writing a folder makes it read-only to commands, a rule that denies reading hides it,
//! `default = "ask"` turns an allow-list into the only way a command runs, and `--spill-dir`
//! moves the spill folder (still dsh's own: no tool writes it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::json;
use std::path::Path;

/// One assistant line holding `calls` as (id, tool, arguments).
fn calls(dir: &Path, name: &str, calls: &[(&str, &str, serde_json::Value)]) -> std::path::PathBuf {
    let tool_calls: Vec<_> = calls
        .iter()
        .map(|(id, tool, args)| {
            json!({"id": id, "type": "function",
                   "function": {"name": tool, "arguments": args.to_string()}})
        })
        .collect();
    let line = json!({"role": "assistant", "content": "", "tool_calls": tool_calls}).to_string();
    transcript(dir, name, &[&line])
}

fn workspace(dir: &Path) -> std::path::PathBuf {
    let ws = dir.join("ws");
    for d in ["src/gen", "secrets"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    std::fs::write(ws.join("src/gen/a.rs"), "generated\n").unwrap();
    std::fs::write(ws.join("secrets/key"), "TOPSECRET-4711\n").unwrap();
    std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
    ws
}

#[test]
fn a_rule_denying_writes_or_reads_binds_shell_commands_too() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        r#"deny = ["write_file(src/gen/**)", "read_file(secrets/**)"]"#,
    )
    .unwrap();
    let t = calls(
        dir.path(),
        "t.jsonl",
        &[
            (
                "w1",
                "shell",
                json!({"command": "echo pwned > src/gen/a.rs; echo done"}),
            ),
            (
                "w2",
                "shell",
                json!({"command": "rm -f src/gen/a.rs; echo done"}),
            ),
            (
                "r1",
                "shell",
                json!({"command": "cat secrets/key; ls secrets; echo done"}),
            ),
            (
                "ok",
                "shell",
                json!({"command": "echo fine > notes.txt && cat notes.txt"}),
            ),
        ],
    );
    let log = dir.path().join("s.jsonl");
    let r = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/gen/a.rs")).unwrap(),
        "generated\n",
        "a denied write went through: {}",
        r.tool_content("w1")
    );
    assert!(
        r.tool_content("w1").contains("Read-only file system"),
        "{}",
        r.tool_content("w1")
    );
    assert!(ws.join("src/gen/a.rs").exists(), "{}", r.tool_content("w2"));
    let read = r.tool_content("r1");
    assert!(read.contains("done"), "{read}");
    assert!(
        !read.contains("TOPSECRET"),
        "a hidden file was read: {read}"
    );
    assert!(
        r.tool_content("ok").contains("fine"),
        "{}",
        r.tool_content("ok")
    );
    assert_eq!(check(&log).code, 0);
}

#[test]
fn default_ask_runs_only_commands_an_allow_rule_covers_whole() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "default = \"ask\"\nallow = [\"shell(echo hi*)\"]\n",
    )
    .unwrap();
    let t = calls(
        dir.path(),
        "t.jsonl",
        &[
            ("a1", "shell", json!({"command": "echo hi there"})),
            ("a2", "shell", json!({"command": "echo hi; touch pwned1"})),
            ("a3", "shell", json!({"command": "echo hi $(touch pwned2)"})),
            ("a4", "shell", json!({"command": "touch pwned3"})),
        ],
    );
    let log = dir.path().join("s.jsonl");
    // No terminal to ask on: an `ask` is a denial, never an allow.
    let r = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.tool_content("a1").contains("hi there"),
        "{}",
        r.tool_content("a1")
    );
    for id in ["a2", "a3", "a4"] {
        assert!(
            r.tool_content(id).to_lowercase().contains("denied")
                || r.tool_content(id).contains("approval"),
            "{id}: {}",
            r.tool_content(id)
        );
    }
    for f in ["pwned1", "pwned2", "pwned3"] {
        assert!(!ws.join(f).exists(), "{f} was created");
    }
    let events = log_events(&log);
    let denied = events
        .iter()
        .filter(|e| e["type"] == "tool/result" && e["data"]["error"]["code"] == "DENIED")
        .count();
    assert_eq!(denied, 3);
}

#[test]
fn spill_dir_flag_moves_the_spill_folder_and_keeps_it_dsh_s_own() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let spill = dir.path().join("spilled");
    let target = spill.join("big.stdout.txt");
    let t = calls(
        dir.path(),
        "t.jsonl",
        &[("big", "shell", json!({"command": "seq 1 40000"}))],
    );
    let log = dir.path().join("s.jsonl");
    let r = run(&t, &ws, &log, &["--spill-dir", spill.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let shown = r.tool_content("big");
    assert!(
        shown.contains("bytes omitted") && shown.contains("big.stdout.txt"),
        "{shown}"
    );
    let spilled = std::fs::read_to_string(&target).unwrap();
    assert_eq!(spilled.lines().count(), 40000);
    assert!(
        !ws.join(".dsh/spill").exists(),
        "the default spill folder was used anyway"
    );

    // A moved spill folder inside the workspace is still dsh's own: no tool writes it.
    let inside = ws.join("out/spill");
    let t2 = calls(
        dir.path(),
        "t2.jsonl",
        &[
            ("big", "shell", json!({"command": "seq 1 40000"})),
            (
                "w",
                "shell",
                json!({"command": "echo forged > out/spill/big.stdout.txt; echo done"}),
            ),
            (
                "wf",
                "write_file",
                json!({"path": "out/spill/big.stdout.txt", "content": "forged"}),
            ),
        ],
    );
    let r = run(
        &t2,
        &ws,
        &dir.path().join("s2.jsonl"),
        &["--spill-dir", inside.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let kept = std::fs::read_to_string(inside.join("big.stdout.txt")).unwrap();
    assert_eq!(
        kept.lines().count(),
        40000,
        "the spill file was overwritten"
    );
}
