//! Cancellation as supervisor signals: one test per variant of SPEC.md's "Cancellation".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    ApprovalAnswer, ApprovalRequest, ApprovalResponder, EventBody, HookError, Hooks, SessionEvent,
};
use dsh::guards::PermissionRules;
use dsh::scheduler::{
    CancelTarget, HarnessBuilder, SchedulerConfig, Session, SiblingPolicy, StepOutcome, StepRequest,
};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;

fn spawn_step(session: &Session, calls: Vec<dsh::core::ToolCall>) -> JoinHandle<StepOutcome> {
    let s = session.clone();
    tokio::spawn(async move { s.run_step(StepRequest::new(calls)).await.unwrap() })
}

async fn until_started(probe: &Probe, n: usize) {
    for _ in 0..10_000 {
        if probe.started.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("bodies never started");
}

/// Every call paired once, in its step, result after call.
fn assert_paired(events: &[SessionEvent]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
        if let EventBody::ToolCall(c) = &e.body {
            let results: Vec<_> = events
                .iter()
                .filter(|r| matches!(&r.body, EventBody::ToolResult { source_event_seqs, .. } if source_event_seqs == &vec![e.seq]))
                .collect();
            assert_eq!(
                results.len(),
                1,
                "call {} has {} results",
                c.call_id,
                results.len()
            );
            assert_eq!(results[0].step, e.step);
            assert!(results[0].seq > e.seq);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_started_body_is_aborted_even_if_it_would_succeed() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = spawn_step(
        &session,
        vec![call(
            "c",
            "par",
            json!({"sleep_ms": 100, "ignore_cancel": true}),
        )],
    );
    until_started(&probe, 1).await;
    session.cancel(CancelTarget::Call("c".into())).unwrap();
    let out = step.await.unwrap();
    assert_eq!(code(&out.results[0]), "ABORTED");
    // Let the abandoned body's time pass: its success must not replace the result.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let events = log.snapshot().await.unwrap();
    assert_eq!(events.len(), 2);
    assert_paired(&events);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_body_that_ignores_its_signal_still_gets_aborted_at_once() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = spawn_step(
        &session,
        vec![
            call(
                "deaf",
                "par",
                json!({"sleep_ms": 3_600_000, "ignore_cancel": true}),
            ),
            call("polite", "par", json!({"sleep_ms": 3_600_000})),
        ],
    );
    until_started(&probe, 2).await;
    let t = tokio::time::Instant::now();
    session.cancel(CancelTarget::Step).unwrap();
    let out = step.await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(50),
        "the step waited {:?}",
        t.elapsed()
    );
    assert_eq!(code(&out.results[0]), "ABORTED");
    assert_eq!(code(&out.results[1]), "ABORTED");
    session.shutdown().await;
    harness.shutdown().await;
}

struct SlowApprover(Arc<AtomicUsize>);

#[async_trait]
impl ApprovalResponder for SlowApprover {
    async fn respond(&self, _req: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(ApprovalAnswer::Approve)
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_cancelled_before_its_body_started_is_aborted_before_dispatch() {
    let probe = Arc::new(Probe::default());
    let asked = Arc::new(AtomicUsize::new(0));
    let mut hooks = Hooks::new();
    hooks.pre_execute(PermissionRules::from_toml(r#"ask = ["ex"]"#).unwrap());
    let builder = HarnessBuilder::new(probe_registry(&probe))
        .hooks(hooks)
        .approval(Arc::new(SlowApprover(asked.clone())));
    let (harness, session, log) = open_with(builder, SchedulerConfig::default()).await;
    let step = spawn_step(&session, vec![call("waits", "ex", json!({}))]);
    while asked.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    session.cancel(CancelTarget::Call("waits".into())).unwrap();
    let out = step.await.unwrap();
    assert_eq!(code(&out.results[0]), "ABORTED_BEFORE_DISPATCH");
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
    // Even after the approver would have said yes, nothing runs.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
    assert_paired(&log.snapshot().await.unwrap());
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn calls_the_step_never_reached_get_a_synthesized_pair() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = spawn_step(
        &session,
        vec![
            call("first", "ex", json!({"sleep_ms": 1_000})),
            call("second", "ex", json!({})),
            call("third", "par", json!({})),
        ],
    );
    until_started(&probe, 1).await;
    session.cancel(CancelTarget::Step).unwrap();
    let out = step.await.unwrap();
    let codes: Vec<_> = out.results.iter().map(code).collect();
    assert_eq!(
        codes,
        [
            "ABORTED",
            "ABORTED_BEFORE_DISPATCH",
            "ABORTED_BEFORE_DISPATCH"
        ]
    );
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    let events = log.snapshot().await.unwrap();
    assert_eq!(events.len(), 6, "three calls, three results");
    assert_paired(&events);
    for r in &out.results {
        assert_ne!(code(r), "DENIED", "an interrupt is never a denial");
        assert_eq!(r.text().matches(FINALIZED).count(), 1);
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_one_call_leaves_its_siblings_alone() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = spawn_step(
        &session,
        vec![
            call("a", "par", json!({"sleep_ms": 100})),
            call("b", "par", json!({"sleep_ms": 100})),
            call("later", "ex", json!({})),
            call("skipped", "ex", json!({})),
        ],
    );
    until_started(&probe, 2).await;
    session.cancel(CancelTarget::Call("a".into())).unwrap();
    session
        .cancel(CancelTarget::Call("skipped".into()))
        .unwrap();
    let out = step.await.unwrap();
    let codes: Vec<_> = out.results.iter().map(code).collect();
    assert_eq!(codes, ["ABORTED", "ok", "ok", "ABORTED_BEFORE_DISPATCH"]);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_session_closes_queued_steps_too() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let first = spawn_step(&session, vec![call("a", "par", json!({"sleep_ms": 1_000}))]);
    until_started(&probe, 1).await;
    let second = spawn_step(
        &session,
        vec![call("b", "par", json!({})), call("c", "ex", json!({}))],
    );
    tokio::time::sleep(Duration::from_millis(1)).await;
    session.cancel(CancelTarget::Session).unwrap();
    let first = first.await.unwrap();
    let second = second.await.unwrap();
    assert_eq!(code(&first.results[0]), "ABORTED");
    assert!(
        second
            .results
            .iter()
            .all(|r| code(r) == "ABORTED_BEFORE_DISPATCH")
    );
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    assert_paired(&log.snapshot().await.unwrap());
    // The session still serves the next step.
    let third = session
        .run_step(StepRequest::new(vec![call("d", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&third.results[0]), "ok");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cancel_siblings_aborts_running_siblings_and_the_rest_of_the_step() {
    let probe = Arc::new(Probe::default());
    let config = SchedulerConfig {
        sibling_policy: SiblingPolicy::CancelSiblings,
        ..SchedulerConfig::default()
    };
    let (harness, session, log) = open(probe_registry(&probe), Hooks::new(), config).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("slow", "par", json!({"sleep_ms": 1_000})),
            call("fails", "par", json!({"sleep_ms": 10, "fail": "boom"})),
            call("after", "ex", json!({})),
        ]))
        .await
        .unwrap();
    let codes: Vec<_> = out.results.iter().map(code).collect();
    assert_eq!(codes, ["ABORTED", "TOOL_ERROR", "ABORTED_BEFORE_DISPATCH"]);
    assert!(
        out.results[0].text().contains("fails"),
        "says which sibling failed: {}",
        out.results[0].text()
    );
    assert_paired(&log.snapshot().await.unwrap());
    session.shutdown().await;
    harness.shutdown().await;

    // With the default policy the same step runs to its end.
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("slow", "par", json!({"sleep_ms": 1_000})),
            call("fails", "par", json!({"sleep_ms": 10, "fail": "boom"})),
            call("after", "ex", json!({})),
        ]))
        .await
        .unwrap();
    let codes: Vec<_> = out.results.iter().map(code).collect();
    assert_eq!(codes, ["ok", "TOOL_ERROR", "ok"]);
    session.shutdown().await;
    harness.shutdown().await;
}
