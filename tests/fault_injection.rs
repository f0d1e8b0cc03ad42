//! Faults injected through the real pipeline, on a real file log: a panicking pre-execute
//! handler, guard, wrapper, body, post-execute handler, `finalize_content` and observer; the
//! guard-set actor killed in the middle of a step; the session writer failing. After each, the
//! session serves the next step, and the log (recovered) passes the checker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::around::{Around, DispatchOutcome, DispatchRequest, Next};
use dsh::core::{
    FrozenResult, HookError, Hooks, PostExecuteContext, PostExecuteHandler, PostExecuteOutcome,
    PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, ResultObserver, SessionEvent,
    ToolRegistry,
};
use dsh::guards::{FnGuard, GuardCall, GuardVerdict};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, SchedulerError, StepRequest};
use dsh::session::{
    Durability, FileBackend, LogBackend, SessionError, SessionLog, WriterConfig, check,
};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Panics when the call's arguments carry `"boom": "<where>"`.
fn boom(args: &Value, place: &str) -> bool {
    args.get("text").and_then(Value::as_str) == Some(place)
}

struct PanicPre;
#[async_trait]
impl PreExecuteHandler for PanicPre {
    fn name(&self) -> &str {
        "panic-pre"
    }
    async fn pre_execute(&self, c: &PreExecuteContext<'_>) -> Result<PreExecuteOutcome, HookError> {
        if boom(c.arguments, "pre") {
            panic!("pre-execute exploded");
        }
        Ok(PreExecuteOutcome::abstain())
    }
}

struct PanicAround;
#[async_trait]
impl Around for PanicAround {
    fn name(&self) -> &str {
        "panic-around"
    }
    async fn around(&self, req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        if boom(&req.arguments, "around") {
            panic!("wrapper exploded");
        }
        next.run(req).await
    }
}

struct PanicPost;
#[async_trait]
impl PostExecuteHandler for PanicPost {
    fn name(&self) -> &str {
        "panic-post"
    }
    async fn post_execute(
        &self,
        c: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        if boom(c.arguments, "post") {
            panic!("post-execute exploded");
        }
        Ok(PostExecuteOutcome::accept())
    }
}

struct PanicObserver;
impl ResultObserver for PanicObserver {
    fn name(&self) -> &str {
        "panic-observer"
    }
    fn observe(&self, r: &FrozenResult) {
        if r.text().starts_with("observer") {
            panic!("observer exploded");
        }
    }
}

