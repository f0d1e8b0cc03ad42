//! `dsh serve` against the official MCP SDKs (Python `mcp`, TypeScript
//! `@modelcontextprotocol/sdk`), over stdio: each client (`tests/sdk/client.py`,
//! `tests/sdk/client.cjs`) starts `dsh serve` itself, lists the tools, reads and edits a file,
//! is denied a write, answers a policy `ask` yes and no by elicitation, calls an upstream MCP
//! server's tools through dsh (10 at once, overlapping), and cancels a long call. Then
//! `dsh check` passes on the log and `dsh replay` shows every call.
//!
//! `scripts/mcp-sdks.sh` installs both SDKs (into `target/mcp-sdks`); when it cannot, the test
//! fails, it does not skip. The upstream server is dsh-mcp's test server, served by this test
//! program itself (run with `DSH_CLI_TEST_MCP_SERVER` set), hence no libtest harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use common::serve::sdks;
use common::{check, log_events, replay};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const SERVE: &str = "DSH_CLI_TEST_MCP_SERVER";

/// A workspace with `notes.txt`, a policy (deny `secret*`, ask `ask-*`), and an MCP config
/// naming the test server.
fn setup(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    std::fs::write(ws.join("other.txt"), "x\n").unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "deny = [\"write_file(secret*)\"]\nask = [\"write_file(ask-*)\"]\n",
    )
    .unwrap();
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"test": {
            "command": std::env::current_exe().unwrap(),
            "env": {SERVE: "1"},
        }}})
        .to_string(),
    )
    .unwrap();
    (ws, dir.join("session.jsonl"), policy, config)
}

/// Runs a client program against `dsh serve`; then checks and replays the log.
fn drive(program: &str, script: &Path, node_path: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let (ws, log, policy, config) = setup(dir.path());
    let mut command = Command::new(program);
    command
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args([&ws, &log, &policy, &config])
        .stdin(Stdio::null());
    if let Some(path) = node_path {
        command.env("NODE_PATH", path);
    }
    let out = command.output().expect("the client starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{program} {}: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        script.display(),
        out.status
    );
    // dsh has closed the log once its client is gone.
    std::thread::sleep(Duration::from_millis(200));
    let checked = check(&log);
    assert_eq!(checked.code, 0, "dsh check: {}", checked.stderr);
    let events = log_events(&log);
    let calls: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["callId"].as_str().unwrap().to_string())
        .collect();
    // tools/list is not a call; every tools/call is: a read and two edits, 3 writes,
    // 2 echoes, 10 peeks, 1 slow.
    assert_eq!(calls.len(), 19, "{calls:?}");
    let slow = events
        .iter()
        .find(|e| {
            e["type"] == "tool/result"
                && events.iter().any(|c| {
                    c["type"] == "tool/call"
                        && c["data"]["callId"] == e["data"]["callId"]
                        && c["data"]["name"] == "mcp__test__slow"
                })
        })
        .expect("the cancelled call has its result");
    let code = slow["data"]["error"]["code"].as_str().unwrap_or_default();
    assert!(code.starts_with("ABORTED"), "the cancelled call: {slow}");
    let replayed = replay(&log, "openai");
    assert_eq!(replayed.code, 0, "dsh replay: {}", replayed.stderr);
    for id in &calls {
        assert!(
            replayed.stdout.contains(&format!("\"{id}\"")),
            "dsh replay does not show {id}"
        );
    }
}

fn python_sdk_over_stdio() {
    let python = sdks().python;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/client.py");
    drive(&python, &script, None);
}

fn typescript_sdk_over_stdio() {
    let node_path = sdks().node_path;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/client.cjs");
    drive("node", &script, Some(&node_path));
}

/// Garbage on stdin and a client gone mid-call leave dsh serving no one but a valid log.
fn garbage_and_a_vanished_client_leave_a_valid_log() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, log, policy, config) = setup(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve".as_ref(), "--workspace".as_ref(), ws.as_os_str()])
        .args([
            "--log".as_ref(),
            log.as_os_str(),
            "--policy".as_ref(),
            policy.as_os_str(),
        ])
        .args(["--mcp".as_ref(), config.as_os_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        "this is not JSON".to_string(),
        "{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"tools/call\", \"params\": 7}".to_string(),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "mcp__test__slow", "arguments": {"ms": 60000}}})
        .to_string(),
    ];
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    // Wait until the slow call is recorded, then vanish.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("mcp__test__slow")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the call was not recorded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "dsh serve: {status:?}");
    let checked = check(&log);
    assert_eq!(checked.code, 0, "dsh check: {}", checked.stderr);
    let events = log_events(&log);
    let result = events
        .iter()
        .find(|e| e["type"] == "tool/result")
        .expect("the call in flight has its result");
    assert!(
        result["data"]["error"]["code"]
            .as_str()
            .unwrap()
            .starts_with("ABORTED")
    );
}

fn main() {
    common::runner::main(&[
        ("python_sdk_over_stdio", python_sdk_over_stdio),
        ("typescript_sdk_over_stdio", typescript_sdk_over_stdio),
        (
            "garbage_and_a_vanished_client_leave_a_valid_log",
            garbage_and_a_vanished_client_leave_a_valid_log,
        ),
    ]);
}
