//! `run_code`'s `present` only formats its report (it says so with
//! `ToolDefinition::user_code_may_block`), so the pipeline calls it inline instead of handing
//! it to the user-code pool: a script still answers, presented, while every user-code thread
//! is stuck in a user's tool, and that tool is still given up on at the deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;
#[path = "../../../tests/support/stuck_present.rs"]
mod stuck_present;

use common::*;
use dsh_core::{ToolCall, ToolRegistry};
use dsh_scheduler::StepRequest;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stuck_present::{Stuck, one_user_code_thread};

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
    let (harness, session) = one_user_code_thread(registry).await;
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
