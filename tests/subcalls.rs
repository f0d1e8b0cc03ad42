//! Sub-calls made by a running call (code mode's transport) pass the whole pipeline, are
//! recorded as `tool/code-dispatch`, cannot escape a denial, drop their additionalContexts,
//! and are cancelled with their parent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    EventBody, HookError, Hooks, PostExecuteContext, PostExecuteHandler, PostExecuteOutcome,
    PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, ToolContext, ToolDefinition,
    ToolFailure,
};
use dsh::scheduler::{CancelTarget, SchedulerConfig, StepRequest};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Runs the sub-calls listed in its input, in order, and reports each outcome.
struct Batch;

#[async_trait]
impl ToolDefinition for Batch {
    fn name(&self) -> &str {
        "batch"
    }
    fn description(&self) -> &str {
        "runs sub-calls"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"calls": {"type": "array"}}, "required": ["calls"]})
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let dispatcher = ctx
            .dispatcher
            .clone()
            .ok_or_else(|| ToolFailure::new("no dispatcher"))?;
        let mut outcomes = Vec::new();
        for c in input["calls"].as_array().cloned().unwrap_or_default() {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            let r = dispatcher.dispatch(&ctx, &name, c["args"].clone()).await;
            outcomes.push(
                json!({"id": r.call_id(), "code": r.code().map(|c| c.as_str()), "text": r.text()}),
            );
        }
        Ok(json!(outcomes))
    }
}

struct CountAndDeny(Arc<AtomicUsize>);

#[async_trait]
impl PreExecuteHandler for CountAndDeny {
    fn name(&self) -> &str {
        "count-and-deny"
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        if call.parent.is_some() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(
            if call.arguments.get("text").and_then(Value::as_str) == Some("forbidden") {
                PreExecuteOutcome::deny("forbidden text")
            } else {
                PreExecuteOutcome::abstain()
            },
        )
    }
}

struct AddContext;

#[async_trait]
impl PostExecuteHandler for AddContext {
    fn name(&self) -> &str {
        "add-context"
    }
    async fn post_execute(
        &self,
        _c: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        Ok(PostExecuteOutcome::accept().with_context("note"))
    }
}

#[tokio::test]
async fn sub_calls_pass_every_hook_and_are_recorded_between_their_parent_and_its_result() {
    let probe = Arc::new(Probe::default());
    let registry = probe_registry(&probe);
    registry.register(Batch).unwrap();
    let counted = Arc::new(AtomicUsize::new(0));
    let mut hooks = Hooks::new();
    hooks.pre_execute(CountAndDeny(counted.clone()));
    hooks.post_execute(AddContext);
    let (harness, session, log) = open(registry, hooks, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![call(
            "code",
            "batch",
            json!({"calls": [
                {"name": "par", "args": {"text": "one"}},
                {"name": "par", "args": {"text": "forbidden"}},
                {"name": "ex", "args": {"text": "two"}},
                {"name": "run_code", "args": {}},
            ]}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "ok");
    let outcomes = out.results[0].value().unwrap().as_array().unwrap().clone();
    assert_eq!(outcomes[0]["code"], Value::Null);
    assert_eq!(outcomes[1]["code"], "DENIED", "a denial is binding");
    assert_eq!(outcomes[2]["code"], Value::Null);
    assert_eq!(
        outcomes[3]["code"], "DENIED",
        "run_code cannot be reached from a sub-call"
    );
    assert_eq!(
        counted.load(Ordering::SeqCst),
        3,
        "the hook saw every sub-call of a known tool"
    );
    assert_eq!(
        probe.finalized.load(Ordering::SeqCst),
        3,
        "finalize_content ran for them"
    );

    // Only the parent's additionalContexts reach the inbox.
    assert_eq!(out.deferred.len(), 1);
    assert_eq!(out.deferred[0].origin, "code");

    let events = log.snapshot().await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(
        kinds,
        [
            "tool/call",
            "tool/code-dispatch",
            "tool/code-dispatch",
            "tool/code-dispatch",
            "tool/code-dispatch",
            "tool/result",
            "user/message"
        ]
    );
    if let EventBody::CodeDispatch(d) = &events[2].body {
        assert_eq!(d.parent_call_id, "code");
        assert_eq!(d.error.as_ref().unwrap().code.as_str(), "DENIED");
    } else {
        panic!("not a dispatch");
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_parent_cancels_its_running_sub_calls() {
    let probe = Arc::new(Probe::default());
    let registry = probe_registry(&probe);
    registry.register(Batch).unwrap();
    let (harness, session, log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let s = session.clone();
    let step = tokio::spawn(async move {
        s.run_step(StepRequest::new(vec![call(
            "code",
            "batch",
            json!({"calls": [{"name": "par", "args": {"sleep_ms": 60_000}}]}),
        )]))
        .await
        .unwrap()
    });
    while probe.started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let sub_signal = probe
        .signals
        .lock()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    session.cancel(CancelTarget::Call("code".into())).unwrap();
    let out = step.await.unwrap();
    assert_eq!(code(&out.results[0]), "ABORTED");
    assert!(
        sub_signal.is_cancelled(),
        "the sub-call's signal fired with its parent's"
    );
    // The cancelled sub-call is on record, as ABORTED, before its parent's result.
    let events = log.snapshot().await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(kinds, ["tool/call", "tool/code-dispatch", "tool/result"]);
    match &events[1].body {
        EventBody::CodeDispatch(d) => {
            assert_eq!(d.error.as_ref().unwrap().code.as_str(), "ABORTED")
        }
        other => panic!("{other:?}"),
    }
    assert!(dsh::session::check::check(&events).is_ok());
    // Even long after, the abandoned sub-call adds nothing.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(log.snapshot().await.unwrap().len(), 3);
    session.shutdown().await;
    harness.shutdown().await;
}
