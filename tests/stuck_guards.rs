//! Guards that never return: each evaluation is denied after its timeout, and once the guard
//! set's own threads are all stuck, later calls are denied at once ("guard set overloaded",
//! naming the stuck guard) instead of hanging; tokio's blocking pool, which the rest of the
//! process needs, is never taken with them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh::guards::{FnGuard, GuardCall, GuardSet, GuardVerdict};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh::session::SessionLog;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Reads `path` on tokio's blocking pool, as the file tools do.
struct BlockingRead;

#[async_trait]
impl ToolDefinition for BlockingRead {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "reads on the blocking pool"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        let path = input["path"].as_str().unwrap_or_default().to_string();
        tokio::task::spawn_blocking(move || json!(format!("contents of {path}")))
            .await
            .map_err(|e| ToolFailure::new(e.to_string()))
    }
}

fn registry() -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(BlockingRead).unwrap();
    registry
}

#[test]
fn stuck_guards_fill_only_the_guard_sets_own_threads() {
    quiet_intentional_panics();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Never sent: the guard waits until the test ends and drops it.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        let guards = GuardSet::spawn(None)
            .await
            .unwrap()
            .with_evaluation_timeout(Duration::from_millis(100));
        let _owner = guards
            .register(FnGuard::new("stuck", move |c: &GuardCall| {
                if c.arguments["path"] == "slow" {
                    let _ = held.lock().unwrap_or_else(|e| e.into_inner()).recv();
                }
                GuardVerdict::Abstain
            }))
            .await
            .unwrap();
        let guarded = HarnessBuilder::new(registry())
            .guards(guards.clone())
            .build()
            .await
            .unwrap();
        let session = guarded
            .open(
                SessionLog::memory().await.unwrap(),
                SchedulerConfig::default(),
                None,
            )
            .await
            .unwrap();
        for i in 0..24 {
            let out = tokio::time::timeout(
                Duration::from_secs(10),
                session.run_step(StepRequest::new(vec![call(
                    &format!("slow{i}"),
                    "read_file",
                    json!({"path": "slow"}),
                )])),
            )
            .await
            .expect("a stuck guard left its call without an answer")
            .unwrap();
            assert_eq!(code(&out.results[0]), "DENIED");
        }

        // The guard set's threads are all stuck: a call is denied at once, and told why.
        let started = Instant::now();
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            session.run_step(StepRequest::new(vec![call(
                "fine",
                "read_file",
                json!({"path": "a.txt"}),
            )])),
        )
        .await
        .expect("the call hung")
        .unwrap();
        let result = &out.results[0];
        assert_eq!(code(result), "DENIED");
        assert!(
            result.text().contains("guard set overloaded"),
            "{}",
            result.text()
        );
        assert!(result.text().contains("`stuck`"), "{}", result.text());
        assert!(started.elapsed() < Duration::from_secs(5));

        // A session without guards still reads: tokio's blocking pool is free.
        let free = HarnessBuilder::new(registry()).build().await.unwrap();
        let other = free
            .open(
                SessionLog::memory().await.unwrap(),
                SchedulerConfig::default(),
                None,
            )
            .await
            .unwrap();
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            other.run_step(StepRequest::new(vec![call(
                "r",
                "read_file",
                json!({"path": "a.txt"}),
            )])),
        )
        .await
        .expect("spawn_blocking hung: the stuck guards took the runtime's blocking pool")
        .unwrap();
        assert_eq!(code(&out.results[0]), "ok");

        drop(release);
        other.shutdown().await;
        free.shutdown().await;
        session.shutdown().await;
        guarded.shutdown().await;
        guards.shutdown().await;
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}
