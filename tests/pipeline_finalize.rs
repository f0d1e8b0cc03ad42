//! The finalize phase: post-execute (replace, block, context), normalization, exactly-once
//! `finalize_content`, observers, and what reaches the log (never the canonical value).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    ContentBlock, EventBody, FrozenResult, HookError, Hooks, PostExecuteContext,
    PostExecuteHandler, PostExecuteOutcome, ResultObserver, ToolRegistry,
};
use dsh::scheduler::{HarnessBuilder, PipelineConfig, SchedulerConfig, StepRequest};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Answers per call id.
struct Post {
    name: &'static str,
    by_call: fn(&str, &Value) -> Result<PostExecuteOutcome, HookError>,
}

#[async_trait]
impl PostExecuteHandler for Post {
    fn name(&self) -> &str {
        self.name
    }
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        (self.by_call)(call.call_id, call.value)
    }
}

#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<FrozenResult>>>);

impl ResultObserver for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn observe(&self, result: &FrozenResult) {
        self.0.lock().unwrap().push(result.clone());
    }
}

struct PanickingObserver;

impl ResultObserver for PanickingObserver {
    fn name(&self) -> &str {
        "panicking"
    }
    fn observe(&self, _result: &FrozenResult) {
        panic!("observer exploded")
    }
}

