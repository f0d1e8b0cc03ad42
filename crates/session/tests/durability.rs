//! The durability setting: `always` syncs each append, `batch` shares one sync among the
//! appends that arrive together, `none` never syncs; under `always` and `batch` nothing is
//! acknowledged before it is durable, so a `tool/call` is durable before its tool's body
//! starts (write-ahead).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh_core::tool::ExecutionMode;
use dsh_core::{ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh_session::{Durability, FileBackend, SessionLog, WriterConfig};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};

async fn recorded_log(path: &Path, durability: Durability) -> (SessionLog, Arc<Mutex<Record>>) {
    let (file, rec) = FileBackend::open(path).unwrap();
    let record = Arc::new(Mutex::new(Record::default()));
    let backend = Recording {
        inner: Box::new(file),
        record: record.clone(),
    };
    let config = WriterConfig {
        durability,
        next_seq: rec.next_seq,
    };
    let log = SessionLog::spawn(Box::new(backend), config, None)
        .await
        .unwrap();
    (log, record)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_are_durable_under_always_and_batch() {
    for durability in [Durability::Always, Durability::Batch] {
        let dir = tempfile::tempdir().unwrap();
        let (log, record) = recorded_log(&dir.path().join("log.jsonl"), durability).await;
        let tasks: Vec<_> = (0..6)
            .map(|t| {
                let log = log.clone();
                let record = record.clone();
                tokio::spawn(async move {
                    for i in 0..10 {
                        let seq = log
                            .append(1, user_body(&format!("{t}.{i}"), "c"))
                            .await
                            .unwrap();
                        assert!(
                            record.lock().unwrap().is_durable(seq),
                            "{durability:?}: seq {seq} acknowledged before it was synced"
                        );
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        log.close().await.unwrap();
        let r = record.lock().unwrap();
        assert!(r.commits.iter().all(|(_, sync)| *sync), "{durability:?}");
        if durability == Durability::Always {
            assert!(
                r.commits.iter().all(|(n, _)| *n == 1),
                "always syncs each append alone"
            );
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn batch_shares_one_sync_among_appends_that_arrive_together() {
    let dir = tempfile::tempdir().unwrap();
    let (log, record) = recorded_log(&dir.path().join("log.jsonl"), Durability::Batch).await;
    let pending: Vec<_> = (0..32)
        .map(|i| log.send(1, user_body(&i.to_string(), "c")))
        .collect();
    for p in pending {
        p.await.unwrap();
    }
    assert_eq!(record.lock().unwrap().commits, vec![(32, true)]);
    log.close().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn none_writes_without_syncing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let (log, record) = recorded_log(&path, Durability::None).await;
    for i in 0..5 {
        log.append(1, user_body(&i.to_string(), "c")).await.unwrap();
    }
    // Acknowledged means handed to the OS: another reader sees it at once.
    assert_eq!(dsh_session::replay::read_log(&path).unwrap().len(), 5);
    log.close().await.unwrap();
    let r = record.lock().unwrap();
    assert!(r.commits.iter().all(|(_, sync)| !sync));
    assert!(r.durable.is_empty());
}

/// Reports whether its own `tool/call` was already durable when its body started.
struct SeesItsCall {
    record: Arc<Mutex<Record>>,
}

#[async_trait]
impl ToolDefinition for SeesItsCall {
    fn name(&self) -> &str {
        "sees_its_call"
    }
    fn description(&self) -> &str {
        "Answers whether its tool/call was durable when it started."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    async fn execute(&self, _input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!(
            self.record.lock().unwrap().durable_call(&ctx.call_id)
        ))
    }
}

async fn durable_at_body_start(durability: Durability) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let (log, record) = recorded_log(&dir.path().join("log.jsonl"), durability).await;
    let registry = Arc::new(ToolRegistry::new());
    registry.register(SeesItsCall { record }).unwrap();
    let harness = HarnessBuilder::new(registry).build().await.unwrap();
    let session = harness
        .open(log, SchedulerConfig::default(), None)
        .await
        .unwrap();
    let calls = (0..6)
        .map(|i| ToolCall::new(format!("c{i}"), "sees_its_call", json!({})))
        .collect();
    let outcome = session.run_step(StepRequest::new(calls)).await.unwrap();
    session.shutdown().await;
    harness.shutdown().await;
    outcome.results.iter().map(|r| r.text()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_durable_before_its_body_starts() {
    for durability in [Durability::Always, Durability::Batch] {
        let seen = durable_at_body_start(durability).await;
        assert_eq!(seen, vec!["true"; 6], "{durability:?}");
    }
    // The probe can tell: without syncing, the call is never durable.
    assert_eq!(
        durable_at_body_start(Durability::None).await,
        vec!["false"; 6]
    );
}
