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

/// Kills the guard-set actor just as the calls named in `at` leave pre-execute, so their
/// guard check goes to an actor that is going down (or already gone, or restarting).
struct KillGuardSetAt {
    at: Vec<String>,
    guards: Arc<std::sync::OnceLock<dsh::guards::GuardSet>>,
    killed: Arc<std::sync::Mutex<Vec<ractor::ActorId>>>,
}
#[async_trait]
impl PreExecuteHandler for KillGuardSetAt {
    fn name(&self) -> &str {
        "kill-guard-set"
    }
    async fn pre_execute(&self, c: &PreExecuteContext<'_>) -> Result<PreExecuteOutcome, HookError> {
        if self.at.iter().any(|id| id == c.call_id)
            && let Some(cell) = self.guards.get().and_then(|g| g.actor_cell())
        {
            self.killed.lock().unwrap().push(cell.get_id());
            cell.kill();
        }
        Ok(PreExecuteOutcome::abstain())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_guard_set_mid_step_denies_until_it_is_back() {
    let probe = Arc::new(Probe::default());
    let guards_slot: Arc<std::sync::OnceLock<dsh::guards::GuardSet>> = Arc::default();
    let killed: Arc<std::sync::Mutex<Vec<ractor::ActorId>>> = Arc::default();
    let mut hooks = Hooks::new();
    hooks.pre_execute(KillGuardSetAt {
        at: ["p5", "p15", "p25", "p35", "p45"]
            .map(String::from)
            .to_vec(),
        guards: guards_slot.clone(),
        killed: killed.clone(),
    });
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let guards = harness.pipeline().guards().clone();
    guards_slot.set(guards.clone()).unwrap();
    // The guard abstains, noting every call it was asked about: a call it never saw was not
    // checked, and must not have been allowed.
    let seen_by_guard: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = seen_by_guard.clone();
    let _owner = guards
        .register(FnGuard::new("gate", move |c: &GuardCall| {
            seen.lock().unwrap().push(c.call_id.clone());
            GuardVerdict::Abstain
        }))
        .await
        .unwrap();
    // Parallel calls through the pool, then exclusive ones; the guard set is killed five
    // times among the parallel ones.
    let calls = (0..50)
        .map(|i| call(&format!("p{i}"), "par", json!({"sleep_ms": 1})))
        .chain((0..10).map(|i| call(&format!("x{i}"), "ex", json!({}))))
        .collect();
    let out = session.run_step(StepRequest::new(calls)).await.unwrap();
    let killed = killed.lock().unwrap().clone();
    assert!(!killed.is_empty(), "the guard set was never killed");

    let seen = seen_by_guard.lock().unwrap().clone();
    let codes: Vec<(String, &str)> = out
        .results
        .iter()
        .map(|r| (r.call_id().to_string(), code(r)))
        .collect();
    // Never allowed while down: a call is allowed exactly when the guards were run on it;
    // every other call is denied, saying the guard set could not be asked.
    for r in &out.results {
        let asked = seen.iter().any(|id| id == r.call_id());
        assert_eq!(
            code(r) == "ok",
            asked,
            "{}: {} (its guards ran: {asked})",
            r.call_id(),
            r.text()
        );
        if !asked {
            assert_eq!(code(r), "DENIED", "{}: {}", r.call_id(), r.text());
            assert!(
                r.text().contains("denied to be safe"),
                "{}: {}",
                r.call_id(),
                r.text()
            );
        }
    }
    let denied = codes.iter().filter(|(_, c)| *c == "DENIED").count();
    assert!(
        denied > 0,
        "calls that reached the guard set while it was down were denied: {codes:?}"
    );
    assert_eq!(
        probe.started.load(Ordering::SeqCst),
        out.results.len() - denied,
        "a denied call never ran"
    );
    // Its supervisor brought it back: at least one restart, and a live actor that is none of
    // the killed ones.
    let start = std::time::Instant::now();
    while !(guards.restarts() >= 1
        && guards
            .actor_cell()
            .is_some_and(|c| !killed.contains(&c.get_id())))
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the supervisor did not restart the guard set (restarts: {})",
            guards.restarts()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        guards.restarts() <= killed.len() as u64,
        "one restart per kill at most"
    );
    // Once restarted, calls are allowed again, checked by the same guard.
    assert_eq!(
        guards.ids().await.unwrap(),
        ["gate"],
        "the guard survived the restarts"
    );
    let next = session
        .run_step(StepRequest::new(vec![
            call("after1", "par", json!({})),
            call("after2", "ex", json!({})),
        ]))
        .await
        .unwrap();
    assert_eq!(
        next.results.iter().map(code).collect::<Vec<_>>(),
        ["ok", "ok"]
    );
    let seen = seen_by_guard.lock().unwrap().clone();
    assert!(
        ["after1", "after2"]
            .iter()
            .all(|id| seen.iter().any(|s| s == id)),
        "the restarted guard set ran its guard: {seen:?}"
    );
    let events: Vec<SessionEvent> = log.snapshot().await.unwrap();
    check::check(&events).unwrap();
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
