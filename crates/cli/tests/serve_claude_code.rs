//! `dsh serve --profile claude-code --claude-settings FILE`: an MCP client (a raw JSON-RPC
//! exchange over the server's stdio) is offered Claude Code's tools, and its calls go through
//! the same adapters, settings rules and read-before-edit as `dsh run`'s; `dsh check` passes on
//! the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::stdio::Client;
use common::{check, log_events};
use serde_json::{Value, json};

#[test]
fn serve_offers_the_claude_code_tools_and_runs_them_through_the_same_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\nworld\n").unwrap();
    std::fs::write(ws.join("other.txt"), "x\n").unwrap();
    std::fs::write(ws.join("secret.txt"), "k\n").unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"permissions": {
            "allow": ["Read", "Edit(./**)"],
            "deny": ["Read(./secret.txt)"]
        }})
        .to_string(),
    )
    .unwrap();
    let log = dir.path().join("session.jsonl");
    let mut client = Client::start(&[
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
        "--profile".as_ref(),
        "claude-code".as_ref(),
        "--claude-settings".as_ref(),
        settings.as_os_str(),
    ]);
    client.request(
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw-test-client", "version": "0"}
        }),
    );
    client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let listed = client.request("tools/list", json!({}));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for name in [
        "Bash",
        "Edit",
        "Glob",
        "Grep",
        "LS",
        "MultiEdit",
        "Read",
        "Write",
    ] {
        assert!(names.contains(&name), "{name} is not listed: {names:?}");
    }
    for builtin in ["read_file", "edit_file", "write_file", "shell"] {
        assert!(!names.contains(&builtin), "{builtin} is listed: {names:?}");
    }
    let read = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Read")
        .unwrap();
    assert!(
        read["inputSchema"]["properties"]["file_path"].is_object(),
        "{read}"
    );

    // Editing a file not read yet: read-before-edit refuses it, as for `dsh run`.
    let (failed, text) = client.call(
        "Edit",
        json!({"file_path": "other.txt", "old_string": "x", "new_string": "y"}),
    );
    assert!(failed && text.contains("DENIED"), "{text}");
    // Read (an absolute path inside the workspace) then Edit.
    let absolute = ws.join("notes.txt");
    let (failed, text) = client.call("Read", json!({"file_path": absolute}));
    assert!(!failed && text.contains("world"), "{text}");
    let (failed, text) = client.call(
        "Edit",
        json!({"file_path": "notes.txt", "old_string": "world", "new_string": "there"}),
    );
    assert!(!failed, "{text}");
    // The settings' deny rule holds.
    let (failed, text) = client.call("Read", json!({"file_path": "secret.txt"}));
    assert!(failed && text.contains("DENIED"), "{text}");

    assert_eq!(client.finish(), 0);
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "hello\nthere\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("other.txt")).unwrap(),
        "x\n"
    );
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    // The log records the names and arguments the client used.
    let calls: Vec<Value> = log_events(&log)
        .into_iter()
        .filter(|e| e["type"] == "tool/call")
        .collect();
    let names: Vec<&str> = calls
        .iter()
        .map(|c| c["data"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Edit", "Read", "Edit", "Read"]);
    assert_eq!(calls[2]["data"]["arguments"]["file_path"], "notes.txt");
}
