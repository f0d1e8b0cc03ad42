//! The three-phase scheduler's placement: exclusive calls are barriers, parallel-safe calls
//! share a rolling pool of at most `max_parallel_tool_calls`, in the order of the blocks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    ContentBlock, EventBody, ExecutionMode, Hooks, ToolContext, ToolDefinition, ToolFailure,
    ToolRegistry,
};
use dsh::scheduler::{SchedulerConfig, StepRequest};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A probe (counted as exclusive by the probe's overlap check) whose placement answers are
/// chosen by the test: `mode` for `execution_mode` (`None`: it panics), and it never says
/// whether an input is concurrency-safe (the trait's default, `false`).
struct Placed {
    probe: ProbeTool,
    mode: Option<ExecutionMode>,
}

#[async_trait]
impl ToolDefinition for Placed {
    fn name(&self) -> &str {
        self.probe.name()
    }
    fn description(&self) -> &str {
        self.probe.description()
    }
    fn input_schema(&self) -> Value {
        self.probe.input_schema()
    }
    fn execution_mode(&self) -> ExecutionMode {
        match self.mode {
            Some(mode) => mode,
            None => panic!("execution_mode exploded"),
        }
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.probe.execute(input, ctx).await
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        self.probe.present(value)
    }
}

fn placed_registry(
    probe: &Arc<Probe>,
    name: &str,
    mode: Option<ExecutionMode>,
) -> Arc<ToolRegistry> {
    let registry = probe_registry(probe);
    registry
        .register(Placed {
            probe: ProbeTool::new(name, false, probe),
            mode,
        })
        .unwrap();
    registry
}

#[tokio::test(start_paused = true)]
async fn a_parallel_tool_that_never_says_its_input_is_safe_runs_exclusively() {
    let probe = Arc::new(Probe::default());
    let registry = placed_registry(&probe, "unsure", Some(ExecutionMode::Parallel));
    let (harness, session, _log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let started = tokio::time::Instant::now();
    let out = session
        .run_step(StepRequest::new(vec![
            call("p1", "par", json!({"sleep_ms": 50})),
            call("u1", "unsure", json!({"sleep_ms": 50})),
            call("u2", "unsure", json!({"sleep_ms": 50})),
            call("p2", "par", json!({"sleep_ms": 50})),
        ]))
        .await
        .unwrap();
    assert!(out.results.iter().all(|r| code(r) == "ok"));
    assert!(
        !probe.exclusive_overlap.load(Ordering::SeqCst),
        "an `unsure` call ran beside another"
    );
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 1);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "four barriers in a row"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_execution_mode_makes_the_call_exclusive_and_the_session_goes_on() {
    let probe = Arc::new(Probe::default());
    let registry = placed_registry(&probe, "moody", None);
    let (harness, session, log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("a", "par", json!({"sleep_ms": 50})),
            call("m", "moody", json!({"sleep_ms": 50})),
            call("b", "par", json!({"sleep_ms": 50})),
        ]))
        .await
        .expect("the scheduler survives a panicking execution_mode");
    let codes: Vec<_> = out.results.iter().map(code).collect();
    assert_eq!(codes, ["ok", "ok", "ok"], "the call still runs");
    assert!(!probe.exclusive_overlap.load(Ordering::SeqCst));
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 1, "m ran alone");
    assert_eq!(log.snapshot().await.unwrap().len(), 6);
    let next = session
        .run_step(StepRequest::new(vec![
            call("c", "moody", json!({})),
            call("d", "par", json!({})),
        ]))
        .await
        .unwrap();
    assert!(next.results.iter().all(|r| code(r) == "ok"));
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_pool_rolls_at_its_cap() {
    let probe = Arc::new(Probe::default());
    let config = SchedulerConfig {
        max_parallel_tool_calls: 4,
        ..SchedulerConfig::default()
    };
    let (harness, session, _log) = open(probe_registry(&probe), Hooks::new(), config).await;
    let calls = (0..10)
        .map(|i| call(&format!("c{i}"), "par", json!({"sleep_ms": 100})))
        .collect();
    let started = tokio::time::Instant::now();
    let out = session.run_step(StepRequest::new(calls)).await.unwrap();
    let took = started.elapsed();
    assert!(out.results.iter().all(|r| code(r) == "ok"));
    assert_eq!(
        probe.max_active.load(Ordering::SeqCst),
        4,
        "the pool never exceeds its cap"
    );
    // 10 calls, 4 at a time: three waves of 100 ms.
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(400),
        "{took:?}"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn ten_safe_calls_run_together_by_default() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let calls = (0..10)
        .map(|i| call(&format!("c{i}"), "par", json!({"sleep_ms": 100})))
        .collect();
    let started = tokio::time::Instant::now();
    session.run_step(StepRequest::new(calls)).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(150));
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 10);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_exclusive_call_is_a_barrier_in_block_order() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("p1", "par", json!({"sleep_ms": 50})),
            call("p2", "par", json!({"sleep_ms": 80})),
            call("x1", "ex", json!({"sleep_ms": 30})),
            call("p3", "par", json!({"sleep_ms": 10})),
            call("x2", "ex", json!({"sleep_ms": 10})),
            call("x3", "ex", json!({"sleep_ms": 10})),
            call("p4", "par", json!({"sleep_ms": 10})),
            call("p5", "par", json!({"sleep_ms": 10})),
        ]))
        .await
        .unwrap();
    assert!(
        !probe.exclusive_overlap.load(Ordering::SeqCst),
        "an exclusive call overlapped"
    );
    let ids: Vec<_> = out
        .results
        .iter()
        .map(|r| r.call_id().to_string())
        .collect();
    assert_eq!(
        ids,
        ["p1", "p2", "x1", "p3", "x2", "x3", "p4", "p5"],
        "results in call order"
    );

    // The log shows the barrier: x1's call is recorded after p1's and p2's results, and
    // nothing after it starts before its result.
    let events = log.snapshot().await.unwrap();
    let pos = |ty: &str, id: &str| {
        events
            .iter()
            .position(|e| e.body.type_str() == ty && e.call_id() == Some(id))
            .unwrap()
    };
    assert!(pos("tool/call", "x1") > pos("tool/result", "p1"));
    assert!(pos("tool/call", "x1") > pos("tool/result", "p2"));
    assert!(pos("tool/call", "p3") > pos("tool/result", "x1"));
    assert!(pos("tool/call", "p5") > pos("tool/result", "x3"));
    // Calls are recorded in block order.
    let call_order: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ToolCall(d) => Some(d.call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(call_order, ids);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_concurrency_check_makes_the_call_exclusive() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("a", "par", json!({"sleep_ms": 50})),
            call("b", "par", json!({"sleep_ms": 50, "unsafe": true})),
            call("c", "par", json!({"sleep_ms": 50})),
        ]))
        .await
        .unwrap();
    assert!(
        out.results.iter().all(|r| code(r) == "ok"),
        "the call still runs"
    );
    assert_eq!(
        probe.max_active.load(Ordering::SeqCst),
        1,
        "b ran alone, as a barrier"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn missing_and_repeated_call_ids_get_fresh_ones() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("same", "par", json!({})),
            call("same", "par", json!({})),
            call("", "par", json!({})),
        ]))
        .await
        .unwrap();
    let ids: Vec<_> = out
        .results
        .iter()
        .map(|r| r.call_id().to_string())
        .collect();
    assert_eq!(ids[0], "same");
    assert_ne!(ids[1], "same");
    assert!(!ids[2].is_empty());
    assert_eq!(out.renamed.len(), 2);
    assert_eq!(out.renamed[0].original, "same");
    let events = log.snapshot().await.unwrap();
    assert_eq!(events.len(), 6);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn steps_are_numbered_and_run_one_after_another() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig {
            first_step: 7,
            ..SchedulerConfig::default()
        },
    )
    .await;
    let (a, b) = tokio::join!(
        session.run_step(StepRequest::new(vec![call(
            "a",
            "par",
            json!({"sleep_ms": 20})
        )])),
        session.run_step(StepRequest::new(vec![call("b", "par", json!({}))])),
    );
    let mut steps = [a.unwrap().step, b.unwrap().step];
    steps.sort();
    assert_eq!(steps, [7, 8]);
    let events = log.snapshot().await.unwrap();
    let step_of: Vec<u64> = events.iter().map(|e| e.step).collect();
    let mut sorted = step_of.clone();
    sorted.sort();
    assert_eq!(
        step_of, sorted,
        "a step's events never interleave with the next step's"
    );
    let empty = session.run_step(StepRequest::new(vec![])).await.unwrap();
    assert!(empty.results.is_empty());
    session.shutdown().await;
    harness.shutdown().await;
}
