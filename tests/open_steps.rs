//! Open steps: calls join a running step as they arrive, each placed by the step's rules the
//! moment the scheduler sees it, each answered on its own; `finish` closes the step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    EventBody, HookError, Hooks, PostExecuteContext, PostExecuteHandler, PostExecuteOutcome,
    SessionEvent,
};
use dsh::scheduler::{DeferredContext, SchedulerConfig, SchedulerError, StepRequest};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn kinds(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.body {
            EventBody::ToolCall(c) => format!("call {}", c.call_id),
            EventBody::ToolResult { data, .. } => format!("result {}", data.call_id),
            EventBody::UserMessage(m) => format!("user {}", m.content),
            EventBody::CodeDispatch(_) => "dispatch".into(),
        })
        .collect()
}

/// Every call has exactly one result, in its step, after it.
fn assert_paired(events: &[SessionEvent]) {
    let mut open = std::collections::HashMap::new();
    for e in events {
        match &e.body {
            EventBody::ToolCall(c) => {
                assert!(open.insert(e.seq, (e.step, c.call_id.clone())).is_none());
            }
            EventBody::ToolResult {
                source_event_seqs,
                data,
                ..
            } => {
                let (step, id) = open
                    .remove(&source_event_seqs[0])
                    .expect("a result of a call");
                assert_eq!(step, e.step);
                assert_eq!(id, data.call_id);
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "calls without a result: {open:?}");
}

#[tokio::test]
async fn a_safe_call_pushed_late_starts_at_once_beside_a_running_one() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = session.open_step().unwrap();
    let slow = step
        .push(call("slow", "par", json!({"sleep_ms": 400})))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let quick = step.push(call("quick", "par", json!({}))).unwrap();
    let quick = quick.result().await.unwrap();
    assert_eq!(quick.text(), format!("done\n{FINALIZED}"));
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "the safe call waited for the running one ({:?})",
        started.elapsed()
    );
    // Its result is in the log before the earlier call has ended.
    let events = log.snapshot().await.unwrap();
    assert!(kinds(&events).contains(&"result quick".to_string()));
    assert!(!kinds(&events).contains(&"result slow".to_string()));
    assert_eq!(code(&slow.result().await.unwrap()), "ok");
    let outcome = step.finish().await.unwrap();
    assert_eq!(
        outcome
            .results
            .iter()
            .map(|r| r.call_id().to_string())
            .collect::<Vec<_>>(),
        ["slow", "quick"]
    );
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 2);
    harness.shutdown().await;
}

#[tokio::test]
async fn an_exclusive_call_waits_for_earlier_calls_and_holds_later_ones() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = session.open_step().unwrap();
    let a = step
        .push(call("a", "par", json!({"sleep_ms": 150})))
        .unwrap();
    let x = step.push(call("x", "ex", json!({"sleep_ms": 50}))).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b = step.push(call("b", "par", json!({}))).unwrap();
    let (a, x, b) = (a.result().await, x.result().await, b.result().await);
    assert!(a.is_ok() && x.is_ok() && b.is_ok());
    step.finish().await.unwrap();
    assert!(!probe.exclusive_overlap.load(Ordering::SeqCst));
    let events = kinds(&log.snapshot().await.unwrap());
    let at = |k: &str| events.iter().position(|e| e == k).unwrap();
    // x is recorded (and runs) only after a's result; b only after x's.
    assert!(at("result a") < at("call x"), "{events:?}");
    assert!(at("result x") < at("call b"), "{events:?}");
    harness.shutdown().await;
}

struct Context;

#[async_trait]
impl PostExecuteHandler for Context {
    fn name(&self) -> &str {
        "context"
    }
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        Ok(PostExecuteOutcome::accept().with_context(format!("note on {}", call.call_id)))
    }
}

#[tokio::test]
async fn finish_records_the_deferred_context_after_every_result() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.post_execute(Context);
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let step = session.open_step().unwrap();
    let first = step.push(call("c1", "par", json!({}))).unwrap();
    first.result().await.unwrap();
    // The step is still open: its context waits.
    assert!(
        !kinds(&log.snapshot().await.unwrap())
            .iter()
            .any(|k| k.starts_with("user"))
    );
    step.push(call("c2", "par", json!({"sleep_ms": 30})))
        .unwrap();
    let outcome = step.finish().await.unwrap();
    assert_eq!(outcome.deferred.len(), 2);
    assert_eq!(
        kinds(&log.snapshot().await.unwrap()),
        [
            "call c1",
            "result c1",
            "call c2",
            "result c2",
            "user note on c1",
            "user note on c2"
        ]
    );
    harness.shutdown().await;
}

#[tokio::test]
async fn contexts_in_results_end_their_own_result_and_add_no_message() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.post_execute(Context);
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let step = session
        .open_step_with("main", DeferredContext::InResults)
        .unwrap();
    let first = step.push(call("c1", "par", json!({}))).unwrap();
    let result = first.result().await.unwrap();
    assert_eq!(
        result.text(),
        format!("done\n{FINALIZED}\nnote on c1"),
        "the context is the result's last block"
    );
    let outcome = step.finish().await.unwrap();
    assert!(outcome.deferred.is_empty());
    let events = log.snapshot().await.unwrap();
    assert_eq!(kinds(&events), ["call c1", "result c1"]);
    let EventBody::ToolResult { data, .. } = &events[1].body else {
        panic!("a result")
    };
    assert_eq!(
        dsh::core::content::joined_text(&data.message),
        result.text()
    );
    harness.shutdown().await;
}