fn recovered_check(path: &Path) {
    // Recovery (what `dsh run` does on open) closes anything left open; then every invariant
    // holds.
    drop(FileBackend::open(path).unwrap());
    let report = check::check_file(path);
    assert!(report.is_ok(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_anywhere_in_the_chain_become_results_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let probe = Arc::new(Probe::default());
    let registry = Arc::new(ToolRegistry::new());
    registry
        .register(ProbeTool::new("par", true, &probe))
        .unwrap();
    let mut fragile = ProbeTool::new("fragile", true, &probe);
    fragile.finalize_panics = true;
    registry.register(fragile).unwrap();
    let mut hooks = Hooks::new();
    hooks.pre_execute(PanicPre);
    hooks.around(PanicAround);
    hooks.post_execute(PanicPost);
    hooks.observe(PanicObserver);
    let (harness, session, _log) = {
        let harness = HarnessBuilder::new(registry)
            .hooks(hooks)
            .build()
            .await
            .unwrap();
        let (log, _) = SessionLog::open_file(&path, Durability::Batch, None)
            .await
            .unwrap();
        let session = harness
            .open(log.clone(), SchedulerConfig::default(), None)
            .await
            .unwrap();
        (harness, session, log)
    };
    quiet_intentional_panics();
    let _guard = harness
        .pipeline()
        .guards()
        .register(FnGuard::new("panic-guard", |c: &GuardCall| {
            if c.arguments.get("text").and_then(Value::as_str) == Some("guard") {
                panic!("guard exploded")
            }
            GuardVerdict::Abstain
        }))
        .await
        .unwrap();
    let out = session
        .run_step(StepRequest::new(vec![
            call("pre", "par", json!({"text": "pre"})),
            call("guard", "par", json!({"text": "guard"})),
            call("around", "par", json!({"text": "around"})),
            call("body", "par", json!({"panic": true})),
            call("post", "par", json!({"text": "post"})),
            call("finalize", "fragile", json!({})),
            call("observer", "par", json!({"text": "observer"})),
        ]))
        .await
        .unwrap();
    let codes: Vec<_> = out.results.iter().map(code).collect();
    assert_eq!(
        codes,
        [
            "PIPELINE_ERROR",
            "DENIED",
            "PIPELINE_ERROR",
            "TOOL_ERROR",
            "PIPELINE_ERROR",
            "PIPELINE_ERROR",
            "ok"
        ]
    );
    // The next step is served as if nothing happened.
    let next = session
        .run_step(StepRequest::new(vec![call("after", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&next.results[0]), "ok");
    session.shutdown().await;
    harness.shutdown().await;
    recovered_check(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_guard_set_mid_step_denies_until_it_is_back() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let guards = harness.pipeline().guards().clone();
    let _owner = guards
        .register(FnGuard::new("count", |_c: &GuardCall| {
            GuardVerdict::Abstain
        }))
        .await
        .unwrap();
    // A step of exclusive calls: each asks the guard set in turn; kill it in the middle.
    let s = session.clone();
    let step = tokio::spawn(async move {
        let calls = (0..40)
            .map(|i| call(&format!("c{i}"), "ex", json!({"sleep_ms": 2})))
            .collect();
        s.run_step(StepRequest::new(calls)).await.unwrap()
    });
    while probe.started.load(Ordering::SeqCst) < 5 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    guards.actor_cell().unwrap().kill();
    let out = step.await.unwrap();
    let codes: Vec<_> = out.results.iter().map(code).collect();
    // Never allowed while down: every call is either ok (asked a live guard set) or DENIED.
    assert!(
        codes.iter().all(|c| *c == "ok" || *c == "DENIED"),
        "{codes:?}"
    );
    let denied = out.results.iter().filter(|r| code(r) == "DENIED").count();
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        40 - denied,
        "a denied call never ran"
    );
    // Once restarted, calls are allowed again, and the session keeps serving.
    for _ in 0..400 {
        if guards.restarts() >= 1 && guards.actor_cell().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let next = session
        .run_step(StepRequest::new(vec![call("after", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&next.results[0]), "ok");
    let events: Vec<SessionEvent> = log.snapshot().await.unwrap();
    assert!(check::check(&events).is_ok());
    session.shutdown().await;
    harness.shutdown().await;
}

/// A file backend whose commits fail while `failing` is set (as a full disk would).
struct Flaky {
    inner: FileBackend,
    failing: Arc<AtomicBool>,
    commits: Arc<AtomicUsize>,
}

impl LogBackend for Flaky {
    fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(SessionError::Io {
                context: "appending to the log".into(),
                message: "No space left on device (os error 28)".into(),
            });
        }
        self.inner.commit(events, sync)
    }
    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        self.inner.read_all()
    }
    fn describe(&self) -> String {
        "flaky file".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_writer_runs_nothing_it_could_not_record_and_the_next_step_works() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let (inner, recovery) = FileBackend::open(&path).unwrap();
    let failing = Arc::new(AtomicBool::new(false));
    let flaky = Flaky {
        inner,
        failing: failing.clone(),
        commits: Arc::new(AtomicUsize::new(0)),
    };
    let log = SessionLog::spawn(
        Box::new(flaky),
        WriterConfig {
            durability: Durability::Batch,
            next_seq: recovery.next_seq,
        },
        None,
    )
    .await
    .unwrap();
    let probe = Arc::new(Probe::default());
    let harness = HarnessBuilder::new(probe_registry(&probe))
        .build()
        .await
        .unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();

    session
        .run_step(StepRequest::new(vec![call("before", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);

    // The disk fills up: the step's tool/calls cannot be recorded, so nothing runs.
    failing.store(true, Ordering::SeqCst);
    let err = session
        .run_step(StepRequest::new(vec![
            call("lost1", "par", json!({})),
            call("lost2", "ex", json!({})),
        ]))
        .await
        .unwrap_err();
    match err {
        SchedulerError::LogFailed { error, outcome } => {
            assert!(error.to_string().contains("No space left"), "{error}");
            assert_eq!(outcome.results.len(), 2, "every call still has its answer");
            for r in &outcome.results {
                assert_eq!(code(r), "PIPELINE_ERROR");
                assert!(r.text().contains("could not be recorded"), "{}", r.text());
            }
        }
        other => panic!("expected LogFailed, got {other}"),
    }
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        1,
        "an unrecorded call ran"
    );

    // Space comes back: the session serves the next step, and the log has no gap.
    failing.store(false, Ordering::SeqCst);
    let next = session
        .run_step(StepRequest::new(vec![call("after", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&next.results[0]), "ok");
    session.shutdown().await;
    harness.shutdown().await;
    recovered_check(&path);
    let events = dsh::session::replay::read_log(&path).unwrap();
    let ids: Vec<_> = events
        .iter()
        .filter_map(|e| e.call_id().map(str::to_string))
        .collect();
    assert!(!ids.iter().any(|i| i.starts_with("lost")), "{ids:?}");
}
