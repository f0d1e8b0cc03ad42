//! A user's tool whose `present` blocks, and a harness with one user-code thread, for the
//! crates whose own tools say their code never blocks (`dsh-mcp`'s and `dsh-code-mode`'s
//! tests include this file by path): with that one thread stuck, their tools must still answer.
#![allow(dead_code, clippy::unwrap_used)]

use async_trait::async_trait;
use dsh_core::{ContentBlock, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh_scheduler::{Harness, HarnessBuilder, PipelineConfig, SchedulerConfig, Session};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the user-code pool waits for a `present`.
pub const DEADLINE: Duration = Duration::from_millis(300);

/// A user's tool named `stuck` whose own `present`, while `block` is set, blocks until it is
/// unset again (20 s at most), and which says nothing of whether it may block.
pub struct Stuck {
    pub block: Arc<AtomicBool>,
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

/// A harness over `registry` with one user-code thread (so that one stuck `present` holds all
/// of them) and a [`DEADLINE`], and one session on an in-memory log.
pub async fn one_user_code_thread(registry: Arc<ToolRegistry>) -> (Harness, Session) {
    let harness = HarnessBuilder::new(registry)
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
    (harness, session)
}
