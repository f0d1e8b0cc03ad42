//! A call waiting for approval reacts to cancellation at once: it ends
//! `ABORTED_BEFORE_DISPATCH`, and the responder's question is dropped (so a terminal prompt
//! is withdrawn instead of swallowing the next answer).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{ApprovalAnswer, ApprovalRequest, ApprovalResponder, HookError, Hooks};
use dsh::guards::PermissionRules;
use dsh::scheduler::{CancelTarget, HarnessBuilder, PipelineConfig, SchedulerConfig, StepRequest};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Never answers; counts the questions it was asked and the ones that were dropped.
#[derive(Default)]
struct Silent {
    asked: AtomicUsize,
    dropped: Arc<AtomicUsize>,
}

struct OnDrop(Arc<AtomicUsize>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl ApprovalResponder for Silent {
    async fn respond(&self, _request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let _dropped = OnDrop(self.dropped.clone());
        std::future::pending::<()>().await;
        Ok(ApprovalAnswer::Approve)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_waiting_for_approval_and_drops_the_question() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.pre_execute(PermissionRules::from_toml(r#"ask = ["ex"]"#).unwrap());
    let approver = Arc::new(Silent::default());
    let builder = HarnessBuilder::new(probe_registry(&probe))
        .hooks(hooks)
        .approval(approver.clone())
        .config(PipelineConfig {
            // Long enough that only the cancel can end the wait within the test.
            approval_timeout: Duration::from_secs(600),
            ..PipelineConfig::default()
        });
    let (harness, session, _log) = open_with(builder, SchedulerConfig::default()).await;
    let step = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .run_step(StepRequest::new(vec![call("a1", "ex", json!({}))]))
                .await
        }
    });
    while approver.asked.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    session.cancel(CancelTarget::Step).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(30), step)
        .await
        .expect("the step answers once cancelled")
        .unwrap()
        .unwrap();
    assert_eq!(code(&outcome.results[0]), "ABORTED_BEFORE_DISPATCH");
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        0,
        "the body never ran"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while approver.dropped.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the question was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    session.shutdown().await;
    harness.shutdown().await;
}
