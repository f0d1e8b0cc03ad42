//! User code the pipeline calls synchronously (`finalize_content`, `present`, `tools/result`
//! observers) runs off the async workers under a deadline: a blocking one costs its own call
//! at most the deadline, never the runtime, and the call still gets exactly one result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::user_code::{Blocking, BlocksIn, user_code_harness};
use common::*;
use dsh::core::{EventBody, FrozenResult, Hooks, ResultObserver, ToolRegistry};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh::session::SessionLog;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn registry(finalized: &Arc<AtomicUsize>) -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    for (name, blocks_in) in [
        ("slow_finalize", BlocksIn::Finalize),
        ("slow_present", BlocksIn::Present),
    ] {
        registry
            .register(Blocking::always(name, blocks_in, finalized))
            .unwrap();
    }
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalize_content_that_blocks_ends_its_call_pipeline_error_and_is_called_once() {
    let finalized = Arc::new(AtomicUsize::new(0));
    let (harness, session, log) = open(
        registry(&finalized),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let started = Instant::now();
    let out = session
        .run_step(StepRequest::new(vec![call(
            "f",
            "slow_finalize",
            json!({}),
        )]))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "waited {took:?} on a 20 s finalize_content"
    );
    let result = &out.results[0];
    assert_eq!(code(result), "PIPELINE_ERROR", "{}", result.text());
    assert!(
        result.text().contains("finalize_content"),
        "{}",
        result.text()
    );
    assert_eq!(
        finalized.load(Ordering::SeqCst),
        1,
        "finalize_content is called once per result, also when it times out"
    );
    let events = log.snapshot().await.unwrap();
    let logged = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ToolResult { data, .. } => Some(data.clone()),
            _ => None,
        })
        .expect("the call has its tool/result");
    assert_eq!(logged.error.unwrap().code.as_str(), "PIPELINE_ERROR");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_present_that_blocks_ends_its_call_pipeline_error() {
    let finalized = Arc::new(AtomicUsize::new(0));
    let (harness, session, _log) = open(
        registry(&finalized),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let started = Instant::now();
    let out = session
        .run_step(StepRequest::new(vec![call("p", "slow_present", json!({}))]))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(code(&out.results[0]), "PIPELINE_ERROR");
    assert!(out.results[0].text().contains("present"));
    session.shutdown().await;
    harness.shutdown().await;
}

/// Blocks 20 s on results of calls whose id starts with `block`.
struct BlockingObserver;

impl ResultObserver for BlockingObserver {
    fn name(&self) -> &str {
        "blocking-observer"
    }
    fn observe(&self, result: &FrozenResult) {
        if result.call_id().starts_with("block") {
            std::thread::sleep(Duration::from_secs(20));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_observers_stall_neither_other_sessions_nor_timers() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.observe(BlockingObserver);
    quiet_intentional_panics();
    let harness = HarnessBuilder::new(probe_registry(&probe))
        .hooks(hooks)
        .config(quick_config())
        .build()
        .await
        .unwrap();
    let mut sessions = Vec::new();
    for _ in 0..5 {
        sessions.push(
            harness
                .open(
                    SessionLog::memory().await.unwrap(),
                    SchedulerConfig::default(),
                    None,
                )
                .await
                .unwrap(),
        );
    }
    // Twice as many blocked observers as the runtime has workers.
    let started = Instant::now();
    let blocked: Vec<_> = sessions[..4]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.clone();
            tokio::spawn(async move {
                let out = s
                    .run_step(StepRequest::new(vec![call(
                        &format!("block{i}"),
                        "par",
                        json!({}),
                    )]))
                    .await;
                (out, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let quick_started = Instant::now();
    let timer = tokio::time::sleep(Duration::from_millis(10));
    let quick = sessions[4].run_step(StepRequest::new(vec![call("quick", "par", json!({}))]));
    let (_, quick) = tokio::join!(timer, quick);
    let took = quick_started.elapsed();
    assert_eq!(code(&quick.unwrap().results[0]), "ok");
    assert!(
        took < Duration::from_secs(5),
        "another session waited {took:?}"
    );

    for b in blocked {
        let (out, answered_after) = b.await.unwrap();
        assert!(
            answered_after < Duration::from_secs(15),
            "a blocked observer held its call {answered_after:?}"
        );
        // An observer only observes: giving up on it leaves the result as it was.
        assert_eq!(code(&out.unwrap().results[0]), "ok");
    }
    for s in &sessions {
        s.shutdown().await;
    }
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_user_code_thread_is_stuck_the_next_call_is_told_at_once() {
    let finalized = Arc::new(AtomicUsize::new(0));
    quiet_intentional_panics();
    let (harness, session) = user_code_harness(registry(&finalized), Hooks::new(), Some(1)).await;
    let first = session
        .run_step(StepRequest::new(vec![call(
            "f1",
            "slow_finalize",
            json!({}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&first.results[0]), "PIPELINE_ERROR");
    // Its one thread is stuck for 20 s: the next call does not wait for it.
    let started = Instant::now();
    let second = session
        .run_step(StepRequest::new(vec![call(
            "f2",
            "slow_finalize",
            json!({}),
        )]))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let text = second.results[0].text();
    assert_eq!(code(&second.results[0]), "PIPELINE_ERROR", "{text}");
    assert!(text.contains("stuck"), "{text}");
    assert!(
        text.contains("finalize_content of `slow_finalize`"),
        "{text}"
    );
    session.shutdown().await;
    harness.shutdown().await;
}
