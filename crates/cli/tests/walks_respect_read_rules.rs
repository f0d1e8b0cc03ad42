//! `dsh run` with a `--policy` that hides files: no tool shows what `read_file` may not read,
//! whether called directly or from a `run_code` script, and ignore files outside the
//! workspace (a parent's, the user's global excludes file) change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::json;
use std::path::Path;

const KEY: &str = "API_KEY=sk-live-4242";
const TOKEN: &str = "TOKEN=dotenv-9999";

fn line(calls: &[(&str, &str, serde_json::Value)]) -> String {
    let calls: Vec<_> = calls
        .iter()
        .map(|(id, tool, args)| {
            json!({"id": id, "type": "function",
                "function": {"name": tool, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "tool_calls": calls}).to_string()
}

fn workspace(dir: &Path) -> std::path::PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("secrets")).unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("secrets/key.txt"), format!("{KEY}\n")).unwrap();
    std::fs::write(ws.join(".env"), format!("{TOKEN}\n")).unwrap();
    std::fs::write(ws.join("src/config.rs"), "let x = 1;\n").unwrap();
    ws
}

#[test]
fn no_tool_nor_script_shows_what_the_rules_hide() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, r#"deny = ["*(secrets/**)", "*(.env)"]"#).unwrap();
    let script = r#"
        const out = [];
        for (const [tool, args] of [
            ["grep", { pattern: "=", output_mode: "content" }],
            ["grep", { pattern: "=", glob: ".env", output_mode: "content" }],
            ["glob", { pattern: "**/*" }],
            ["list_dir", { path: "." }],
        ]) {
            const r = await tools[tool](args);
            out.push(r.text);
        }
        return out.join("\n----\n");
    "#;
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            &line(&[
                ("r", "read_file", json!({"path": "secrets/key.txt"})),
                (
                    "g1",
                    "grep",
                    json!({"pattern": "=", "output_mode": "content"}),
                ),
                (
                    "g2",
                    "grep",
                    json!({"pattern": "=", "glob": ".env", "output_mode": "content"}),
                ),
                ("gl", "glob", json!({"pattern": "**/*"})),
                ("gs", "grep", json!({"pattern": "API", "path": "secrets"})),
                ("ls", "list_dir", json!({"path": "."})),
            ]),
            &line(&[("code", "run_code", json!({"code": script}))]),
        ],
    );
    let ran = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // What the model is shown: the tool messages (its own calls name `secrets/key.txt`).
    let shown: Vec<String> = ran
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    for leak in [KEY, TOKEN, "sk-live", "dotenv-9999", "key.txt"] {
        for text in &shown {
            assert!(!text.contains(leak), "`{leak}` leaked:\n{text}");
        }
    }
    assert!(ran.tool_content("r").starts_with("DENIED"));
    assert!(ran.tool_content("gs").starts_with("DENIED"));
    for id in ["g1", "g2", "gl", "ls"] {
        assert!(
            ran.tool_content(id)
                .contains("hidden by the permission rules"),
            "{id}: {}",
            ran.tool_content(id)
        );
    }
    let code = ran.tool_content("code");
    assert!(code.contains("src/config.rs"), "{code}");
    assert_eq!(
        code.matches("hidden by the permission rules").count(),
        4,
        "{code}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains("sk-live") && !logged.contains("dotenv-9999"));
    assert_eq!(check(&log).code, 0);
}

#[test]
fn ignore_files_outside_the_workspace_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(ws.join("docs/guide.md"), "guide\n").unwrap();
    std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
    // A parent's .gitignore, and the user's global excludes file.
    std::fs::write(dir.path().join(".gitignore"), "*.txt\n").unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let excludes = dir.path().join("global-excludes");
    std::fs::write(&excludes, "*.md\n").unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        format!("[core]\n\texcludesFile = {}\n", excludes.display()),
    )
    .unwrap();
    let log = dir.path().join("session.jsonl");
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[&line(&[
            ("md", "glob", json!({"pattern": "**/*.md"})),
            ("txt", "glob", json!({"pattern": "*.txt"})),
        ])],
    );
    let ran = dsh_with(
        &[
            "run".as_ref(),
            t.as_os_str(),
            "--workspace".as_ref(),
            ws.as_os_str(),
            "--log".as_ref(),
            log.as_os_str(),
        ],
        |cmd| {
            cmd.env("HOME", &home)
                .env("XDG_CONFIG_HOME", home.join(".config"));
        },
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.tool_content("md").contains("docs/guide.md"),
        "{}",
        ran.tool_content("md")
    );
    assert!(
        ran.tool_content("txt").contains("notes.txt"),
        "{}",
        ran.tool_content("txt")
    );
}
