//! Read-only mode: an MCP tool runs only if its server marks it `readOnlyHint: true`; the
//! others are `DENIED` before they run, with the reason in the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Rig, code, quick, servers};
use dsh_core::Hooks;
use dsh_mcp::{McpOptions, McpToolSource};
use serde_json::json;

fn read_only() -> McpOptions {
    McpOptions {
        read_only: true,
        ..quick()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_tools_marked_read_only_run_and_the_rest_are_denied_before_they_run() {
    let source = McpToolSource::start_with(servers(&[("test", vec![])]), read_only())
        .await
        .unwrap();
    let mut hooks = Hooks::new();
    hooks.pre_execute(source.read_only_policy().unwrap());
    let rig = Rig::around(source, hooks).await;

    let r = rig.one("mcp__test__echo", json!({"text": "write?"})).await;
    assert_eq!(code(&r), "DENIED", "{}", r.text());
    assert!(
        r.text().contains("read-only")
            && r.text().contains("mcp__test__echo")
            && r.text().contains("readOnlyHint"),
        "{}",
        r.text()
    );
    let r = rig.one("mcp__test__peek", json!({})).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    let stats = rig.one("mcp__test__stats", json!({})).await.text();
    assert_eq!(stats, r#"{"peek":1}"#, "echo never reached the server");

    let logged = rig.logged_results().await;
    let denied = &logged[0]["data"]["error"];
    assert_eq!(denied["code"], "DENIED");
    assert!(denied["message"].as_str().unwrap().contains("readOnlyHint"));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_handler_the_tool_itself_refuses() {
    let rig = Rig::start(servers(&[("test", vec![])]), read_only(), Hooks::new()).await;
    let r = rig.one("mcp__test__echo", json!({"text": "write?"})).await;
    assert_eq!(code(&r), "DENIED", "{}", r.text());
    let stats = rig.one("mcp__test__stats", json!({})).await.text();
    assert_eq!(stats, "{}", "echo never reached the server");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_read_only_mode_there_is_no_policy_and_every_tool_runs() {
    let rig = Rig::start(servers(&[("test", vec![])]), quick(), Hooks::new()).await;
    assert!(rig.source.read_only_policy().is_none());
    let r = rig.one("mcp__test__echo", json!({"text": "hi"})).await;
    assert_eq!(r.text(), "hi");
    rig.stop().await;
}
