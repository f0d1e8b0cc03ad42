//! An MCP tool's `present` is dsh's own code that never blocks (it says so with
//! `ToolDefinition::user_code_may_block`), so the pipeline calls it inline instead of handing
//! it to the user-code pool: an upstream server's tools still answer, with their own
//! presentation, while every user-code thread is stuck in a user's tool. That user's tool,
//! which does not say its code never blocks, is still given up on at the user-code deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use async_trait::async_trait;
use common::{code, quick, servers};
use dsh_core::{
    ContentBlock, FrozenResult, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh_mcp::McpToolSource;
use dsh_scheduler::{HarnessBuilder, PipelineConfig, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the user-code pool waits for a `present`.
const DEADLINE: Duration = Duration::from_millis(300);

/// A user's tool whose own `present`, once `block` is set, blocks until `block` is unset
/// again (20 s at most), and says nothing of whether it may block.
struct Stuck {
    block: Arc<AtomicBool>,
}

#[async_trait]
impl ToolDefinition for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }
    fn description(&self) -> &str {
        "blocks in its own present"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!("stuck value"))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let started = Instant::now();
        while self.block.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(10));
        }
        vec![ContentBlock::text(value.to_string())]
    }
}

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
    // One user-code thread, so that one stuck `present` holds all of them.
    let harness = HarnessBuilder::new(registry.clone())
        .config(PipelineConfig {
            user_code_threads: 1,
            user_code_deadline: DEADLINE,
            ..PipelineConfig::default()
        })
        .build()
        .await
        .unwrap();
    let session = harness
        .open(
            SessionLog::memory().await.unwrap(),
            SchedulerConfig::default(),
            None,
        )
        .await
        .unwrap();
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
