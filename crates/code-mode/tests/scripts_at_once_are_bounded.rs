//! The number of scripts alive at once is bounded: past the bound a call waits for a slot
//! (within its own time limit, and a cancel still reaches it), and a slot is free only once
//! the script's process is gone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::{Hooks, ToolRegistry};
use dsh_scheduler::{CancelTarget, SchedulerConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn registry_with_slots(probe: &Arc<Probe>, slots: usize) -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    registry
        .register(run_code_tool(test_limits()).with_max_scripts(slots))
        .unwrap();
    registry
        .register(Nap {
            name: "nap",
            parallel: true,
            probe: probe.clone(),
        })
        .unwrap();
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_scripts_run_at_once_than_there_are_slots() {
    let _serial = serial().await;
    let probe = Arc::new(Probe::default());
    let registry = registry_with_slots(&probe, 2);
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(dsh_code_mode::live_engines(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut runs = Vec::new();
    let mut keep = Vec::new();
    for n in 0..5 {
        let (harness, session, _log) =
            open(registry.clone(), Hooks::new(), SchedulerConfig::default()).await;
        let s = session.clone();
        runs.push(tokio::spawn(async move {
            run_code(
                &s,
                &format!("c{n}"),
                "await tools.nap({ ms: 300 }); return 1;",
            )
            .await
        }));
        keep.push((harness, session));
    }
    for run in runs {
        let r = run.await.unwrap();
        assert_eq!(
            returned(&r),
            serde_json::json!(1),
            "each waited its turn and ran"
        );
    }
    done.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    let peak = peak.load(Ordering::SeqCst);
    assert!((1..=2).contains(&peak), "{peak} scripts were alive at once");
    assert!(
        probe.max_active.load(Ordering::SeqCst) <= 2,
        "at most two scripts' sub-calls ran at once"
    );
    engines_gone().await;
    for (harness, session) in keep {
        session.shutdown().await;
        harness.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_a_slot_can_be_cancelled() {
    let _serial = serial().await;
    let probe = Arc::new(Probe::default());
    let registry = registry_with_slots(&probe, 1);
    let (h1, s1, _l1) = open(registry.clone(), Hooks::new(), SchedulerConfig::default()).await;
    let (h2, s2, _l2) = open(registry.clone(), Hooks::new(), SchedulerConfig::default()).await;
    let first = {
        let s1 = s1.clone();
        tokio::spawn(
            async move { run_code(&s1, "a", "await tools.nap({ ms: 3000 }); return 1;").await },
        )
    };
    let start = Instant::now();
    while probe.started.load(Ordering::SeqCst) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the first script never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = {
        let s2 = s2.clone();
        tokio::spawn(async move { run_code(&s2, "b", "return 2;").await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        dsh_code_mode::live_engines(),
        1,
        "the second waits for the slot"
    );
    let cancelled_at = Instant::now();
    s2.cancel(CancelTarget::Call("b".into())).unwrap();
    let r = second.await.unwrap();
    assert_eq!(code(&r), "ABORTED", "{}", r.text());
    assert!(cancelled_at.elapsed() < Duration::from_secs(2));
    assert_eq!(returned(&first.await.unwrap()), serde_json::json!(1));
    engines_gone().await;
    for (h, s) in [(h1, s1), (h2, s2)] {
        s.shutdown().await;
        h.shutdown().await;
    }
}
