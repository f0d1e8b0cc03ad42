//! An MCP tool's `present` is dsh's own code that never blocks (it says so with
//! `ToolDefinition::user_code_may_block`), so the pipeline calls it inline instead of handing
//! it to the user-code pool: an upstream server's tools still answer, with their own
//! presentation, while every user-code thread is stuck in a user's tool. That user's tool,
//! which does not say its code never blocks, is still given up on at the user-code deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "../../../tests/support/stuck_present.rs"]
mod stuck_present;

use common::{code, quick, servers};
use dsh_core::{ContentBlock, FrozenResult, ToolCall, ToolRegistry};
use dsh_mcp::McpToolSource;
use dsh_scheduler::{Session, StepRequest};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stuck_present::{Stuck, one_user_code_thread};

async fn one(session: &Session, id: &str, tool: &str, args: Value) -> FrozenResult {
    let calls = vec![ToolCall::new(id, tool, args)];
    session
        .run_step(StepRequest::new(calls))
        .await
        .unwrap()
        .results
        .remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tools_answer_while_every_user_code_thread_is_stuck() {
    let source = McpToolSource::start_with(servers(&[("test", vec![])]), quick())
        .await
        .unwrap();
    let registry = Arc::new(ToolRegistry::new());
    source.register(&registry).unwrap();
    let block = Arc::new(AtomicBool::new(false));
    registry
        .register(Stuck {
            block: block.clone(),
        })
        .unwrap();
    let (harness, session) = one_user_code_thread(registry.clone()).await;
    assert_eq!(
        code(&one(&session, "s1", "stuck", json!({})).await),
        "ok",
        "the user's tool answers while it does not block"
    );

    block.store(true, Ordering::SeqCst);
    // The user's tool, which did not say its code never blocks, is given up on at the
    // deadline, and its thread stays stuck; the next of its calls finds no thread free.
    for id in ["s2", "s3"] {
        let started = Instant::now();
        let stuck = one(&session, id, "stuck", json!({})).await;
        assert_eq!(code(&stuck), "PIPELINE_ERROR", "{}", stuck.text());
        assert!(stuck.text().contains("present"), "{}", stuck.text());
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "waited {:?} on a present stuck for 20 s",
            started.elapsed()
        );
    }

    // The upstream's tools need no user-code thread: their calls answer, each with its own
    // presentation (the server's `content`, also for a structured result).
    let started = Instant::now();
    let echo = one(
        &session,
        "e",
        "mcp__test__echo",
        json!({"text": "still here"}),
    )
    .await;
    assert_eq!(code(&echo), "ok", "{}", echo.text());
    assert_eq!(echo.text(), "still here");
    let add = one(&session, "a", "mcp__test__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(code(&add), "ok", "{}", add.text());
    assert_eq!(add.value(), Some(&json!({"sum": 5})));
    assert!(add.text().contains("\"sum\":5"), "{}", add.text());
    let image = one(&session, "i", "mcp__test__image", json!({})).await;
    assert_eq!(code(&image), "ok", "{}", image.text());
    assert_eq!(image.content()[0], ContentBlock::text("a pixel:"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the upstream's calls took {:?}",
        started.elapsed()
    );

    // The stuck thread returns, so that the runtime's end need not wait for it.
    block.store(false, Ordering::SeqCst);
    session.shutdown().await;
    harness.shutdown().await;
    source.shutdown().await;
}
