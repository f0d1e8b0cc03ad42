//! `shutdown_within` keeps its deadline while a tool's `finalize_content` blocks: the step is
//! answered, the file log pairs every `tool/call` with its `tool/result`, and no actor is
//! left. (One test in this binary: the live-actor count is process-wide.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::live::live_actors;
use dsh::core::{ContentBlock, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, SessionStore, StepRequest};
use dsh::session::Durability;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Returns at once; its `finalize_content` sleeps 20 s.
struct SlowFinalize(Arc<AtomicBool>);

#[async_trait]
impl ToolDefinition for SlowFinalize {
    fn name(&self) -> &str {
        "slow_finalize"
    }
    fn description(&self) -> &str {
        "finalizes slowly"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!("done"))
    }
    fn finalize_content(&self, content: Vec<ContentBlock>) -> Vec<ContentBlock> {
        self.0.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(20));
        content
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_within_keeps_its_deadline_while_finalize_content_blocks() {
    quiet_intentional_panics();
    let before = live_actors();
    let dir = tempfile::tempdir().unwrap();
    let entered = Arc::new(AtomicBool::new(false));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(SlowFinalize(entered.clone())).unwrap();
    let harness = HarnessBuilder::new(registry)
        .store(SessionStore::Directory {
            root: dir.path().to_path_buf(),
            durability: Durability::Batch,
        })
        .build()
        .await
        .unwrap();
    let session = harness
        .open_session("s", SchedulerConfig::default(), None)
        .await
        .unwrap()
        .session;
    let s = session.clone();
    let step = tokio::spawn(async move {
        s.run_step(StepRequest::new(vec![call(
            "c1",
            "slow_finalize",
            json!({}),
        )]))
        .await
    });
    while !entered.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let started = Instant::now();
    let report = session.shutdown_within(Duration::from_millis(200)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "shutdown_within(200 ms) took {took:?}"
    );
    assert_eq!(report.log_error, None);
    let outcome = tokio::time::timeout(Duration::from_secs(5), step)
        .await
        .expect("the step was never answered")
        .unwrap()
        .expect("the step failed instead of answering its call");
    assert!(outcome.results[0].is_error());

    // The log on disk pairs the call with its result.
    let text = std::fs::read_to_string(dir.path().join("s.jsonl")).unwrap();
    let types: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types, vec!["tool/call", "tool/result"], "{text}");

    harness.shutdown().await;
    for _ in 0..400 {
        if live_actors() == before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(live_actors(), before, "an actor outlived the harness");
}
