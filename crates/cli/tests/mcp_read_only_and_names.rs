//! `dsh run --mcp FILE`: `--read-only` holds for MCP tools (only those their server marks
//! `readOnlyHint: true` run), and MCP tools whose names cannot be used are named on stderr.
//!
//! As in `mcp_servers.rs`, this test program is also the MCP server it launches (run with
//! `DSH_CLI_TEST_MCP_SERVER` set, it serves dsh-mcp's test server, given its arguments), so
//! it has no libtest harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use common::{check, run, sample_workspace, transcript};
use serde_json::{Value, json};
use std::path::Path;

const SERVE: &str = "DSH_CLI_TEST_MCP_SERVER";

fn server(args: Value) -> Value {
    json!({"command": std::env::current_exe().unwrap(), "args": args, "env": {SERVE: "1"}})
}

fn write_config(dir: &Path, servers: Value) -> String {
    let config = dir.join("mcp.json");
    std::fs::write(&config, json!({"mcpServers": servers}).to_string()).unwrap();
    config.to_str().unwrap().to_string()
}

fn logged_errors(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "tool/result")
        .map(|e| e["data"]["error"].clone())
        .collect()
}

fn read_only_mode_denies_mcp_tools_not_marked_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let config = write_config(dir.path(), json!({"test": server(json!([]))}));
    let step = r#"{"role":"assistant","tool_calls":[
        {"id":"e","type":"function","function":{"name":"mcp__test__echo","arguments":"{\"text\":\"write\"}"}},
        {"id":"p","type":"function","function":{"name":"mcp__test__peek","arguments":"{}"}}]}"#
        .replace('\n', " ");
    // Its own step: read-only calls run side by side.
    let stats = r#"{"role":"assistant","tool_calls":[
        {"id":"s","type":"function","function":{"name":"mcp__test__stats","arguments":"{}"}}]}"#
        .replace('\n', " ");
    let t = transcript(dir.path(), "t.jsonl", &[&step, &stats]);

    let ran = run(&t, &ws, &log, &["--read-only", "--mcp", &config]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let echo = ran.tool_content("e");
    assert!(
        echo.starts_with("DENIED: ")
            && echo.contains("readOnlyHint")
            && echo.contains("mcp__test__echo"),
        "{echo}"
    );
    assert_eq!(ran.tool_content("p"), "peeked");
    assert_eq!(ran.tool_content("s"), r#"{"peek":1}"#, "echo never ran");
    let errors = logged_errors(&log);
    assert_eq!(errors[0]["code"], "DENIED", "{errors:?}");
    assert!(errors[0]["message"].as_str().unwrap().contains("read-only"));
    assert_eq!(check(&log).code, 0);

    // Without --read-only the same call runs.
    let log = dir.path().join("writable.jsonl");
    let ran = run(&t, &ws, &log, &["--mcp", &config]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.tool_content("e"), "write");
}

fn tools_left_out_are_named_on_stderr_and_ambiguous_servers_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let tools = json!([
        {"name": "b__c", "inputSchema": {"type": "object"}},
        {"name": "x y", "inputSchema": {"type": "object"}},
        {"name": "x_y", "inputSchema": {"type": "object"}},
        {"name": "echo", "inputSchema": {"type": "object"}}
    ]);
    let config = write_config(
        dir.path(),
        json!({"a": server(json!(["raw", "--tools", tools.to_string()]))}),
    );
    let step = r#"{"role":"assistant","tool_calls":[
        {"id":"e","type":"function","function":{"name":"mcp__a__echo","arguments":"{\"text\":\"hi\"}"}},
        {"id":"x","type":"function","function":{"name":"mcp__a__x_y","arguments":"{}"}}]}"#
        .replace('\n', " ");
    let t = transcript(dir.path(), "t.jsonl", &[&step]);
    let ran = run(&t, &ws, &log, &["--mcp", &config]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    for tool in ["x y", "x_y"] {
        assert!(
            ran.stderr.contains(&format!(
                "dsh: error: MCP server `a`: tool `{tool}` was not registered"
            )),
            "{}",
            ran.stderr
        );
    }
    assert!(ran.stderr.contains("mcp__a__b__c"), "{}", ran.stderr);
    assert_eq!(ran.tool_content("e"), "hi");
    assert!(
        ran.tool_content("x").starts_with("UNKNOWN_TOOL"),
        "{}",
        ran.tool_content("x")
    );

    // A server name that could claim another's tools: refused before anything runs.
    let config = write_config(
        dir.path(),
        json!({"a": server(json!([])), "a__b": server(json!([]))}),
    );
    let log = dir.path().join("refused.jsonl");
    let ran = run(&t, &ws, &log, &["--mcp", &config]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("MCP server `a__b`"), "{}", ran.stderr);
    assert!(!log.exists(), "nothing ran");
}

fn main() {
    common::runner::main(&[
        (
            "read_only_mode_denies_mcp_tools_not_marked_read_only",
            read_only_mode_denies_mcp_tools_not_marked_read_only,
        ),
        (
            "tools_left_out_are_named_on_stderr_and_ambiguous_servers_refused",
            tools_left_out_are_named_on_stderr_and_ambiguous_servers_refused,
        ),
    ]);
}
