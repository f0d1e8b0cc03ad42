//! Replay rebuilds, from the log alone, the transcript the live run saw: real scheduler
//! sessions with parallel calls finishing out of order, errors, renamed ids, deferred context,
//! a step cancelled while its calls run, and a session resumed from its log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh_core::tool::ExecutionMode;
use dsh_core::transcript::{Transcript, TranscriptCall, TranscriptResult, TranscriptStep};
use dsh_core::{
    Arguments, ErrorCode, HookError, Hooks, PostExecuteContext, PostExecuteHandler,
    PostExecuteOutcome, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh_scheduler::{
    CancelTarget, Harness, HarnessBuilder, SchedulerConfig, Session, StepOutcome, StepRequest,
};
use dsh_session::replay::{read_log, rebuild, replay_file};
use dsh_session::{Durability, FileBackend, LogBackend, SessionLog};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Sleeps `ms`, then echoes its input; parallel-safe.
struct Echo;

#[async_trait]
impl ToolDefinition for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes after a delay."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        let ms = input["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(input)
    }
}

/// Always fails; exclusive.
struct Fail;

#[async_trait]
impl ToolDefinition for Fail {
    fn name(&self) -> &str {
        "fail"
    }
    fn description(&self) -> &str {
        "Fails."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Err(ToolFailure::new("it broke"))
    }
}

/// Tells the test it started, then runs until cancelled; parallel-safe.
struct Hang {
    started: Arc<Semaphore>,
}

#[async_trait]
impl ToolDefinition for Hang {
    fn name(&self) -> &str {
        "hang"
    }
    fn description(&self) -> &str {
        "Runs until cancelled."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    async fn execute(&self, _input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.started.add_permits(1);
        ctx.signal.cancelled().await;
        Ok(json!("finished anyway"))
    }
}

/// Adds the `note` argument as deferred context.
struct Notes;

#[async_trait]
impl PostExecuteHandler for Notes {
    fn name(&self) -> &str {
        "notes"
    }
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        let mut out = PostExecuteOutcome::accept();
        if let Some(note) = call.arguments.get("note").and_then(Value::as_str) {
            out = out.with_context(note);
        }
        Ok(out)
    }
}

struct Rig {
    harness: Harness,
    started: Arc<Semaphore>,
}

async fn rig() -> Rig {
    let started = Arc::new(Semaphore::new(0));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Echo).unwrap();
    registry.register(Fail).unwrap();
    registry
        .register(Hang {
            started: started.clone(),
        })
        .unwrap();
    let mut hooks = Hooks::new();
    hooks.post_execute(Notes);
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .build()
        .await
        .unwrap();
    Rig { harness, started }
}

/// The transcript the live run saw for one step: the blocks as sent (with the ids the
/// scheduler assigned), the results and deferred context the step answered.
fn live_step(request: &StepRequest, outcome: &StepOutcome) -> TranscriptStep {
    let mut calls: Vec<TranscriptCall> = request
        .calls
        .iter()
        .map(|c| TranscriptCall {
            call_id: c.call_id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.to_logged(),
            arguments_text: c.arguments.logged_text().map(str::to_string),
        })
        .collect();
    for r in &outcome.renamed {
        calls[r.index].call_id = r.assigned.clone();
    }
    TranscriptStep {
        step: outcome.step,
        calls,
        results: outcome
            .results
            .iter()
            .map(TranscriptResult::from_frozen)
            .collect(),
        user_messages: outcome.deferred.iter().map(|d| d.content.clone()).collect(),
    }
}

async fn run(session: &Session, live: &mut Transcript, calls: Vec<ToolCall>) -> StepOutcome {
    let request = StepRequest::new(calls);
    let outcome = session.run_step(request.clone()).await.unwrap();
    live.steps.push(live_step(&request, &outcome));
    outcome
}

fn echo(id: &str, args: Value) -> ToolCall {
    ToolCall::new(id, "echo", args)
}

