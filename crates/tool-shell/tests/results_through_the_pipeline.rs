//! The shell's results as the pipeline records them: a timeout is `TOOL_TIMEOUT` carrying the
//! output so far (the tool owns its deadline; the wrapper does not cut it), a cancel is
//! `ABORTED` with the output so far, and the meta says how the command was isolated.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use dsh_core::around::TimeoutLayer;
use dsh_core::{ErrorCode, ToolCall, ToolRegistry};
use dsh_scheduler::{CancelTarget, HarnessBuilder, SchedulerConfig, StepRequest};
use dsh_session::SessionLog;
use dsh_tool_shell::{ShellConfig, ShellTool};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

async fn session() -> (
    tempfile::TempDir,
    dsh_scheduler::Harness,
    dsh_scheduler::Session,
    SessionLog,
) {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(ToolRegistry::new());
    registry
        .register(ShellTool::new(ShellConfig::new(dir.path())).unwrap())
        .unwrap();
    // A short default deadline for other tools must not cut the shell's own.
    let harness = HarnessBuilder::new(registry)
        .timeout(TimeoutLayer::default().with_default_ms(100))
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    (dir, harness, session, log)
}

#[tokio::test]
async fn a_timeout_carries_the_output_so_far_into_the_log() {
    let (_dir, harness, session, log) = session().await;
    let calls = vec![ToolCall::new(
        "t1",
        "shell",
        json!({"command": "echo before-the-deadline; sleep 30", "timeout_ms": 700}),
    )];
    let result = session
        .run_step(StepRequest::new(calls))
        .await
        .unwrap()
        .results
        .remove(0);
    assert_eq!(result.code(), Some(ErrorCode::ToolTimeout));
    assert!(
        result.text().contains("before-the-deadline"),
        "{}",
        result.text()
    );
    assert_eq!(result.meta().unwrap()["processIsolation"], "pid-namespace");
    let events = log.snapshot().await.unwrap();
    let logged = serde_json::to_string(&events.last().unwrap()).unwrap();
    assert!(logged.contains("before-the-deadline"), "{logged}");
    assert!(logged.contains("TOOL_TIMEOUT"));
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_success_outlives_a_short_default_deadline() {
    let (_dir, harness, session, _log) = session().await;
    let calls = vec![ToolCall::new(
        "s1",
        "shell",
        json!({"command": "sleep 0.5; echo slow-ok"}),
    )];
    let result = session
        .run_step(StepRequest::new(calls))
        .await
        .unwrap()
        .results
        .remove(0);
    assert!(!result.is_error(), "{}", result.text());
    assert!(result.text().contains("slow-ok"));
    assert_eq!(result.meta().unwrap()["exitCode"], 0);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_cancel_is_aborted_with_the_output_so_far() {
    let (_dir, harness, session, _log) = session().await;
    let calls = vec![ToolCall::new(
        "k1",
        "shell",
        json!({"command": "echo working-on-it; sleep 60"}),
    )];
    let step = {
        let session = session.clone();
        tokio::spawn(async move { session.run_step(StepRequest::new(calls)).await })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    session.cancel(CancelTarget::Call("k1".into())).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(20), step)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .results
        .remove(0);
    assert_eq!(result.code(), Some(ErrorCode::Aborted));
    assert!(result.text().contains("working-on-it"), "{}", result.text());
    session.shutdown().await;
    harness.shutdown().await;
}
