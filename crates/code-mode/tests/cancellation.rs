//! Cancelling run_code aborts its running sub-calls and interrupts the script, even one
//! spinning on the CPU; the engine's thread ends and the next run_code works.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::{EventBody, Hooks};
use dsh_scheduler::{CancelTarget, SchedulerConfig};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

async fn cancel_while_running(script: &'static str) {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let s = session.clone();
    let step = tokio::spawn(async move { run_code(&s, "c1", script).await });
    let start = Instant::now();
    while probe.started.load(Ordering::SeqCst) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the sub-call never started"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let cancelled_at = Instant::now();
    session.cancel(CancelTarget::Call("c1".into())).unwrap();
    let r = step.await.unwrap();
    assert_eq!(code(&r), "ABORTED", "{}", r.text());
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(2),
        "run_code ended promptly after its cancel"
    );
    let sub_signal = probe.signals.lock().unwrap()[0].clone();
    assert!(sub_signal.is_cancelled(), "the running sub-call was told");
    assert_eq!(
        probe.completed.load(Ordering::SeqCst),
        0,
        "it did not run on"
    );
    engines_gone().await;

    // The call actor's stop drops the run, sub-calls included; the sub-call ledger then
    // records the one in flight as ABORTED (its body had started), before run_code's result.
    let events = log.snapshot().await.unwrap();
    dsh_session::check::check(&events).unwrap();
    let dispatches: Vec<(u64, &dsh_core::event::CodeDispatchData)> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::CodeDispatch(d) => Some((e.seq, d)),
            _ => None,
        })
        .collect();
    assert_eq!(
        dispatches.len(),
        1,
        "exactly the one sub-call in flight is recorded: {dispatches:?}"
    );
    let (dispatch_seq, d) = dispatches[0];
    assert_eq!(d.call_id, "c1.sub1", "{d:?}");
    assert_eq!(d.parent_call_id, "c1", "{d:?}");
    assert_eq!(d.name, "nap", "{d:?}");
    assert_eq!(
        d.error.as_ref().map(|e| e.code.as_str()),
        Some("ABORTED"),
        "{d:?}"
    );
    let parent_result_seq = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ToolResult { data, .. } if data.call_id == "c1" => Some(e.seq),
            _ => None,
        })
        .unwrap();
    assert!(
        dispatch_seq < parent_result_seq,
        "the sub-call's record comes before its parent's result"
    );

    let next = run_code(&session, "c2", "return 1 + 1;").await;
    assert_eq!(returned(&next), json!(2), "the next run_code works");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_aborts_a_script_awaiting_its_sub_call() {
    let _serial = serial().await;
    cancel_while_running(r#"await tools.nap({ ms: 60000 }); return "finished";"#).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_interrupts_a_script_spinning_beside_its_sub_call() {
    let _serial = serial().await;
    cancel_while_running(r#"tools.nap({ ms: 60000 }); while (true) {}"#).await;
}

/// Answers nothing, ever: the scripts of the test below make no sub-call.
struct NoSubCalls;

#[async_trait::async_trait]
impl dsh_core::SubCallDispatcher for NoSubCalls {
    async fn dispatch(
        &self,
        _parent: &dsh_core::ToolContext,
        _name: &str,
        _arguments: serde_json::Value,
    ) -> dsh_core::FrozenResult {
        std::future::pending().await
    }

    fn tool_names(&self) -> Vec<String> {
        Vec::new()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_body_without_a_signal_ends_a_spinning_script() {
    // What a killed call actor does: the body's future is dropped, and no signal fires.
    let _serial = serial().await;
    let tool = run_code_tool(dsh_code_mode::CodeLimits {
        timeout: Duration::from_secs(60),
        ..test_limits()
    });
    let ctx = dsh_core::ToolContext {
        dispatcher: Some(Arc::new(NoSubCalls)),
        ..dsh_core::ToolContext::detached("spin")
    };
    let body = tokio::spawn(async move {
        dsh_core::ToolDefinition::execute(&tool, json!({"code": "while (true) {}"}), ctx).await
    });
    let start = Instant::now();
    while dsh_code_mode::live_engines() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the script never started"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(dsh_code_mode::live_engines(), 1, "the script spins");
    body.abort();
    assert!(body.await.unwrap_err().is_cancelled());
    let dropped_at = Instant::now();
    engines_gone().await;
    assert!(
        dropped_at.elapsed() < Duration::from_secs(2),
        "the script's worker ended soon after its body was dropped, not at the 60 s limit"
    );
}
