//! Test 8: the exit code, a death by signal, and a timeout are what the model reads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::ErrorCode;
use dsh_tool_shell::SandboxConfig;
use serde_json::json;

#[tokio::test]
async fn an_exit_code_is_a_normal_result() {
    let env = Env::new(SandboxConfig::workspace_write());
    let v = env.ok("echo out; echo err >&2; exit 7").await;
    assert_eq!(code(&v), 7);
    assert_eq!(stdout(&v), "out\n");
    assert_eq!(stderr(&v), "err\n");
    let text = env.tool_text(&v);
    assert!(text.starts_with("exit code 7"), "{text}");
}

#[tokio::test]
async fn a_command_killed_by_a_signal_says_which() {
    let env = Env::new(SandboxConfig::workspace_write());
    let v = env.ok("kill -9 $$").await;
    assert_eq!(v["signal"], "SIGKILL", "{v}");
    assert!(v["exitCode"].is_null());
    assert!(env.tool_text(&v).contains("killed by SIGKILL"));
}

#[tokio::test]
async fn a_timeout_is_tool_timeout_with_the_output_so_far() {
    let env = Env::new(SandboxConfig::workspace_write());
    let failure = env
        .run_with(json!({"command": "echo started; sleep 30", "timeout_ms": 500}))
        .await
        .unwrap_err();
    assert_eq!(failure.code, ErrorCode::ToolTimeout);
    let content = failure.content.unwrap();
    let text = content[0].as_text().unwrap();
    assert!(text.contains("timed out after 500 ms"), "{text}");
    assert!(text.contains("started"), "{text}");
}
