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
