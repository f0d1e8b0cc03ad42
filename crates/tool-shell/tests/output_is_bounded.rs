//! Test 7: `cat` with no input returns at once; a cut output keeps its head and tail and is
//! spilled whole to a file (test 6, the flood, is alone in `flood_keeps_memory_flat.rs`: RSS
//! is the whole process's, so no other test may run beside it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::ToolDefinition;
use dsh_tool_shell::SandboxConfig;
use std::time::{Duration, Instant};

#[tokio::test]
async fn cat_with_no_input_returns_at_once() {
    let env = Env::new(SandboxConfig::workspace_write());
    let start = Instant::now();
    let v = env.ok("cat; read line; echo \"read: $?\"").await;
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(stdout(&v), "read: 1\n");
}

#[tokio::test]
async fn a_cut_output_keeps_its_end_and_spills_whole() {
    let env = Env::new(SandboxConfig::workspace_write());
    let v = env
        .ok("for i in $(seq 1 20000); do echo line $i; done; echo 'error: the end' >&2; exit 1")
        .await;
    assert_eq!(code(&v), 1);
    let out = stdout(&v);
    assert!(out.starts_with("line 1\n"));
    assert!(out.trim_end().ends_with("line 20000"));
    assert!(out.contains("bytes omitted"));
    let text = env.tool_text(&v);
    assert!(text.contains("error: the end"));
    let spill = v["spill"]["stdout"]["path"].as_str().unwrap();
    assert!(spill.starts_with(".dsh/spill/"), "{spill}");
    assert!(text.contains(spill));
    let whole = std::fs::read_to_string(env.path(spill)).unwrap();
    assert_eq!(whole.lines().count(), 20000);
    // The command itself cannot write there.
    let w = env.ok(&format!("echo x >> {spill}")).await;
    assert_ne!(code(&w), 0);
}

#[tokio::test]
async fn only_the_last_spilling_calls_keep_their_files() {
    let env = Env::new(SandboxConfig::workspace_write());
    let mut files = Vec::new();
    for i in 0..22 {
        let v = env
            .tool
            .execute(
                serde_json::json!({"command": "seq 1 100000"}),
                dsh_core::ToolContext::detached(format!("call_{i}")),
            )
            .await
            .unwrap();
        files.push(env.path(v["spill"]["stdout"]["path"].as_str().unwrap()));
    }
    assert!(!files[0].exists() && !files[1].exists());
    assert!(files[2..].iter().all(|f| f.exists()));
}
