//! A dropped file-log session closes its log: the lock is released (the id opens again) and
//! a call in flight is recorded `ABORTED`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh::scheduler::{
    Harness, HarnessBuilder, SchedulerConfig, SchedulerError, SessionStore, StepRequest,
};
use dsh::session::Durability;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

async fn harness(root: &Path, probe: &Arc<Probe>) -> Harness {
    quiet_intentional_panics();
    HarnessBuilder::new(probe_registry(probe))
        .store(SessionStore::Directory {
            root: root.to_path_buf(),
            durability: Durability::Batch,
        })
        .build()
        .await
        .unwrap()
}

/// Opens `id` again, waiting (bounded) for the dropped one to let go.
async fn reopen(harness: &Harness, id: &str) -> dsh::scheduler::OpenedSession {
    let mut last = None;
    for _ in 0..500 {
        match harness
            .open_session(id, SchedulerConfig::default(), None)
            .await
        {
            Ok(opened) => return opened,
            Err(e @ SchedulerError::AlreadyOpen(_)) | Err(e @ SchedulerError::Log(_)) => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the dropped session never let go of its id and log: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_session_releases_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe::default());
    let harness = harness(dir.path(), &probe).await;
    let session = harness
        .open_session("s", SchedulerConfig::default(), None)
        .await
        .unwrap()
        .session;
    let out = session
        .run_step(StepRequest::new(vec![call("c1", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "ok");
    drop(session);

    let again = reopen(&harness, "s").await;
    assert_eq!(again.recovery.next_step, 2, "the first step is in the log");
    assert_eq!(again.session.log().snapshot().await.unwrap().len(), 2);
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_dropped_mid_step_records_its_call_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe::default());
    let harness = harness(dir.path(), &probe).await;
    let session = harness
        .open_session("s", SchedulerConfig::default(), None)
        .await
        .unwrap()
        .session;
    let step = tokio::spawn(async move {
        session
            .run_step(StepRequest::new(vec![call(
                "slow",
                "par",
                json!({"sleep_ms": 60_000}),
            )]))
            .await
    });
    while probe.started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The only handle goes with the task that held it.
    step.abort();
    let _ = step.await;

    let again = reopen(&harness, "s").await;
    drop(again);
    let text = std::fs::read_to_string(dir.path().join("s.jsonl")).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[1]["type"], "tool/result");
    assert_eq!(events[1]["data"]["error"]["code"], "ABORTED", "{text}");
    assert!(
        events[1]["data"]["meta"].get("dsh.recovered").is_none(),
        "closed by the session itself, not by recovery: {text}"
    );
    harness.shutdown().await;
}