#[tokio::test]
async fn post_execute_replaces_content_or_value_blocks_and_adds_context() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.post_execute(Post {
        name: "rewriter",
        by_call: |id, _v| {
            Ok(match id {
                "content" => {
                    PostExecuteOutcome::replace_content(vec![ContentBlock::text("redacted")])
                }
                "value" => PostExecuteOutcome::replace_value(json!({"shown": "from new value"})),
                "bad-value" => PostExecuteOutcome::replace_value(json!({"no": "shown"})),
                "block" => {
                    PostExecuteOutcome::block("contains a secret").with_context("blocked note")
                }
                "context" => PostExecuteOutcome::accept()
                    .with_context("first")
                    .with_context("second"),
                _ => PostExecuteOutcome::accept(),
            })
        },
    });
    hooks.post_execute(Post {
        name: "later",
        by_call: |id, v| {
            // Sees the value as replaced by the earlier handler.
            if id == "value" {
                assert_eq!(v["shown"], "from new value");
            }
            Ok(if id == "context" {
                PostExecuteOutcome::accept().with_context("third")
            } else {
                PostExecuteOutcome::accept()
            })
        },
    });
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("content", "par", json!({"text": "secret"})),
            call("value", "par", json!({"text": "old"})),
            call("bad-value", "par", json!({})),
            call("block", "par", json!({})),
            call("context", "par", json!({})),
            call("failed", "par", json!({"fail": "x"})),
        ]))
        .await
        .unwrap();
    let r = &out.results;
    assert_eq!(r[0].text(), format!("redacted\n{FINALIZED}"));
    assert_eq!(
        r[0].value().unwrap()["shown"],
        "secret",
        "content replaced, value kept"
    );
    assert_eq!(
        r[1].text(),
        format!("from new value\n{FINALIZED}"),
        "value replaced, content presented again"
    );
    assert_eq!(
        code(&r[2]),
        "PIPELINE_ERROR",
        "a replaced value must keep the output schema"
    );
    assert_eq!(code(&r[3]), "BLOCKED");
    assert_eq!(r[3].error_info().unwrap().message, "contains a secret");
    assert_eq!(code(&r[5]), "TOOL_ERROR");
    let contexts: Vec<_> = out
        .deferred
        .iter()
        .map(|d| (d.content.as_str(), d.origin.as_str()))
        .collect();
    assert!(contexts.contains(&("blocked note", "block")));
    let mine: Vec<_> = contexts
        .iter()
        .filter(|c| c.1 == "context")
        .map(|c| c.0)
        .collect();
    assert_eq!(mine, ["first", "second", "third"], "first in, first out");

    // user/message events come after every result of the step.
    let events = log.snapshot().await.unwrap();
    let last_result = events
        .iter()
        .rposition(|e| matches!(e.body, EventBody::ToolResult { .. }))
        .unwrap();
    let first_user = events
        .iter()
        .position(|e| matches!(e.body, EventBody::UserMessage(_)))
        .unwrap();
    assert!(first_user > last_result);
    assert_eq!(events.len(), 6 * 2 + 4);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_failing_post_execute_handler_is_a_pipeline_error() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.post_execute(Post {
        name: "broken",
        by_call: |id, _| {
            if id == "panic" {
                panic!("post exploded")
            }
            Err(HookError::new("scanner offline"))
        },
    });
    let (harness, session, _log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("err", "par", json!({})),
            call("panic", "par", json!({})),
        ]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "PIPELINE_ERROR");
    assert!(out.results[0].text().contains("scanner offline"));
    assert_eq!(code(&out.results[1]), "PIPELINE_ERROR");
    assert!(out.results[1].text().contains("post exploded"));
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn the_canonical_value_never_reaches_the_log() {
    let probe = Arc::new(Probe::default());
    let recorder = Recorder::default();
    let mut hooks = Hooks::new();
    hooks.observe(recorder.clone());
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let marker = "MARKER-7f3a9c-not-for-the-model";
    let out = session
        .run_step(StepRequest::new(vec![call(
            "c",
            "par",
            json!({"marker": marker, "text": "visible"}),
        )]))
        .await
        .unwrap();
    // The value carries the marker in memory ...
    assert_eq!(out.results[0].value().unwrap()["marker"], marker);
    assert_eq!(
        recorder.0.lock().unwrap()[0].value().unwrap()["marker"],
        marker
    );
    // ... but the log keeps only what the model saw. (The call's own arguments carry the
    // marker too, so look at results only.)
    for e in log.snapshot().await.unwrap() {
        if let EventBody::ToolResult { .. } = e.body {
            let line = e.to_json_line();
            assert!(!line.contains(marker), "value leaked into the log: {line}");
            assert!(line.contains("visible"));
        }
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn finalize_content_runs_exactly_once_per_result_and_observers_see_the_frozen_result() {
    let probe = Arc::new(Probe::default());
    let recorder = Recorder::default();
    let mut hooks = Hooks::new();
    hooks.observe(PanickingObserver);
    hooks.observe(recorder.clone());
    hooks.post_execute(Post {
        name: "blocker",
        by_call: |id, _| {
            Ok(if id == "b" {
                PostExecuteOutcome::block("no")
            } else {
                PostExecuteOutcome::accept()
            })
        },
    });
    let (harness, session, _log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("ok", "par", json!({})),
            call("err", "par", json!({"fail": "x"})),
            call("b", "ex", json!({})),
            call("bad", "ex", json!({"nope": 1})),
            call("unknown", "nope", json!({})),
        ]))
        .await
        .unwrap();
    for r in &out.results[..4] {
        assert_eq!(
            r.text().matches(FINALIZED).count(),
            1,
            "{}: {}",
            r.call_id(),
            r.text()
        );
    }
    assert_eq!(
        probe.finalized.load(Ordering::SeqCst),
        4,
        "once per result of a known tool"
    );
    assert!(!out.results[4].text().contains(FINALIZED));
    // A panicking observer changed nothing, and the next observer still ran.
    let seen = recorder.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 5);
    for r in &out.results {
        assert!(
            seen.contains(r),
            "observer saw a different result for {}",
            r.call_id()
        );
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_panicking_finalize_content_is_a_pipeline_error() {
    let probe = Arc::new(Probe::default());
    let registry = Arc::new(ToolRegistry::new());
    let mut tool = ProbeTool::new("fragile", true, &probe);
    tool.finalize_panics = true;
    registry.register(tool).unwrap();
    let (harness, session, _log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![call("c", "fragile", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "PIPELINE_ERROR");
    assert!(out.results[0].text().contains("finalize_content"));
    assert_eq!(probe.finalized.load(Ordering::SeqCst), 1);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn frozen_results_round_trip_through_json_without_loss() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![
            call(
                "a",
                "par",
                json!({"text": "héllo \u{1F600} \"quoted\"\n", "marker": "m"}),
            ),
            call("b", "par", json!({"fail": "nope"})),
        ]))
        .await
        .unwrap();
    for r in &out.results {
        let json = serde_json::to_string(r).unwrap();
        let back: FrozenResult = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, r);
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn huge_and_deeply_nested_outputs_become_bounded_results() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.post_execute(Post {
        name: "deepen",
        by_call: |id, _| {
            Ok(if id == "deep" {
                let mut v = json!("leaf");
                for _ in 0..300 {
                    v = json!([v]);
                }
                PostExecuteOutcome::replace_value(json!({"shown": "deep", "nested": v}))
            } else {
                PostExecuteOutcome::accept()
            })
        },
    });
    let config = PipelineConfig {
        max_content_bytes: 1024,
        ..PipelineConfig::default()
    };
    let builder = HarnessBuilder::new(probe_registry(&probe))
        .hooks(hooks)
        .config(config);
    let (harness, session, log) = open_with(builder, SchedulerConfig::default()).await;
    let big = "x".repeat(100_000);
    let out = session
        .run_step(StepRequest::new(vec![
            call("big", "par", json!({"text": big})),
            call("deep", "par", json!({})),
        ]))
        .await
        .unwrap();
    let text = out.results[0].text();
    assert_eq!(code(&out.results[0]), "ok");
    assert!(
        text.len() < 1300,
        "content was not capped: {} bytes",
        text.len()
    );
    assert!(text.contains("output truncated"));
    assert_eq!(
        out.results[0].meta().unwrap()["originalBytes"],
        json!(100_000)
    );
    assert_eq!(code(&out.results[1]), "PIPELINE_ERROR");
    assert!(out.results[1].text().contains("nests"));
    // Both results are in the log, which stays parseable.
    let events = log.snapshot().await.unwrap();
    for e in &events {
        assert_eq!(
            dsh::core::SessionEvent::from_json_line(&e.to_json_line()).unwrap(),
            *e
        );
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn replacing_the_content_and_then_the_value_or_back_is_a_pipeline_error() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.post_execute(Post {
        name: "redactor",
        by_call: |id, _| {
            Ok(match id {
                "content-then-value" | "content-twice" => {
                    PostExecuteOutcome::replace_content(vec![ContentBlock::text("[redacted]")])
                }
                "value-then-content" => {
                    PostExecuteOutcome::replace_value(json!({"shown": "new value"}))
                }
                _ => PostExecuteOutcome::accept(),
            })
        },
    });
    hooks.post_execute(Post {
        name: "enricher",
        by_call: |id, _| {
            Ok(match id {
                "content-then-value" => {
                    PostExecuteOutcome::replace_value(json!({"shown": "secret again"}))
                }
                "value-then-content" => {
                    PostExecuteOutcome::replace_content(vec![ContentBlock::text("other")])
                }
                "content-twice" => PostExecuteOutcome::replace_content(vec![ContentBlock::text(
                    "[redacted twice]",
                )]),
                _ => PostExecuteOutcome::accept(),
            })
        },
    });
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("content-then-value", "par", json!({"text": "secret"})),
            call("value-then-content", "par", json!({"text": "old"})),
            call("content-twice", "par", json!({"text": "secret"})),
        ]))
        .await
        .unwrap();
    let r = &out.results;
    for mixed in &r[..2] {
        assert_eq!(code(mixed), "PIPELINE_ERROR", "{}", mixed.text());
        let text = mixed.text();
        assert!(
            text.contains("`enricher`") && text.contains("`redactor`"),
            "names both handlers: {text}"
        );
        assert!(!text.contains("secret"), "{text}");
    }
    // The same kind twice is a waterfall: the later one wins.
    assert_eq!(r[2].text(), format!("[redacted twice]\n{FINALIZED}"));
    for e in log.snapshot().await.unwrap() {
        assert!(
            !matches!(e.body, EventBody::ToolResult { .. }) || !e.to_json_line().contains("secret"),
            "the redaction was undone in the log: {}",
            e.to_json_line()
        );
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn results_the_scheduler_closes_itself_pass_finalize_and_the_observers_once() {
    let probe = Arc::new(Probe::default());
    let observed = Observed::default();
    let mut hooks = Hooks::new();
    hooks.observe(observed.clone());
    let builder = HarnessBuilder::new(probe_registry(&probe)).hooks(hooks);
    let harness = builder.build().await.unwrap();

    // Calls a step never reached (a failed sibling cancels the rest of the step).
    let session = harness
        .open(
            dsh::session::SessionLog::memory().await.unwrap(),
            SchedulerConfig {
                sibling_policy: dsh::scheduler::SiblingPolicy::CancelSiblings,
                ..SchedulerConfig::default()
            },
            None,
        )
        .await
        .unwrap();
    let out = session
        .run_step(StepRequest::new(vec![
            call("fails", "ex", json!({"fail": "x"})),
            call("never1", "ex", json!({})),
            call("never2", "par", json!({})),
        ]))
        .await
        .unwrap();
    let codes: Vec<_> = out.results.iter().map(code).collect();
    assert_eq!(
        codes,
        [
            "TOOL_ERROR",
            "ABORTED_BEFORE_DISPATCH",
            "ABORTED_BEFORE_DISPATCH"
        ]
    );
    for r in &out.results {
        assert_eq!(r.text().matches(FINALIZED).count(), 1, "{}", r.text());
        assert_eq!(
            observed.of(r.call_id()),
            std::slice::from_ref(r),
            "{}",
            r.call_id()
        );
    }
    assert_eq!(probe.finalized.load(Ordering::SeqCst), 3);
    session.shutdown().await;

    // A call whose tool/call cannot be recorded: it does not run, and still gets one result.
    let log = refusing_log(|e| e.call_id() == Some("unrecordable")).await;
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let err = session
        .run_step(StepRequest::new(vec![call(
            "unrecordable",
            "ex",
            json!({}),
        )]))
        .await
        .unwrap_err();
    let dsh::scheduler::SchedulerError::LogFailed { outcome, .. } = err else {
        panic!("expected LogFailed, got {err}");
    };
    let r = &outcome.results[0];
    assert_eq!(code(r), "PIPELINE_ERROR");
    assert!(r.text().contains("could not be recorded"), "{}", r.text());
    assert_eq!(r.text().matches(FINALIZED).count(), 1, "{}", r.text());
    assert_eq!(observed.of("unrecordable"), std::slice::from_ref(r));
    assert_eq!(probe.finalized.load(Ordering::SeqCst), 4);
    assert!(!probe.seen.lock().unwrap().contains_key("unrecordable"));
    assert!(log.snapshot().await.unwrap().is_empty());
    session.shutdown().await;
    harness.shutdown().await;
}

/// Sub-calls its body starts in a task of their own, and does not wait for: `during` starts
/// one that outlives the parent, `after` one that begins only once the parent has answered
/// (when `go` fires).
struct Spawner {
    got: Arc<Mutex<Vec<FrozenResult>>>,
    go: Arc<tokio::sync::Notify>,
    probe: Arc<Probe>,
}

#[async_trait]
impl dsh::core::ToolDefinition for Spawner {
    fn name(&self) -> &str {
        "spawner"
    }
    fn description(&self) -> &str {
        "leaves sub-calls behind"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(
        &self,
        input: Value,
        ctx: dsh::core::ToolContext,
    ) -> Result<Value, dsh::core::ToolFailure> {
        let dispatcher = ctx.dispatcher.clone().unwrap();
        let got = self.got.clone();
        let go = self.go.clone();
        let after = input["mode"] == "after";
        let started = self.probe.started.load(Ordering::SeqCst);
        tokio::spawn(async move {
            if after {
                go.notified().await;
            }
            let r = dispatcher
                .dispatch(&ctx, "par", json!({"sleep_ms": 50, "ignore_cancel": true}))
                .await;
            got.lock().unwrap().push(r);
        });
        if !after {
            // Answer once the sub-call's body runs.
            while self.probe.started.load(Ordering::SeqCst) == started {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
        Ok(json!("parent done"))
    }
}

#[tokio::test(start_paused = true)]
async fn sub_calls_that_outlive_their_parent_still_pass_finalize_and_the_observers_once() {
    let probe = Arc::new(Probe::default());
    let observed = Observed::default();
    let mut hooks = Hooks::new();
    hooks.observe(observed.clone());
    let registry = probe_registry(&probe);
    let spawner = Spawner {
        got: Arc::default(),
        go: Arc::new(tokio::sync::Notify::new()),
        probe: probe.clone(),
    };
    let (got, go) = (spawner.got.clone(), spawner.go.clone());
    registry.register(spawner).unwrap();
    let (harness, session, log) = open(registry, hooks, SchedulerConfig::default()).await;

    // Still running when its parent answers: the ledger closes it as ABORTED, before the
    // parent's result, and that is also what the sub-call answers when it ends.
    let out = session
        .run_step(StepRequest::new(vec![call(
            "during",
            "spawner",
            json!({"mode": "during"}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "ok");
    while got.lock().unwrap().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let late = got.lock().unwrap()[0].clone();
    assert_eq!(late.call_id(), "during.sub1");
    assert_eq!(code(&late), "ABORTED");
    assert_eq!(late.text().matches(FINALIZED).count(), 1, "{}", late.text());
    assert_eq!(
        observed.of("during.sub1"),
        std::slice::from_ref(&late),
        "observed once, as answered"
    );
    assert_eq!(probe.finalized.load(Ordering::SeqCst), 1);
    let events = log.snapshot().await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(kinds, ["tool/call", "tool/code-dispatch", "tool/result"]);
    match &events[1].body {
        EventBody::CodeDispatch(d) => {
            assert_eq!(
                d.message,
                late.content(),
                "the log holds the finalized content"
            )
        }
        other => panic!("{other:?}"),
    }

    // Begun after its parent answered: refused, not recorded, and still one frozen result.
    let out = session
        .run_step(StepRequest::new(vec![call(
            "after",
            "spawner",
            json!({"mode": "after"}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "ok");
    go.notify_one();
    while got.lock().unwrap().len() < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let refused = got.lock().unwrap()[1].clone();
    assert_eq!(refused.call_id(), "after.sub1");
    assert_eq!(code(&refused), "ABORTED_BEFORE_DISPATCH");
    assert_eq!(refused.text().matches(FINALIZED).count(), 1);
    assert_eq!(observed.of("after.sub1"), [refused]);
    assert_eq!(probe.finalized.load(Ordering::SeqCst), 2);
    assert_eq!(
        log.snapshot().await.unwrap().len(),
        5,
        "nothing after the parent's result"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

/// Runs the sub-calls listed in its input and keeps their values in its own (never shown).
struct Batch;

#[async_trait]
impl dsh::core::ToolDefinition for Batch {
    fn name(&self) -> &str {
        "batch"
    }
    fn description(&self) -> &str {
        "runs sub-calls"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(
        &self,
        input: Value,
        ctx: dsh::core::ToolContext,
    ) -> Result<Value, dsh::core::ToolFailure> {
        let dispatcher = ctx.dispatcher.clone().unwrap();
        let mut texts = Vec::new();
        let mut values = Vec::new();
        for c in input["calls"].as_array().cloned().unwrap_or_default() {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            let r = dispatcher.dispatch(&ctx, &name, c["args"].clone()).await;
            texts.push(r.text());
            values.push(r.value().cloned().unwrap_or(Value::Null));
        }
        Ok(json!({"texts": texts, "values": values}))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(value["texts"].to_string())]
    }
}

/// Shows `text` and keeps a marker of its own making in the value.
struct Secretive;

const SECRET: &str = "SECRET-5d1e-only-in-the-value";

#[async_trait]
impl dsh::core::ToolDefinition for Secretive {
    fn name(&self) -> &str {
        "secretive"
    }
    fn description(&self) -> &str {
        "keeps a secret"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(
        &self,
        input: Value,
        _ctx: dsh::core::ToolContext,
    ) -> Result<Value, dsh::core::ToolFailure> {
        Ok(json!({"shown": input["text"], "secret": SECRET}))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(
            value["shown"].as_str().unwrap_or_default().to_string(),
        )]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canonical_value_never_reaches_a_file_log_nor_a_code_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Secretive).unwrap();
    registry.register(Batch).unwrap();
    let recorder = Recorder::default();
    let mut hooks = Hooks::new();
    hooks.observe(recorder.clone());
    quiet_intentional_panics();
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .build()
        .await
        .unwrap();
    let (log, _) =
        dsh::session::SessionLog::open_file(&path, dsh::session::Durability::Batch, None)
            .await
            .unwrap();
    let session = harness
        .open(log, SchedulerConfig::default(), None)
        .await
        .unwrap();
    let out = session
        .run_step(StepRequest::new(vec![
            call("direct", "secretive", json!({"text": "visible-direct"})),
            call(
                "code",
                "batch",
                json!({"calls": [{"name": "secretive", "args": {"text": "visible-sub"}}]}),
            ),
        ]))
        .await
        .unwrap();
    // In memory, the values carry the secret: the direct call's, the sub-call's (as the
    // observers saw it), and the parent's, which kept the sub-call's value.
    assert_eq!(out.results[0].value().unwrap()["secret"], SECRET);
    assert_eq!(
        out.results[1].value().unwrap()["values"][0]["secret"],
        SECRET
    );
    let sub = recorder
        .0
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.call_id() == "code.sub1")
        .cloned()
        .unwrap();
    assert_eq!(sub.value().unwrap()["secret"], SECRET);
    session.shutdown().await;
    harness.shutdown().await;

    // On disk, only what was shown.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains(SECRET),
        "a value leaked into the log:\n{text}"
    );
    assert!(
        text.contains("visible-direct") && text.contains("visible-sub"),
        "{text}"
    );
    let events = dsh::session::replay::read_log(&path).unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(
        kinds,
        [
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/code-dispatch",
            "tool/result"
        ]
    );
}

#[tokio::test]
async fn a_sub_call_that_cannot_be_recorded_withholds_its_parents_result() {
    let probe = Arc::new(Probe::default());
    let observed = Observed::default();
    let mut hooks = Hooks::new();
    hooks.observe(observed.clone());
    let registry = probe_registry(&probe);
    registry.register(Batch).unwrap();
    quiet_intentional_panics();
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .build()
        .await
        .unwrap();
    let log = refusing_log(|e| matches!(e.body, EventBody::CodeDispatch(_))).await;
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let err = session
        .run_step(StepRequest::new(vec![call(
            "code",
            "batch",
            json!({"calls": [{"name": "par", "args": {"text": "sub-output"}}]}),
        )]))
        .await
        .unwrap_err();
    let dsh::scheduler::SchedulerError::LogFailed { error, outcome } = err else {
        panic!("expected LogFailed, got {err}");
    };
    assert!(error.to_string().contains("No space left"), "{error}");
    let parent = &outcome.results[0];
    assert_eq!(code(parent), "PIPELINE_ERROR", "{}", parent.text());
    assert!(parent.text().contains("code.sub1"), "{}", parent.text());
    assert!(!parent.text().contains("sub-output"), "{}", parent.text());
    // The sub-call ran, and its one result passed finalize and the observers.
    let sub = observed.of("code.sub1");
    assert_eq!(sub.len(), 1);
    assert_eq!(code(&sub[0]), "ok");
    assert_eq!(sub[0].text(), format!("sub-output\n{FINALIZED}"));
    assert_eq!(probe.finalized.load(Ordering::SeqCst), 1);
    // The log holds the parent's call and its (withheld) result, and passes the checker.
    let events = log.snapshot().await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(kinds, ["tool/call", "tool/result"]);
    assert!(dsh::session::check::check(&events).is_ok());
    session.shutdown().await;
    harness.shutdown().await;
}
