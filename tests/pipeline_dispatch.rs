//! `tools/execute`: the shipped around-wrappers (timeout, retry, metrics), signal fusion, and
//! failures of the body and of wrappers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::around::{
    Around, DispatchOutcome, DispatchRequest, MetricsLayer, Next, RetryLayer, TimeoutLayer,
};
use dsh::core::{Hooks, RetryPolicy, Signal, ToolRegistry};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn registry_with(probe: &Arc<Probe>, tweak: impl Fn(&mut ProbeTool)) -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    let mut t = ProbeTool::new("slow", true, probe);
    tweak(&mut t);
    registry.register(t).unwrap();
    registry
}

#[tokio::test(start_paused = true)]
async fn timeout_reads_timeout_ms_and_answers_tool_timeout() {
    let probe = Arc::new(Probe::default());
    let registry = registry_with(&probe, |t| t.timeout_ms = Some(50));
    let builder = HarnessBuilder::new(registry)
        .timeout(TimeoutLayer::default())
        .config(quick_config());
    let (harness, session, _log) = open_with(builder, SchedulerConfig::default()).await;
    let started = tokio::time::Instant::now();
    let out = session
        .run_step(StepRequest::new(vec![
            call("listens", "slow", json!({"sleep_ms": 10_000})),
            call(
                "ignores",
                "slow",
                json!({"sleep_ms": 10_000, "ignore_cancel": true}),
            ),
            call("fast", "slow", json!({"sleep_ms": 10})),
        ]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "TOOL_TIMEOUT");
    assert_eq!(
        code(&out.results[1]),
        "TOOL_TIMEOUT",
        "a body that ignores its signal still times out"
    );
    assert!(
        out.results[1].text().contains("50 ms"),
        "{}",
        out.results[1].text()
    );
    assert_eq!(code(&out.results[2]), "ok");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the pipeline did not wait for the body"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_default_timeout_applies_to_tools_without_their_own() {
    let probe = Arc::new(Probe::default());
    let registry = registry_with(&probe, |_| {});
    let builder =
        HarnessBuilder::new(registry).timeout(TimeoutLayer::default().with_default_ms(100));
    let (harness, session, _log) = open_with(builder, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![call(
            "c",
            "slow",
            json!({"sleep_ms": 5_000}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "TOOL_TIMEOUT");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn retry_is_opt_in_bounded_and_only_for_retryable_failures() {
    let probe = Arc::new(Probe::default());
    let registry = Arc::new(ToolRegistry::new());
    let mut retrying = ProbeTool::new("flaky", true, &probe);
    retrying.retry = Some(RetryPolicy {
        max_attempts: 3,
        backoff: Duration::from_millis(10),
    });
    registry.register(retrying).unwrap();
    registry
        .register(ProbeTool::new("plain", true, &probe))
        .unwrap();
    let mut hooks = Hooks::new();
    hooks.around(RetryLayer);
    let (harness, session, _log) = open(registry, hooks, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call(
                "recovers",
                "flaky",
                json!({"fail": "blip", "retryable": true, "fail_times": 2}),
            ),
            call(
                "gives-up",
                "flaky",
                json!({"fail": "down", "retryable": true}),
            ),
            call(
                "fatal",
                "flaky",
                json!({"fail": "bad input", "retryable": false}),
            ),
            call(
                "no-policy",
                "plain",
                json!({"fail": "blip", "retryable": true, "fail_times": 1}),
            ),
        ]))
        .await
        .unwrap();
    let attempts = probe.attempts.lock().unwrap().clone();
    assert_eq!(code(&out.results[0]), "ok");
    assert!(out.results[0].text().starts_with("done"));
    assert_eq!(attempts["recovers"], 3);
    assert_eq!(code(&out.results[1]), "TOOL_ERROR");
    assert_eq!(attempts["gives-up"], 3, "bounded by max_attempts");
    assert_eq!(attempts["fatal"], 1, "not retryable");
    assert_eq!(attempts["no-policy"], 1, "retry is opt-in per tool");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn metrics_count_calls_and_errors_per_tool() {
    let probe = Arc::new(Probe::default());
    let metrics = MetricsLayer::default();
    let mut hooks = Hooks::new();
    hooks.around(metrics.clone());
    let (harness, session, _log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    session
        .run_step(StepRequest::new(vec![
            call("a", "par", json!({})),
            call("b", "par", json!({"fail": "x"})),
            call("c", "ex", json!({})),
        ]))
        .await
        .unwrap();
    let snap = metrics.snapshot();
    assert_eq!(snap.len(), 2);
    assert_eq!(snap[0].0, "ex");
    assert_eq!((snap[0].1.calls, snap[0].1.errors), (1, 0));
    assert_eq!(snap[1].0, "par");
    assert_eq!((snap[1].1.calls, snap[1].1.errors), (2, 1));
    session.shutdown().await;
    harness.shutdown().await;
}

/// A wrapper that tries to shield the body by handing it a signal that never fires.
struct Shield;

#[async_trait]
impl Around for Shield {
    fn name(&self) -> &str {
        "shield"
    }
    async fn around(&self, mut req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        req.signal = Signal::never();
        next.run(req).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_wrapper_cannot_shield_the_body_from_the_callers_cancel() {
    let probe = Arc::new(Probe::default());
    let registry = registry_with(&probe, |_| {});
    let mut hooks = Hooks::new();
    hooks.around(Shield);
    let (harness, session, _log) = open(registry, hooks, SchedulerConfig::default()).await;
    let s2 = session.clone();
    let run = tokio::spawn(async move {
        s2.run_step(StepRequest::new(vec![call(
            "c",
            "slow",
            json!({"sleep_ms": 60_000}),
        )]))
        .await
    });
    while probe.started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    session
        .cancel(dsh::scheduler::CancelTarget::Call("c".into()))
        .unwrap();
    let out = run.await.unwrap().unwrap();
    assert_eq!(code(&out.results[0]), "ABORTED");
    // The signal the body was handed fired with the caller's cancel, despite the shield.
    let handed = probe.signals.lock().unwrap()["c"].clone();
    assert!(
        handed.is_cancelled(),
        "the wrapper's never-cancelled signal shielded the body"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

struct Exploding;

#[async_trait]
impl Around for Exploding {
    fn name(&self) -> &str {
        "exploding"
    }
    async fn around(&self, _req: DispatchRequest, _next: Next<'_>) -> DispatchOutcome {
        panic!("wrapper exploded")
    }
}

#[tokio::test]
async fn a_panicking_wrapper_is_a_pipeline_error_and_a_panicking_body_a_tool_error() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.around(Exploding);
    let (harness, session, _log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![call("c", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "PIPELINE_ERROR");
    assert!(out.results[0].text().contains("wrapper exploded"));
    session.shutdown().await;
    harness.shutdown().await;

    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("p", "par", json!({"panic": true})),
            call("next", "par", json!({})),
        ]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "TOOL_ERROR");
    assert!(out.results[0].text().contains("panicked on purpose"));
    assert_eq!(
        code(&out.results[1]),
        "ok",
        "a panicking body harms nobody else"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn body_errors_and_output_schema_violations_get_their_codes() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("e", "par", json!({"fail": "disk full"})),
            call("o", "par", json!({"bad_output": true})),
        ]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "TOOL_ERROR");
    assert_eq!(out.results[0].error_info().unwrap().message, "disk full");
    assert_eq!(code(&out.results[1]), "TOOL_OUTPUT_ERROR");
    assert!(
        out.results[1].text().contains("shown"),
        "names what is missing: {}",
        out.results[1].text()
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_plain_harness_applies_a_definitions_timeout_ms_and_can_opt_out() {
    quiet_intentional_panics();
    let probe = Arc::new(Probe::default());
    // No hooks at all: the harness installs the timeout wrapper itself.
    let harness = HarnessBuilder::new(registry_with(&probe, |t| t.timeout_ms = Some(50)))
        .build()
        .await
        .unwrap();
    let session = harness
        .open(
            dsh::session::SessionLog::memory().await.unwrap(),
            SchedulerConfig::default(),
            None,
        )
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let out = session
        .run_step(StepRequest::new(vec![
            call("listens", "slow", json!({"sleep_ms": 10_000})),
            call(
                "ignores",
                "slow",
                json!({"sleep_ms": 10_000, "ignore_cancel": true}),
            ),
            call("fast", "slow", json!({"sleep_ms": 10})),
        ]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "TOOL_TIMEOUT");
    assert_eq!(code(&out.results[1]), "TOOL_TIMEOUT");
    assert!(
        out.results[1].text().contains("50 ms"),
        "{}",
        out.results[1].text()
    );
    assert_eq!(code(&out.results[2]), "ok");
    assert!(started.elapsed() < Duration::from_secs(1));
    session.shutdown().await;
    harness.shutdown().await;

    // Opted out, the same definition runs as long as its body takes.
    let harness = HarnessBuilder::new(registry_with(&probe, |t| t.timeout_ms = Some(50)))
        .without_timeout()
        .build()
        .await
        .unwrap();
    let session = harness
        .open(
            dsh::session::SessionLog::memory().await.unwrap(),
            SchedulerConfig::default(),
            None,
        )
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let out = session
        .run_step(StepRequest::new(vec![call(
            "long",
            "slow",
            json!({"sleep_ms": 300}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "ok", "{}", out.results[0].text());
    assert!(started.elapsed() >= Duration::from_millis(300));
    session.shutdown().await;
    harness.shutdown().await;
}

/// Answers some calls itself, by call id, and passes the others on.
struct Gatekeeper;

#[async_trait]
impl Around for Gatekeeper {
    fn name(&self) -> &str {
        "gatekeeper"
    }
    async fn around(&self, req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        match req.call_id.as_str() {
            // A cache that answers without the body, with a value that breaks the schema ...
            "cached-bad" => Ok(json!({"nope": true})),
            // ... and one whose value keeps it.
            "cached-good" => Ok(json!({"shown": "from the cache"})),
            // A failure of the wrapper's own, with the code bodies use.
            "quota" => Err(dsh::core::ToolFailure::new("quota exceeded")),
            _ => next.run(req).await,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_chains_answer_is_checked_and_a_wrappers_own_failure_is_a_pipeline_error() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.around(Gatekeeper);
    let builder = HarnessBuilder::new(registry_with(&probe, |t| t.timeout_ms = Some(50)))
        .hooks(hooks)
        .config(quick_config());
    let (harness, session, _log) = open_with(builder, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("cached-bad", "slow", json!({})),
            call("cached-good", "slow", json!({})),
            call("quota", "slow", json!({})),
            call("body-fails", "slow", json!({"fail": "disk full"})),
            call("body-breaks-schema", "slow", json!({"bad_output": true})),
            call("times-out", "slow", json!({"sleep_ms": 10_000})),
        ]))
        .await
        .unwrap();
    let r = &out.results;
    assert_eq!(
        code(&r[0]),
        "TOOL_OUTPUT_ERROR",
        "a wrapper's value is checked too: {}",
        r[0].text()
    );
    assert!(
        r[0].text().contains("without running the tool"),
        "{}",
        r[0].text()
    );
    assert_eq!(code(&r[1]), "ok");
    assert!(r[1].text().starts_with("from the cache"), "{}", r[1].text());
    assert_eq!(code(&r[2]), "PIPELINE_ERROR", "{}", r[2].text());
    assert!(r[2].text().contains("quota exceeded"), "{}", r[2].text());
    // The body's own failures keep their codes through the wrapper.
    assert_eq!(code(&r[3]), "TOOL_ERROR");
    assert_eq!(r[3].error_info().unwrap().message, "disk full");
    assert_eq!(code(&r[4]), "TOOL_OUTPUT_ERROR");
    // The timeout wrapper's own answer stays TOOL_TIMEOUT.
    assert_eq!(code(&r[5]), "TOOL_TIMEOUT", "{}", r[5].text());
    {
        let seen = probe.seen.lock().unwrap();
        for answered_by_the_wrapper in ["cached-bad", "cached-good", "quota"] {
            assert!(!seen.contains_key(answered_by_the_wrapper));
        }
    }
    session.shutdown().await;
    harness.shutdown().await;
}
