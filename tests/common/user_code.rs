//! Tools whose synchronous methods block, and a harness whose user-code pool is small and
//! quick, shared by the tests of user code the pipeline calls synchronously
//! (`slow_user_code`, `user_code_inline`).

use async_trait::async_trait;
use dsh::core::{ContentBlock, Hooks, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh::scheduler::{Harness, HarnessBuilder, PipelineConfig, SchedulerConfig, Session};
use dsh::session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// How long a [`Blocking`] tool blocks: far past every deadline the tests set.
pub const BLOCK_FOR: Duration = Duration::from_secs(20);

/// Keeps every one of dsh's defaults; its value is `"plain value"`.
pub struct Plain;

#[async_trait]
impl ToolDefinition for Plain {
    fn name(&self) -> &str {
        "plain"
    }
    fn description(&self) -> &str {
        "keeps dsh's defaults"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!("plain value"))
    }
}

/// Where a [`Blocking`] tool blocks.
#[derive(Clone, Copy, Debug)]
pub enum BlocksIn {
    /// In its own `finalize_content`.
    Finalize,
    /// In its own `present`.
    Present,
}

/// A tool with its own `present` and `finalize_content` (so neither is dsh's default); the
/// one named by `blocks_in` blocks for [`BLOCK_FOR`] while `block` is set. Counts its
/// `finalize_content` calls in `finalized`.
pub struct Blocking {
    pub name: &'static str,
    pub blocks_in: BlocksIn,
    pub block: Arc<AtomicBool>,
    pub finalized: Arc<AtomicUsize>,
}

impl Blocking {
    /// A tool named `name` that blocks in `blocks_in` from the start.
    pub fn always(name: &'static str, blocks_in: BlocksIn, finalized: &Arc<AtomicUsize>) -> Self {
        Blocking {
            name,
            blocks_in,
            block: Arc::new(AtomicBool::new(true)),
            finalized: finalized.clone(),
        }
    }

    /// A tool named `name` that blocks in `blocks_in` once `block` is set.
    pub fn once_set(name: &'static str, blocks_in: BlocksIn, block: &Arc<AtomicBool>) -> Self {
        Blocking {
            name,
            blocks_in,
            block: block.clone(),
            finalized: Arc::default(),
        }
    }

    fn blocks_in(&self, here: BlocksIn) -> bool {
        std::mem::discriminant(&self.blocks_in) == std::mem::discriminant(&here)
            && self.block.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ToolDefinition for Blocking {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "blocks in its synchronous parts"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!("value"))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        if self.blocks_in(BlocksIn::Present) {
            std::thread::sleep(BLOCK_FOR);
        }
        vec![ContentBlock::text(value.to_string())]
    }
    fn finalize_content(&self, content: Vec<ContentBlock>) -> Vec<ContentBlock> {
        self.finalized.fetch_add(1, Ordering::SeqCst);
        if self.blocks_in(BlocksIn::Finalize) {
            std::thread::sleep(BLOCK_FOR);
        }
        content
    }
}

/// A harness over `registry` and `hooks` whose user code may hold at most `threads` threads
/// (`None`: the default) and gets 300 ms, with one session on an in-memory log.
pub async fn user_code_harness(
    registry: Arc<ToolRegistry>,
    hooks: Hooks,
    threads: Option<usize>,
) -> (Harness, Session) {
    let defaults = PipelineConfig::default();
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .config(PipelineConfig {
            user_code_threads: threads.unwrap_or(defaults.user_code_threads),
            user_code_deadline: Duration::from_millis(300),
            ..super::quick_config()
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
