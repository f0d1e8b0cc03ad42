//! `run_code`'s `present` only formats its report (it says so with
//! `ToolDefinition::user_code_may_block`), so the pipeline calls it inline instead of handing
//! it to the user-code pool: a script still answers, presented, while every user-code thread
//! is stuck in a user's tool, and that tool is still given up on at the deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh_core::{ContentBlock, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh_scheduler::{HarnessBuilder, PipelineConfig, SchedulerConfig, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_answers_while_every_user_code_thread_is_stuck() {
    let _serial = serial().await;
    let registry = Arc::new(ToolRegistry::new());
    registry.register(run_code_tool(test_limits())).unwrap();
    let block = Arc::new(AtomicBool::new(true));
    registry
        .register(Stuck {
            block: block.clone(),
        })
        .unwrap();
    // One user-code thread, so that one stuck `present` holds all of them.
    let harness = HarnessBuilder::new(registry)
        .config(PipelineConfig {
            user_code_threads: 1,
            user_code_deadline: Duration::from_millis(300),
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
    // The user's tool is given up on at the deadline, and its thread stays stuck.
    let started = Instant::now();
    let stuck = session
        .run_step(StepRequest::new(vec![ToolCall::new(
            "s",
            "stuck",
            json!({}),
        )]))
        .await
        .unwrap()
        .results
        .remove(0);
    assert_eq!(code(&stuck), "PIPELINE_ERROR", "{}", stuck.text());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited {:?} on a present stuck for 20 s",
        started.elapsed()
    );
    // `run_code` needs no user-code thread to present its answer.
    let ran = run_code(&session, "r", "return 6 * 7;").await;
    assert_eq!(code(&ran), "ok", "{}", ran.text());
    assert_eq!(returned(&ran), json!(42));
    assert!(ran.text().starts_with("returned: 42"), "{}", ran.text());
    block.store(false, Ordering::SeqCst);
    session.shutdown().await;
    harness.shutdown().await;
}
