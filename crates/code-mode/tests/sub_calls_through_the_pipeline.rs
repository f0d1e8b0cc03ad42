//! Every `tools.*` call of a script is a sub-call through the whole pipeline: each hook point
//! sees it, it is recorded as `tool/code-dispatch` between run_code's call and result, and
//! its additionalContexts never reach the transcript.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh_core::around::{Around, DispatchOutcome, DispatchRequest, Next};
use dsh_core::{
    EventBody, FrozenResult, HookError, Hooks, PostExecuteContext, PostExecuteHandler,
    PostExecuteOutcome, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, ResultObserver,
    ToolCall,
};
use dsh_scheduler::{SchedulerConfig, StepRequest};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Counts, per hook point, the calls it saw that are sub-calls (`parent.subN` ids).
#[derive(Default)]
struct Counts(Mutex<BTreeMap<&'static str, usize>>);

impl Counts {
    fn saw(&self, point: &'static str, call_id: &str) {
        if call_id.contains(".sub") {
            *self.0.lock().unwrap().entry(point).or_default() += 1;
        }
    }
    fn get(&self) -> BTreeMap<&'static str, usize> {
        self.0.lock().unwrap().clone()
    }
}

struct Hook(Arc<Counts>);

#[async_trait]
impl PreExecuteHandler for Hook {
    fn name(&self) -> &str {
        "count"
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        self.0.saw("pre_execute", call.call_id);
        if call.parent.is_some() {
            self.0.saw("pre_execute_with_parent", call.call_id);
        }
        Ok(PreExecuteOutcome::abstain())
    }
}

#[async_trait]
impl Around for Hook {
    fn name(&self) -> &str {
        "count"
    }
    async fn around(&self, req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        self.0.saw("around", &req.call_id);
        next.run(req).await
    }
}

#[async_trait]
impl PostExecuteHandler for Hook {
    fn name(&self) -> &str {
        "count"
    }
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        self.0.saw("post_execute", call.call_id);
        Ok(PostExecuteOutcome::accept().with_context(format!("context from {}", call.call_id)))
    }
}

impl ResultObserver for Hook {
    fn name(&self) -> &str {
        "count"
    }
    fn observe(&self, result: &FrozenResult) {
        self.0.saw("observe", result.call_id());
    }
}

/// Counts `finalize_content` runs.
struct Finalized(Arc<AtomicUsize>);

#[async_trait]
impl dsh_core::ToolDefinition for Finalized {
    fn name(&self) -> &str {
        "stamp"
    }
    fn description(&self) -> &str {
        "returns its input; finalize_content stamps it"
    }
    fn input_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(
        &self,
        input: serde_json::Value,
        _ctx: dsh_core::ToolContext,
    ) -> Result<serde_json::Value, dsh_core::ToolFailure> {
        Ok(input)
    }
    fn finalize_content(
        &self,
        mut content: Vec<dsh_core::ContentBlock>,
    ) -> Vec<dsh_core::ContentBlock> {
        self.0.fetch_add(1, Ordering::SeqCst);
        content.push(dsh_core::ContentBlock::text("[stamped]"));
        content
    }
}

#[tokio::test]
async fn every_hook_point_sees_every_sub_call_and_no_additional_context_leaks() {
    let probe = Arc::new(Probe::default());
    let registry = registry(&probe, test_limits());
    let finalized = Arc::new(AtomicUsize::new(0));
    registry.register(Finalized(finalized.clone())).unwrap();
    let counts = Arc::new(Counts::default());
    let mut hooks = Hooks::new();
    hooks.pre_execute(Hook(counts.clone()));
    hooks.around(Hook(counts.clone()));
    hooks.post_execute(Hook(counts.clone()));
    hooks.observe(Hook(counts.clone()));
    let (harness, session, log) = open(registry, hooks, SchedulerConfig::default()).await;

    let out = session
        .run_step(StepRequest::new(vec![
            ToolCall::new(
                "c1",
                "run_code",
                json!({"code": r#"
                    const a = await tools.nap({ text: "a" });
                    const [b, c] = await Promise.all([tools.nap({ text: "b" }), tools.solo({ text: "c" })]);
                    const s = await tools.stamp({ k: 1 });
                    return [a.text, b.text, c.text, s.text];
                "#}),
            ),
            ToolCall::new("c2", "nap", json!({"text": "after"})),
        ]))
        .await
        .unwrap();
    let r = &out.results[0];
    assert_eq!(returned(r), json!(["a", "b", "c", "{\"k\":1}\n[stamped]"]));

    let expected: BTreeMap<&'static str, usize> = [
        ("around", 4),
        ("observe", 4),
        ("post_execute", 4),
        ("pre_execute", 4),
        ("pre_execute_with_parent", 4),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts.get(), expected, "each point saw the 4 sub-calls");
    assert_eq!(
        finalized.load(Ordering::SeqCst),
        1,
        "finalize_content ran once for the sub-call"
    );

    // Only the two top-level calls' contexts reach the inbox.
    let origins: Vec<_> = out.deferred.iter().map(|d| d.origin.as_str()).collect();
    assert_eq!(origins, ["c1", "c2"]);

    let events = log.snapshot().await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.body.type_str()).collect();
    let first_result = kinds.iter().position(|k| *k == "tool/result").unwrap();
    assert_eq!(kinds[0], "tool/call");
    assert_eq!(
        kinds[..first_result]
            .iter()
            .filter(|k| **k == "tool/code-dispatch")
            .count(),
        4,
        "the sub-calls are recorded before run_code's result: {kinds:?}"
    );
    let messages: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::UserMessage(m) => Some(m.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(messages, ["context from c1", "context from c2"]);
    assert!(
        kinds.iter().rposition(|k| *k == "tool/result").unwrap()
            < kinds.iter().position(|k| *k == "user/message").unwrap(),
        "contexts come after every result: {kinds:?}"
    );
    for e in &events {
        if let EventBody::CodeDispatch(d) = &e.body {
            assert_eq!(d.parent_call_id, "c1");
            assert!(d.error.is_none(), "{d:?}");
        }
    }
    session.shutdown().await;
    harness.shutdown().await;
}
