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

    // The call actor's stop drops the run, sub-calls included, so a sub-call in flight may
    // end unrecorded; what is recorded keeps the log's invariants and says ABORTED.
    let events = log.snapshot().await.unwrap();
    dsh_session::check::check(&events).unwrap();
    for e in &events {
        if let EventBody::CodeDispatch(d) = &e.body {
            assert_eq!(d.error.as_ref().unwrap().code.as_str(), "ABORTED", "{d:?}");
        }
    }

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
