//! A script stuck inside a built-in (a native loop calling back into slow natives, or one
//! long native operation) never reaches QuickJS's interrupt check in time. It must still end
//! at its deadline, and what runs it must be gone moments later, so its CPU is freed: four
//! such calls leave nothing running.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_code_mode::CodeLimits;
use dsh_core::Hooks;
use dsh_scheduler::SchedulerConfig;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Each runs for minutes to hours on one core, polling the interrupt handler rarely or never.
const STUCK: &[&str] = &[
    // The script: forEach calls String, each call ~0.1 s, a poll every 10,000 calls.
    "Array(100000).fill(3n ** 60000n).forEach(String);",
    // One native operation, no poll at all: a BigInt of ~286,000 digits (near the largest
    // QuickJS allows) to text, some seconds.
    "return String(3n ** 600000n).length;",
    // A regex replace whose callback is slow natives.
    "return 'x'.repeat(20000).replace(/x/g, () => String(3n ** 60000n).length).length;",
    // A sort with a comparator.
    "return Array(100000).fill(3n ** 60000n).sort((a, b) => String(a).length - String(b).length).length;",
    // map over a spread array.
    "return [...Array(100000)].map(() => String(3n ** 60000n)).length;",
];

fn limits() -> CodeLimits {
    CodeLimits {
        timeout: Duration::from_millis(500),
        ..test_limits()
    }
}

/// Waits until no script engine is alive, allowing `within` after the call answered.
async fn all_gone(within: Duration) {
    let start = Instant::now();
    while dsh_code_mode::live_engines() > 0 {
        assert!(
            start.elapsed() < within,
            "a script is still running {within:?} after its call answered ({} alive)",
            dsh_code_mode::live_engines()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_stuck_in_a_built_in_ends_at_its_deadline_and_stops_running() {
    let _serial = serial().await;
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    for (n, script) in STUCK.iter().enumerate() {
        let start = Instant::now();
        let r = run_code(&session, &format!("c{n}"), script).await;
        assert_eq!(code(&r), "TOOL_TIMEOUT", "{script}: {}", r.text());
        assert!(
            r.text().contains("did not stop when told"),
            "{script} is stuck where the interrupt handler is not polled: {}",
            r.text()
        );
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{script}: answered after {:?}",
            start.elapsed()
        );
        // The deadline plus a small grace, with room for a loaded machine: not the minutes
        // to hours the script would take.
        all_gone(Duration::from_secs(10)).await;
        assert!(
            child_workers().is_empty(),
            "{script}: a worker process is left: {:?}",
            child_workers()
        );
    }
    let next = run_code(&session, "after", "return 'still here';").await;
    assert_eq!(returned(&next), serde_json::json!("still here"));
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_stuck_scripts_at_once_leave_nothing_running() {
    let _serial = serial().await;
    let probe = Arc::new(Probe::default());
    let registry = registry(&probe, limits());
    let mut runs = Vec::new();
    let mut keep = Vec::new();
    for n in 0..4 {
        let (harness, session, _log) =
            open(registry.clone(), Hooks::new(), SchedulerConfig::default()).await;
        let s = session.clone();
        runs.push(tokio::spawn(async move {
            run_code(&s, &format!("c{n}"), STUCK[0]).await
        }));
        keep.push((harness, session));
    }
    for run in runs {
        let r = run.await.unwrap();
        assert_eq!(code(&r), "TOOL_TIMEOUT", "{}", r.text());
    }
    all_gone(Duration::from_secs(10)).await;
    assert!(child_workers().is_empty(), "{:?}", child_workers());
    for (harness, session) in keep {
        session.shutdown().await;
        harness.shutdown().await;
    }
}