/// Every way to read the log back gives the live transcript.
fn assert_replays(path: &Path, snapshot: &[dsh_core::SessionEvent], live: &Transcript) {
    dsh_session::check::check(snapshot).unwrap();
    assert_eq!(&rebuild(snapshot), live);
    assert_eq!(&replay_file(path).unwrap(), live);
    assert_eq!(&rebuild(&read_log(path).unwrap()), live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_equals_the_live_transcript() {
    let rig = rig().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    let (log, _) = SessionLog::open_file(&path, Durability::Batch, None)
        .await
        .unwrap();
    let session = rig
        .harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let mut live = Transcript::default();

    // Parallel calls finishing in the reverse of block order, two of them leaving context.
    let step1 = run(
        &session,
        &mut live,
        vec![
            echo("a", json!({"ms": 60, "note": "from a"})),
            echo("b", json!({"ms": 30})),
            echo("c", json!({"ms": 0, "note": "from c"})),
        ],
    )
    .await;
    assert_eq!(step1.deferred.len(), 2);

    // Errors: a failing body, an unknown tool, arguments that are not JSON, a repeated id.
    let step2 = run(
        &session,
        &mut live,
        vec![
            ToolCall::new("d", "fail", json!({})),
            ToolCall::new("e", "no_such_tool", json!({})),
            ToolCall {
                call_id: "f".into(),
                name: "echo".into(),
                arguments: Arguments::parse("{not json"),
            },
            echo("d", json!({})),
        ],
    )
    .await;
    let codes: Vec<_> = step2.results.iter().map(|r| r.code()).collect();
    assert_eq!(
        codes,
        vec![
            Some(ErrorCode::ToolError),
            Some(ErrorCode::UnknownTool),
            Some(ErrorCode::ToolInputError),
            None
        ]
    );
    assert_eq!(step2.renamed.len(), 1);

    // A step cancelled while two calls run: they end ABORTED, the exclusive call behind them
    // never starts (ABORTED_BEFORE_DISPATCH, a synthesized pair).
    let request = StepRequest::new(vec![
        ToolCall::new("h1", "hang", json!({})),
        ToolCall::new("h2", "hang", json!({})),
        ToolCall::new("x", "fail", json!({})),
    ]);
    let running = {
        let session = session.clone();
        let request = request.clone();
        tokio::spawn(async move { session.run_step(request).await })
    };
    let _both = rig.started.acquire_many(2).await.unwrap();
    session.cancel(CancelTarget::Step).unwrap();
    let step3 = running.await.unwrap().unwrap();
    live.steps.push(live_step(&request, &step3));
    let codes: Vec<_> = step3.results.iter().map(|r| r.code()).collect();
    assert_eq!(
        codes,
        vec![
            Some(ErrorCode::Aborted),
            Some(ErrorCode::Aborted),
            Some(ErrorCode::AbortedBeforeDispatch)
        ]
    );

    run(
        &session,
        &mut live,
        vec![echo("g", json!({"note": "after"}))],
    )
    .await;
    assert_eq!(live.steps.len(), 4);

    log.flush().await.unwrap();
    let snapshot = log.snapshot().await.unwrap();
    assert_replays(&path, &snapshot, &live);
    session.shutdown().await;

    // Resumed from its log: the next session continues the same transcript.
    let (log, recovery) = SessionLog::open_file(&path, Durability::Batch, None)
        .await
        .unwrap();
    assert!(!recovery.repaired(), "{recovery:?}");
    assert_eq!(recovery.next_step, 5);
    let config = SchedulerConfig {
        first_step: recovery.next_step,
        ..SchedulerConfig::default()
    };
    let resumed = rig.harness.open(log.clone(), config, None).await.unwrap();
    let step5 = run(
        &resumed,
        &mut live,
        vec![echo("i", json!({"ms": 10})), echo("j", json!({}))],
    )
    .await;
    assert_eq!(step5.step, 5);
    log.flush().await.unwrap();
    let snapshot = log.snapshot().await.unwrap();
    assert_eq!(snapshot.first().unwrap().seq, 1);
    assert_replays(&path, &snapshot, &live);
    resumed.shutdown().await;
    rig.harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_log_replays_as_the_resumed_session_will_see_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    // Step 2 was cut short: one call answered, one running, the next line half written.
    let mut bytes = jsonl(&[
        call(1, 1, "a"),
        result(2, 1, "a", 1),
        call(3, 2, "b"),
        call(4, 2, "c"),
        result(5, 2, "c", 4),
    ]);
    bytes.extend_from_slice(b"{\"seq\":6,\"step\":2,\"type\":\"tool/res");
    std::fs::write(&path, &bytes).unwrap();

    let before = replay_file(&path).unwrap();
    assert_eq!(before, rebuild(&read_log(&path).unwrap()));
    let step2 = &before.steps[1];
    assert_eq!(step2.results.len(), 2);
    assert_eq!(step2.results[0].call_id, "b");
    assert_eq!(
        step2.results[0].error.as_ref().unwrap().code,
        ErrorCode::Aborted
    );
    // Reading changed nothing; opening repairs the file into exactly what was replayed.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let (backend, recovery) = FileBackend::open(&path).unwrap();
    assert_eq!(recovery.closed_calls, vec!["b".to_string()]);
    assert_eq!(rebuild(&backend.read_all().unwrap()), before);
}

#[test]
fn code_dispatches_and_meta_are_not_model_visible() {
    let transcript = rebuild(&sample_log());
    let step1 = &transcript.steps[0];
    let ids: Vec<&str> = step1.calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    let results: Vec<&str> = step1.results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(results, ["a", "b"]);
    assert_eq!(step1.user_messages, vec!["note".to_string()]);
    let text = serde_json::to_string(&transcript).unwrap();
    assert!(!text.contains("a.1"), "{text}");
    assert_eq!(
        transcript.steps[1].results[0].error.as_ref().unwrap().code,
        ErrorCode::ToolError
    );
}

#[test]
fn an_empty_log_replays_to_an_empty_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.jsonl");
    std::fs::write(&path, b"").unwrap();
    assert_eq!(replay_file(&path).unwrap(), Transcript::default());
    assert!(replay_file(dir.path().join("missing.jsonl")).is_err());
}
