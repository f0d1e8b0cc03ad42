//! The worker process of the next script is started ahead of time, so a script does not wait
//! for a process to start; but it is fresh: each script runs in a process of its own that ran
//! nothing before (scripts never share state), the idle spare is not counted as a script, and
//! it goes when the tool goes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::Hooks;
use dsh_scheduler::SchedulerConfig;
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_script_runs_in_a_fresh_process_started_ahead_of_time() {
    let _serial = serial().await;
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let first = run_code(
        &session,
        "a",
        "globalThis.mark = 41; return typeof globalThis.mark;",
    )
    .await;
    assert_eq!(returned(&first), json!("number"));
    // The next script's process is started meanwhile; it is not a script.
    until("no spare worker was started", || {
        dsh_code_mode::spare_workers().len() == 1
    })
    .await;
    let spare = dsh_code_mode::spare_workers()[0];
    assert!(running(spare));
    engines_gone().await;
    assert_eq!(dsh_code_mode::live_engines(), 0);

    // The next script runs in it, and sees nothing of the script before.
    let second = run_code(&session, "b", "return typeof globalThis.mark;").await;
    assert_eq!(returned(&second), json!("undefined"));
    until("the spare was not the second script's process", || {
        !dsh_code_mode::spare_workers().contains(&spare) && !running(spare)
    })
    .await;
    // Used once: that process is gone with its script; a new spare waits for the next.
    until("no new spare after the second script", || {
        dsh_code_mode::spare_workers()
            .iter()
            .any(|p| *p != spare && running(*p))
    })
    .await;
    let next = dsh_code_mode::spare_workers()[0];

    // The spare goes with the tool.
    session.shutdown().await;
    harness.shutdown().await;
    drop(session);
    drop(harness);
    until("the spare outlived its tool", || {
        dsh_code_mode::spare_workers().is_empty() && !running(next)
    })
    .await;
}
