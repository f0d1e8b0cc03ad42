//! Strict function calling (OpenAI's strict mode, the Agents SDK's strict schemas) makes every
//! property required, so models send `null` or an empty value for each optional argument they
//! do not mean. dsh reads those as absent, for the built-in and the profile tools, and
//! `dsh tools --format openai --strict` offers schemas in that shape which the tools accept.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{dsh, log_events, message, run, transcript};
use serde_json::{Value, json};

/// The `tool/result` of each call, by call id: its error code (or "ok") and its text.
fn results(log: &std::path::Path) -> Vec<(String, String, String)> {
    log_events(log)
        .into_iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            let data = &e["data"];
            let code = data["error"]["code"].as_str().unwrap_or("ok").to_string();
            let text = data["message"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            (data["callId"].as_str().unwrap().to_string(), code, text)
        })
        .collect()
}

fn workspace(dir: &std::path::Path) -> std::path::PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn one() {}\n").unwrap();
    ws
}

#[test]
fn null_and_empty_optionals_are_not_given() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let steps = [
        message(&[
            (
                "read",
                "read_file",
                json!({"path": "a.txt", "offset": null, "limit": 0}),
            ),
            (
                "grep",
                "grep",
                json!({"pattern": "one", "path": "", "glob": null, "type": "",
                "output_mode": null, "case_insensitive": null, "context": null, "before": null,
                "after": null, "multiline": null, "head_limit": 0}),
            ),
            ("glob", "glob", json!({"pattern": "**/*.rs", "path": ""})),
            ("ls", "list_dir", json!({"path": ".", "ignore": null})),
        ]),
        message(&[(
            "edit",
            "edit_file",
            json!({"path": "a.txt", "old_string": "one", "new_string": "uno",
                   "replace_all": null, "edits": null}),
        )]),
        message(&[(
            "multi",
            "edit_file",
            json!({"path": "a.txt", "old_string": "", "new_string": "",
                   "replace_all": null, "edits": [{"old_string": "two", "new_string": "dos", "replace_all": null}]}),
        )]),
        message(&[(
            "sh",
            "shell",
            json!({"command": "echo hi", "timeout_ms": null, "workdir": "", "description": null}),
        )]),
    ];
    let lines: Vec<&str> = steps.iter().map(String::as_str).collect();
    let out = run(
        &transcript(dir.path(), "t.jsonl", &lines),
        &ws,
        &log,
        &["--shell-sandbox", "full"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let results = results(&log);
    for (id, code, text) in &results {
        assert_eq!(code, "ok", "{id}: {text}");
    }
    let text = |id: &str| results.iter().find(|r| r.0 == id).unwrap().2.clone();
    assert!(
        text("grep").contains("a.txt"),
        "head_limit 0 shows everything: {}",
        text("grep")
    );
    assert!(text("glob").contains("src/lib.rs"), "{}", text("glob"));
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "uno\ndos\n"
    );
}

#[test]
fn the_profile_tools_read_empty_optionals_as_not_given() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let step = message(&[
        (
            "grep",
            "Grep",
            json!({"pattern": "one", "path": "", "glob": "", "type": "",
            "output_mode": "", "head_limit": 0}),
        ),
        ("glob", "Glob", json!({"pattern": "**/*.rs", "path": null})),
        (
            "read",
            "Read",
            json!({"file_path": "a.txt", "offset": null, "limit": null}),
        ),
    ]);
    let out = run(
        &transcript(dir.path(), "t.jsonl", &[&step]),
        &ws,
        &log,
        &["--profile", "claude-code"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    for (id, code, text) in results(&log) {
        assert_eq!(code, "ok", "{id}: {text}");
    }
}

#[test]
fn the_strict_tool_list_follows_openai_strict_rules() {
    let out = dsh(&["tools", "--format", "openai", "--strict"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let tools: Vec<Value> = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(tools.len(), 9);
    fn check(schema: &Value, at: &str) {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            let mut required: Vec<&str> = schema["required"]
                .as_array()
                .unwrap_or_else(|| panic!("{at}: no required"))
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            required.sort_unstable();
            let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
            names.sort_unstable();
            assert_eq!(required, names, "{at}: every property required");
            assert_eq!(schema["additionalProperties"], false, "{at}");
            for (name, property) in properties {
                assert!(
                    property.get("minLength").is_none(),
                    "{at}.{name}: minLength"
                );
                check(property, &format!("{at}.{name}"));
            }
        }
        if let Some(items) = schema.get("items") {
            check(items, &format!("{at}[]"));
        }
    }
    for tool in &tools {
        let function = &tool["function"];
        assert_eq!(function["strict"], true);
        check(&function["parameters"], function["name"].as_str().unwrap());
    }
    let read = tools
        .iter()
        .find(|t| t["function"]["name"] == "read_file")
        .unwrap();
    let params = &read["function"]["parameters"]["properties"];
    assert_eq!(
        params["path"]["type"], "string",
        "a required property stays as it is"
    );
    assert_eq!(params["limit"]["type"], json!(["integer", "null"]));
    let refused = dsh(&["tools", "--format", "anthropic", "--strict"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
}
