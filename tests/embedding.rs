//! Embedding dsh in a long-running service: the session's actors live under the host's own
//! supervisor, failures reach the host as supervision events, and sessions are independent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh::scheduler::{CancelTarget, SchedulerConfig, StepRequest};
use dsh::session::SessionLog;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A stand-in for the service's own supervisor: it records what it hears.
struct Host;

type Heard = Arc<Mutex<Vec<(ractor::ActorId, String)>>>;

impl Actor for Host {
    type Msg = ();
    type State = Heard;
    type Arguments = Heard;

    async fn pre_start(&self, _m: ActorRef<()>, heard: Heard) -> Result<Heard, ActorProcessingErr> {
        Ok(heard)
    }

    async fn handle_supervisor_evt(
        &self,
        _m: ActorRef<()>,
        evt: SupervisionEvent,
        heard: &mut Heard,
    ) -> Result<(), ActorProcessingErr> {
        let entry = match &evt {
            SupervisionEvent::ActorTerminated(c, _, why) => {
                (c.get_id(), format!("terminated: {why:?}"))
            }
            SupervisionEvent::ActorFailed(c, err) => (c.get_id(), format!("failed: {err}")),
            SupervisionEvent::ActorStarted(c) => (c.get_id(), "started".into()),
            _ => return Ok(()),
        };
        heard.lock().unwrap().push(entry);
        Ok(())
    }
}

