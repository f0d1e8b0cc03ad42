//! `dsh run --mcp FILE`: an MCP server's tools run through the pipeline from a recorded
//! transcript, with the permission rules, the timeout and the log that apply to every tool.
//!
//! The MCP server is dsh-mcp's test server (rmcp's server side, over stdio). Cargo only
//! builds binaries of the package under test, so this test program is also the server: run
//! with `DSH_CLI_TEST_MCP_SERVER` set, it serves MCP on stdin/stdout instead of testing.
//! That is why it has no libtest harness (libtest would print on stdout first).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use common::{check, replay, run, sample_workspace, transcript};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const SERVE: &str = "DSH_CLI_TEST_MCP_SERVER";

const STEPS: [&str; 2] = [
    r#"{"role":"assistant","tool_calls":[
        {"id":"e","type":"function","function":{"name":"mcp__test__echo","arguments":"{\"text\":\"hello from MCP\"}"}},
        {"id":"a","type":"function","function":{"name":"mcp__test__add","arguments":"{\"a\":2,\"b\":3}"}},
        {"id":"p","type":"function","function":{"name":"mcp__test__pid","arguments":"{}"}},
        {"id":"n","type":"function","function":{"name":"mcp__test__env","arguments":"{\"name\":\"DSH_GREETING\"}"}}]}"#,
    r#"{"role":"assistant","tool_calls":[
        {"id":"s","type":"function","function":{"name":"mcp__test__slow","arguments":"{\"ms\":20000}"}},
        {"id":"f","type":"function","function":{"name":"mcp__test__fail","arguments":"{}"}},
        {"id":"x","type":"function","function":{"name":"mcp__test__crash","arguments":"{}"}},
        {"id":"d","type":"function","function":{"name":"mcp__test__image","arguments":"{}"}}]}"#,
];

fn gone(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mcp_tools_run_through_dsh_run() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let config = dir.path().join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"test": {
            "command": std::env::current_exe().unwrap(),
            "env": {SERVE: "1", "DSH_GREETING": "hi from the config"},
            "timeout": 500
        }}})
        .to_string(),
    )
    .unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "deny = [\"mcp__test__image\"]\n").unwrap();
    let lines: Vec<String> = STEPS.iter().map(|s| s.replace('\n', " ")).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let t = transcript(dir.path(), "t.jsonl", &lines);

    let ran = run(
        &t,
        &ws,
        &log,
        &[
            "--mcp",
            config.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
        ],
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("MCP tool(s) from 1 server(s)")
            && ran.stderr.contains("mcp__test__echo"),
        "{}",
        ran.stderr
    );
    assert!(
        !ran.stdout.contains("dsh-mcp-test-server"),
        "the server's stderr stays out of what the model sees"
    );

    assert_eq!(ran.tool_content("e"), "hello from MCP");
    assert!(
        ran.tool_content("a").contains("\"sum\":5"),
        "{}",
        ran.tool_content("a")
    );
    assert_eq!(ran.tool_content("n"), "hi from the config");
    let slow = ran.tool_content("s");
    assert!(slow.starts_with("TOOL_TIMEOUT: "), "{slow}");
    let fail = ran.tool_content("f");
    assert!(
        fail.starts_with("TOOL_ERROR: ") && fail.contains("it failed on purpose"),
        "{fail}"
    );
    let crash = ran.tool_content("x");
    assert!(crash.starts_with("TOOL_ERROR: "), "{crash}");
    let image = ran.tool_content("d");
    assert!(
        image.starts_with("DENIED: ") && image.contains("mcp__test__image"),
        "{image}"
    );

    assert_eq!(check(&log).code, 0);
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
    assert!(gone(&ran.tool_content("p")), "dsh stopped its MCP server");
}

fn a_server_that_does_not_start_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(dir.path(), "t.jsonl", &[&STEPS[0].replace('\n', " ")]);

    let config = dir.path().join("mcp.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {"ghost": {"command": "/nonexistent/server"}}}"#,
    )
    .unwrap();
    let ran = run(&t, &ws, &log, &["--mcp", config.to_str().unwrap()]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("MCP server `ghost` could not start"),
        "{}",
        ran.stderr
    );

    std::fs::write(
        &config,
        r#"{"mcpServers": {"remote": {"url": "https://x"}}}"#,
    )
    .unwrap();
    let ran = run(&t, &ws, &log, &["--mcp", config.to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("mcp.json") && ran.stderr.contains("MCP server `remote`"),
        "{}",
        ran.stderr
    );
    assert!(!Path::new(&log).exists(), "nothing ran");
}

fn main() {
    common::runner::main(&[
        (
            "mcp_tools_run_through_dsh_run",
            mcp_tools_run_through_dsh_run,
        ),
        (
            "a_server_that_does_not_start_is_named",
            a_server_that_does_not_start_is_named,
        ),
    ]);
}
