//! Graceful shutdown: no new steps, in-flight calls finish within the grace or are aborted,
//! the log is flushed and closed, and no actor or task is left. (One test in this binary: the
//! actor count and the runtime's task count are global.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh::core::Hooks;
use dsh::core::live::live_actors;
use dsh::scheduler::{SchedulerConfig, SchedulerError, StepRequest};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_or_aborts_in_flight_calls_and_leaves_nothing_running() {
    let rt = tokio::runtime::Handle::current();
    let actors_before = live_actors();
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;

    // A step with a quick call and a slow one, and a step queued behind it.
    let s = session.clone();
    let running = tokio::spawn(async move {
        s.run_step(StepRequest::new(vec![
            call("quick", "par", json!({"sleep_ms": 50})),
            call(
                "slow",
                "par",
                json!({"sleep_ms": 60_000, "ignore_cancel": true}),
            ),
        ]))
        .await
    });
    while probe.started.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let s = session.clone();
    let queued = tokio::spawn(async move {
        s.run_step(StepRequest::new(vec![call("never", "par", json!({}))]))
            .await
    });
    tokio::time::sleep(Duration::from_millis(10)).await;

    let report = session.shutdown_within(Duration::from_millis(300)).await;
    assert!(
        report.cancelled_in_flight,
        "the slow call outlived the grace"
    );
    assert_eq!(report.log_error, None);

    let out = running.await.unwrap().unwrap();
    assert_eq!(code(&out.results[0]), "ok", "finished within the grace");
    assert_eq!(code(&out.results[1]), "ABORTED");
    assert!(matches!(
        queued.await.unwrap(),
        Err(SchedulerError::ShutDown)
    ));
    assert!(matches!(
        session
            .run_step(StepRequest::new(vec![call("late", "par", json!({}))]))
            .await,
        Err(SchedulerError::Unavailable(_) | SchedulerError::ShutDown)
    ));
    assert!(log.snapshot().await.is_err(), "the log is closed");
    harness.shutdown().await;

    for _ in 0..400 {
        if live_actors() == actors_before && rt.metrics().num_alive_tasks() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        live_actors(),
        actors_before,
        "an actor outlived the shutdown"
    );
    assert_eq!(
        rt.metrics().num_alive_tasks(),
        0,
        "a task outlived the shutdown"
    );
}