async fn heard_about(heard: &Heard, id: ractor::ActorId, what: &str) -> bool {
    for _ in 0..400 {
        if heard
            .lock()
            .unwrap()
            .iter()
            .any(|(a, s)| *a == id && s.starts_with(what))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

#[tokio::test]
async fn a_killed_session_reaches_the_host_as_a_supervision_event() {
    let heard: Heard = Arc::default();
    let (host, _) = Actor::spawn(None, Host, heard.clone()).await.unwrap();
    let probe = Arc::new(Probe::default());
    let harness = dsh::scheduler::HarnessBuilder::new(probe_registry(&probe))
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(
            log.clone(),
            SchedulerConfig::default(),
            Some(host.get_cell()),
        )
        .await
        .unwrap();
    let out = session
        .run_step(StepRequest::new(vec![call("a", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "ok");

    let scheduler = session.actor_cell();
    scheduler.kill();
    assert!(
        heard_about(&heard, scheduler.get_id(), "terminated").await,
        "{:?}",
        heard.lock().unwrap()
    );
    // The writer went with it, so nothing can keep appending to the log.
    assert!(log.snapshot().await.is_err());
    assert!(
        session
            .run_step(StepRequest::new(vec![call("b", "par", json!({}))]))
            .await
            .is_err()
    );
    host.stop(None);
    harness.shutdown().await;
}

#[tokio::test]
async fn a_failed_writer_fails_the_session_and_the_host_hears_it() {
    let heard: Heard = Arc::default();
    let (host, _) = Actor::spawn(None, Host, heard.clone()).await.unwrap();
    let probe = Arc::new(Probe::default());
    let harness = dsh::scheduler::HarnessBuilder::new(probe_registry(&probe))
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(
            log.clone(),
            SchedulerConfig::default(),
            Some(host.get_cell()),
        )
        .await
        .unwrap();
    log.actor_cell().kill();
    assert!(
        heard_about(&heard, session.actor_cell().get_id(), "failed").await,
        "{:?}",
        heard.lock().unwrap()
    );
    let failure = heard
        .lock()
        .unwrap()
        .iter()
        .find(|(a, s)| *a == session.actor_cell().get_id() && s.starts_with("failed"))
        .map(|(_, s)| s.clone())
        .unwrap();
    assert!(failure.contains("session writer"), "{failure}");
    host.stop(None);
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_run_side_by_side_and_one_failing_touches_no_other() {
    let probe = Arc::new(Probe::default());
    let harness = dsh::scheduler::HarnessBuilder::new(probe_registry(&probe))
        .build()
        .await
        .unwrap();
    let mut sessions = Vec::new();
    for _ in 0..1_000 {
        let log = SessionLog::memory().await.unwrap();
        sessions.push(
            harness
                .open(log, SchedulerConfig::default(), None)
                .await
                .unwrap(),
        );
    }
    // Session 0 gets a long step that is cancelled; session 1 is killed outright.
    let s0 = sessions[0].clone();
    let cancelled = tokio::spawn(async move {
        s0.run_step(StepRequest::new(vec![call(
            "slow",
            "par",
            json!({"sleep_ms": 60_000}),
        )]))
        .await
    });
    let mut tasks = Vec::new();
    for (i, s) in sessions.iter().enumerate().skip(2) {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let calls = vec![
                call("a", "par", json!({"sleep_ms": 20, "text": format!("s{i}")})),
                call("b", "ex", json!({"text": format!("s{i}")})),
            ];
            s.run_step(StepRequest::new(calls)).await
        }));
    }
    // Wait for session 0's own call to be running (other sessions' calls do not count).
    while !probe.seen.lock().unwrap().contains_key("slow") {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    sessions[1].actor_cell().kill();
    sessions[0].cancel(CancelTarget::Session).unwrap();
    let out = cancelled.await.unwrap().unwrap();
    assert_eq!(code(&out.results[0]), "ABORTED");
    for (i, t) in tasks.into_iter().enumerate() {
        let out = t.await.unwrap().unwrap();
        let expected = format!("s{}\n{FINALIZED}", i + 2);
        assert!(
            out.results
                .iter()
                .all(|r| code(r) == "ok" && r.text() == expected),
            "session {}",
            i + 2
        );
    }
    // The cancelled session carries on.
    let again = sessions[0]
        .run_step(StepRequest::new(vec![call("c", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&again.results[0]), "ok");
    for s in &sessions {
        s.shutdown().await;
    }
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_session_comes_back_from_its_log() {
    use dsh::scheduler::{HarnessBuilder, SessionStore};
    use dsh::session::Durability;
    let dir = tempfile::tempdir().unwrap();
    let heard: Heard = Arc::default();
    let (host, _) = Actor::spawn(None, Host, heard.clone()).await.unwrap();
    let probe = Arc::new(Probe::default());
    let harness = HarnessBuilder::new(probe_registry(&probe))
        .store(SessionStore::Directory {
            root: dir.path().to_path_buf(),
            durability: Durability::Batch,
        })
        .build()
        .await
        .unwrap();

    let first = harness
        .open_session("alpha", SchedulerConfig::default(), Some(host.get_cell()))
        .await
        .unwrap();
    assert_eq!(first.recovery.next_step, 1);
    let session = first.session;
    session
        .run_step(StepRequest::new(vec![call("a", "par", json!({}))]))
        .await
        .unwrap();
    // A step is in flight when the session dies.
    let s = session.clone();
    let in_flight = tokio::spawn(async move {
        s.run_step(StepRequest::new(vec![call(
            "stuck",
            "par",
            json!({"sleep_ms": 60_000}),
        )]))
        .await
    });
    while probe.started.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    session.actor_cell().kill();
    assert!(heard_about(&heard, session.actor_cell().get_id(), "terminated").await);
    assert!(
        in_flight.await.unwrap().is_err(),
        "the dead session cannot answer"
    );

    // The service opens it again. The old writer may take a moment to let go of the log.
    let mut reopened = None;
    for _ in 0..400 {
        match harness
            .open_session("alpha", SchedulerConfig::default(), Some(host.get_cell()))
            .await
        {
            Ok(s) => {
                reopened = Some(s);
                break;
            }
            Err(dsh::scheduler::SchedulerError::Log(dsh::session::SessionError::InUse(_))) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("reopen failed: {e}"),
        }
    }
    let again = reopened.expect("the log stayed locked");
    assert_eq!(
        again.recovery.closed_calls,
        ["stuck"],
        "the in-flight call was closed"
    );
    assert_eq!(again.recovery.next_step, 3);
    let out = again
        .session
        .run_step(StepRequest::new(vec![call("b", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(out.step, 3, "the next step continues the log");
    again.session.shutdown().await;

    let path = dir.path().join("alpha.jsonl");
    let report = dsh::session::check::check_file(&path);
    assert!(report.is_ok(), "{report:?}");
    let transcript = dsh::session::replay::replay_file(&path).unwrap();
    let stuck = &transcript.steps[1].results[0];
    assert_eq!(stuck.error.as_ref().unwrap().code.as_str(), "ABORTED");
    assert_eq!(transcript.steps.len(), 3);

    assert!(matches!(
        harness
            .open_session("../escape", SchedulerConfig::default(), None)
            .await,
        Err(dsh::scheduler::SchedulerError::InvalidSessionId(_))
    ));
    host.stop(None);
    harness.shutdown().await;
}

/// One call stops what a harness started: its sessions (logs closed), its guard set, and the
/// file toolset it was given to own (whose monitor actor the file tools ask).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shutdown_stops_sessions_guards_and_the_toolset() {
    use dsh::core::{Hooks, ToolCall, ToolRegistry};
    use dsh::scheduler::HarnessBuilder;
    use dsh::tool_fs::FsToolset;
    use ractor::ActorStatus;

    let dir = tempfile::tempdir().unwrap();
    let toolset = FsToolset::builder(dir.path()).build().await.unwrap();
    let registry = Arc::new(ToolRegistry::new());
    toolset.register(&registry).unwrap();
    let mut hooks = Hooks::new();
    hooks.pre_execute_arc(toolset.sandbox());
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .owns(toolset.clone())
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let outcome = session
        .run_step(StepRequest::new(vec![ToolCall::new(
            "w",
            "write_file",
            json!({"path": "a.txt", "content": "hi"}),
        )]))
        .await
        .unwrap();
    assert_eq!(
        code(&outcome.results[0]),
        "ok",
        "{}",
        outcome.results[0].text()
    );
    let monitor = toolset.monitor().actor_cell();
    assert_eq!(monitor.get_status(), ActorStatus::Running);

    let report = harness.shutdown().await;

    assert_eq!(report.sessions, 1);
    assert!(report.log_errors.is_empty());
    assert_eq!(monitor.get_status(), ActorStatus::Stopped);
    assert!(session.run_step(StepRequest::new(vec![])).await.is_err());
    // A second shutdown (a clone of the harness, or the toolset's own) is harmless.
    harness.shutdown().await;
    toolset.shutdown().await;
}
