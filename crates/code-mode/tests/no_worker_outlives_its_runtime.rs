//! No script worker outlives the runtime that started it: when the runtime shuts down (a
//! program's end, as `dsh run`'s), the spare started ahead of the next script and the worker
//! of a script still running (and the fork server they came from) are killed and reaped
//! before the shutdown returns, however
//! loaded the machine (nothing is left for a background task that will never run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::Hooks;
use dsh_scheduler::SchedulerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every process this test process started and has not reaped, with its state letter (`Z`:
/// ended, not reaped), and the processes they started in turn (a fork server's workers).
fn descendants() -> Vec<(u32, char)> {
    let all: Vec<(u32, u32, char)> = processes()
        .into_iter()
        .map(|(pid, stat)| (pid, stat.ppid, stat.state))
        .collect();
    let mut found = Vec::new();
    let mut parents = vec![std::process::id()];
    while let Some(parent) = parents.pop() {
        for (pid, ppid, state) in &all {
            if *ppid == parent {
                found.push((*pid, *state));
                parents.push(*pid);
            }
        }
    }
    found
}

#[test]
fn the_spare_and_a_running_script_are_reaped_before_the_runtime_shutdown_returns() {
    assert!(descendants().is_empty(), "{:?}", descendants());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let probe = Arc::new(Probe::default());
    let limits = dsh_code_mode::CodeLimits {
        timeout: Duration::from_secs(60),
        ..test_limits()
    };
    let kept = rt.block_on(async {
        let (harness, session, log) = open(
            registry(&probe, limits),
            Hooks::new(),
            SchedulerConfig::default(),
        )
        .await;
        let first = run_code(&session, "a", "return 6 * 7").await;
        assert_eq!(returned(&first), json!(42));
        // A script stuck in a native loop, still running when the runtime goes.
        let session = Arc::new(session);
        let running = session.clone();
        tokio::spawn(async move { run_code(&running, "b", "while (true) {}").await });
        let start = Instant::now();
        let alive = || descendants().iter().filter(|(_, s)| *s != 'Z').count();
        // The running script's worker and the next spare (each listed once started).
        while dsh_code_mode::live_engines() == 0
            || dsh_code_mode::spare_workers().is_empty()
            || alive() < 2
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the script did not start, or no spare was started"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (harness, session, log)
    });
    // As `dsh run` ends: the harness is dropped (not shut down) outside the runtime, then
    // the runtime is shut down.
    drop(kept);
    rt.shutdown_timeout(Duration::from_secs(10));
    // At once: no waiting, no polling.
    let left = descendants();
    let running: Vec<_> = left.iter().filter(|(_, s)| *s != 'Z').collect();
    assert!(running.is_empty(), "still running: {running:?}");
    assert!(left.is_empty(), "ended but never reaped: {left:?}");
}