#[tokio::test]
async fn a_dropped_handle_leaves_no_call_without_its_result() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = session.open_step().unwrap();
    let running = step
        .push(call("r", "par", json!({"sleep_ms": 100})))
        .unwrap();
    let waiting = step.push(call("w", "ex", json!({}))).unwrap();
    drop(step);
    // The calls run on and are recorded, and the session takes its next step.
    assert_eq!(code(&running.result().await.unwrap()), "ok");
    assert_eq!(code(&waiting.result().await.unwrap()), "ok");
    let next = session
        .run_step(StepRequest::new(vec![call("n", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(next.step, 2);
    let events = log.snapshot().await.unwrap();
    assert_paired(&events);
    assert_eq!(events.len(), 6);
    harness.shutdown().await;
}

#[tokio::test]
async fn cancel_reaches_one_call_the_step_and_later_pushes() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = session.open_step().unwrap();
    let one = step
        .push(call("one", "par", json!({"sleep_ms": 60_000})))
        .unwrap();
    let other = step
        .push(call("other", "par", json!({"sleep_ms": 50})))
        .unwrap();
    while probe.started.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    one.cancel().unwrap();
    assert_eq!(code(&one.result().await.unwrap()), "ABORTED");
    assert_eq!(code(&other.result().await.unwrap()), "ok");
    // A call still waiting for its place is closed before it starts.
    let blocker = step
        .push(call("blocker", "ex", json!({"sleep_ms": 200})))
        .unwrap();
    let queued = step.push(call("queued", "par", json!({}))).unwrap();
    queued.cancel().unwrap();
    assert_eq!(
        code(&queued.result().await.unwrap()),
        "ABORTED_BEFORE_DISPATCH"
    );
    assert_eq!(code(&blocker.result().await.unwrap()), "ok");
    // Cancelling the step stops what runs and closes what is pushed after.
    let long = step
        .push(call("long", "par", json!({"sleep_ms": 60_000})))
        .unwrap();
    while probe.started.load(Ordering::SeqCst) < 4 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    step.cancel().unwrap();
    let late = step.push(call("late", "par", json!({}))).unwrap();
    assert_eq!(code(&long.result().await.unwrap()), "ABORTED");
    assert_eq!(
        code(&late.result().await.unwrap()),
        "ABORTED_BEFORE_DISPATCH"
    );
    let outcome = step.finish().await.unwrap();
    assert_eq!(outcome.results.len(), 6);
    assert_paired(&log.snapshot().await.unwrap());
    harness.shutdown().await;
}

#[tokio::test]
async fn a_step_opened_behind_an_open_one_waits_for_it_to_finish() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let first = session.open_step().unwrap();
    let a = first.push(call("a", "par", json!({}))).unwrap();
    a.result().await.unwrap();
    let second = session.open_step().unwrap();
    let b = second.push(call("b", "par", json!({}))).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        1,
        "b ran in a step not begun"
    );
    let c = first.push(call("c", "par", json!({}))).unwrap();
    c.result().await.unwrap();
    assert_eq!(first.finish().await.unwrap().step, 1);
    b.result().await.unwrap();
    let outcome = second.finish().await.unwrap();
    assert_eq!(outcome.step, 2);
    let events = log.snapshot().await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.step).collect::<Vec<_>>(),
        [1, 1, 1, 1, 2, 2]
    );
    harness.shutdown().await;
}

#[tokio::test]
async fn ids_stay_unique_across_pushes() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = session.open_step().unwrap();
    let a = step.push(call("same", "par", json!({}))).unwrap();
    let b = step.push(call("same", "par", json!({}))).unwrap();
    let c = step.push(call("", "par", json!({}))).unwrap();
    let ids: Vec<String> = [a, b, c]
        .into_iter()
        .map(|p| async move { p.result().await.unwrap().call_id().to_string() })
        .collect::<futures::future::JoinAll<_>>()
        .await;
    assert_eq!(ids[0], "same");
    assert_ne!(ids[1], "same");
    assert_ne!(ids[2], ids[1]);
    let outcome = step.finish().await.unwrap();
    assert_eq!(outcome.renamed.len(), 2);
    assert_eq!(outcome.renamed[0].index, 1);
    assert_eq!(outcome.renamed[1].index, 2);
    harness.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_an_open_step_that_was_never_finished() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let step = session.open_step().unwrap();
    let long = step
        .push(call("long", "par", json!({"sleep_ms": 60_000})))
        .unwrap();
    while probe.started.load(Ordering::SeqCst) < 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let events_before = log.snapshot().await.unwrap();
    let report = tokio::time::timeout(
        Duration::from_secs(20),
        session.shutdown_within(Duration::from_millis(50)),
    )
    .await
    .expect("the shutdown ended");
    assert!(report.cancelled_in_flight);
    assert_eq!(code(&long.result().await.unwrap()), "ABORTED");
    // A call pushed after the shutdown never joins: nothing of it runs or is recorded.
    let refused = step.push(call("after", "par", json!({})));
    match refused {
        Ok(pending) => assert!(matches!(
            pending.result().await,
            Err(SchedulerError::ShutDown | SchedulerError::Unavailable(_))
        )),
        Err(e) => assert!(matches!(e, SchedulerError::Unavailable(_))),
    }
    assert!(step.finish().await.is_err());
    assert_eq!(events_before.len(), 1);
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    harness.shutdown().await;
}
