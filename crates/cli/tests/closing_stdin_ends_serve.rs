//! A stdio client that closes stdin with a call in flight (an agent exiting; the MCP SDKs give
//! the server about 2 s before SIGTERM) sees `dsh serve` end at once: the call is cancelled and
//! recorded `ABORTED`, and the log checks clean.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::stdio::Client;
use common::{check, log_events};
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn closing_stdin_mid_call_ends_dsh_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let log = dir.path().join("session.jsonl");
    let mut client = Client::start(&[
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
        "--shell-sandbox".as_ref(),
        "full".as_ref(),
    ]);
    client.initialize();
    client.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": {"name": "shell", "arguments": {"command": "sleep 30"}}}));
    // Until the call is recorded, it is not in flight yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("tool/call")
    {
        assert!(Instant::now() < deadline, "the call was never recorded");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let closed = Instant::now();
    client.close_stdin();
    let status = client.child.wait().unwrap();
    let took = closed.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(3),
        "dsh went on for {took:?} after its client left"
    );
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    let result = log_events(&log)
        .into_iter()
        .find(|e| e["type"] == "tool/result")
        .unwrap();
    assert_eq!(result["data"]["error"]["code"], "ABORTED", "{result}");
}
