//! Dropping the last handle of a session shuts it down, as tokio's handles do for their
//! tasks: its actors stop and it leaves the harness's table. (One test in this binary: the
//! live-actor count is process-wide.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh::core::Hooks;
use dsh::core::live::live_actors;
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh::session::SessionLog;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_dropped_sessions_leave_no_actor_and_no_table_entry() {
    quiet_intentional_panics();
    let probe = Arc::new(Probe::default());
    let harness = HarnessBuilder::new(probe_registry(&probe))
        .hooks(Hooks::new())
        .build()
        .await
        .unwrap();
    let baseline = live_actors();
    for i in 0..1000 {
        let session = harness
            .open(
                SessionLog::memory().await.unwrap(),
                SchedulerConfig::default(),
                None,
            )
            .await
            .unwrap();
        if i % 100 == 0 {
            // Some of them did work first.
            let out = session
                .run_step(StepRequest::new(vec![call("c", "par", json!({}))]))
                .await
                .unwrap();
            assert_eq!(code(&out.results[0]), "ok");
        }
        drop(session);
    }
    let mut settled = false;
    for _ in 0..2000 {
        if live_actors() == baseline && harness.open_sessions() == 0 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        settled,
        "{} actors above the baseline, {} sessions still open",
        live_actors() - baseline,
        harness.open_sessions()
    );
    let report = harness.shutdown().await;
    assert_eq!(
        report.sessions, 0,
        "nothing was left for the harness to shut"
    );
}
