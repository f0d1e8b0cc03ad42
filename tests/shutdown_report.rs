//! `Harness::shutdown` reports what was actually in flight.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh::core::Hooks;
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh::session::SessionLog;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_not_reported_as_cancelled() {
    quiet_intentional_panics();
    let probe = Arc::new(Probe::default());
    let harness = HarnessBuilder::new(probe_registry(&probe))
        .hooks(Hooks::new())
        .config(quick_config())
        .build()
        .await
        .unwrap();
    let mut sessions = Vec::new();
    for _ in 0..1000 {
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
    // One of them is busy.
    let busy = sessions[500].clone();
    let step = tokio::spawn(async move {
        busy.run_step(StepRequest::new(vec![call(
            "slow",
            "par",
            json!({"sleep_ms": 60_000}),
        )]))
        .await
    });
    while probe.started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let report = harness.shutdown().await;
    assert_eq!(report.sessions, 1000);
    assert_eq!(
        report.cancelled_in_flight, 1,
        "only one session had a step in flight"
    );
    let out = step.await.unwrap().unwrap();
    assert_eq!(code(&out.results[0]), "ABORTED");
}
