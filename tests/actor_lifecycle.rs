//! Nothing stops an actor by itself in ractor: every call actor must stop itself, and every
//! session actor must go at shutdown. After 100,000 calls the count of live actors is back
//! where it started. (One test in this binary: the count is process-wide.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh::core::Hooks;
use dsh::core::live::live_actors;
use dsh::scheduler::{CancelTarget, SchedulerConfig, StepRequest};
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_actors_return_to_their_starting_count_after_100k_calls() {
    let before_harness = live_actors();
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let baseline = live_actors();
    assert!(
        baseline >= before_harness + 4,
        "guard set (2), writer, scheduler are counted"
    );

    let mut calls_done = 0usize;
    let mut step_no = 0usize;
    while calls_done < 100_000 {
        step_no += 1;
        let calls = (0..10)
            .map(|i| {
                let args = match (step_no + i) % 25 {
                    0 => json!({"fail": "x"}),
                    1 => json!({"panic": true}),
                    2 => json!({"bad_output": true}),
                    _ => json!({}),
                };
                let tool = if i == 9 { "ex" } else { "par" };
                call(&format!("c{i}"), tool, args)
            })
            .collect();
        let out = session.run_step(StepRequest::new(calls)).await.unwrap();
        assert_eq!(out.results.len(), 10);
        calls_done += 10;
        if step_no.is_multiple_of(1000) {
            // Cancelled steps must not leak actors either.
            let started = probe.started.load(std::sync::atomic::Ordering::SeqCst);
            let s = session.clone();
            let step = tokio::spawn(async move {
                s.run_step(StepRequest::new(vec![call(
                    "slow",
                    "par",
                    json!({"sleep_ms": 60_000}),
                )]))
                .await
                .unwrap()
            });
            let mut waited = 0;
            while probe.started.load(std::sync::atomic::Ordering::SeqCst) == started {
                waited += 1;
                assert!(waited < 10_000, "the slow call never started");
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            session.cancel(CancelTarget::Step).unwrap();
            let out = step.await.unwrap();
            assert!(out.results[0].is_error());
        }
    }
    // Call actors stop themselves right after answering; an actor's state (which holds the
    // count) is dropped a moment after it terminates, so give the last ones that moment.
    settle(baseline).await;
    assert_eq!(live_actors(), baseline, "call actors leaked");
    session.shutdown().await;
    harness.shutdown().await;
    settle(before_harness).await;
    assert_eq!(
        live_actors(),
        before_harness,
        "session actors outlived shutdown"
    );
}

async fn settle(expected: i64) {
    for _ in 0..400 {
        if live_actors() == expected {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
