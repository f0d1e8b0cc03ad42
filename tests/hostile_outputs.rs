//! Hostile outputs become clear, bounded results: 100 MB of text, JSON nested far too deep,
//! bytes that are not UTF-8. The log stays small and parseable, and the session goes on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{ContentBlock, Hooks, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh::scheduler::{SchedulerConfig, StepRequest};
use serde_json::{Value, json};
use std::sync::Arc;

/// Produces what its `kind` argument asks for.
struct Hostile;

#[async_trait]
impl ToolDefinition for Hostile {
    fn name(&self) -> &str {
        "hostile"
    }
    fn description(&self) -> &str {
        "returns awful things"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]})
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(match input["kind"].as_str().unwrap_or_default() {
            "huge" => Value::String("x".repeat(100 * 1024 * 1024)),
            "deep" => {
                let mut v = json!(0);
                for _ in 0..5_000 {
                    v = json!([v]);
                }
                v
            }
            "bytes" => {
                // Bytes from a file or a process are not always UTF-8: a tool must say so
                // without losing the rest.
                let raw: &[u8] = b"ok \xff\xfe then more";
                Value::String(String::from_utf8_lossy(raw).into_owned())
            }
            _ => json!("fine"),
        })
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        match value {
            Value::String(s) => vec![ContentBlock::text(s.clone())],
            other => vec![ContentBlock::text(format!(
                "{} levels",
                other.to_string().len() / 2
            ))],
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_outputs_are_bounded_and_the_log_stays_whole() {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Hostile).unwrap();
    let (harness, session, log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("huge", "hostile", json!({"kind": "huge"})),
            call("deep", "hostile", json!({"kind": "deep"})),
            call("bytes", "hostile", json!({"kind": "bytes"})),
        ]))
        .await
        .unwrap();
    let cap = dsh::scheduler::PipelineConfig::default().max_content_bytes;

    let huge = &out.results[0];
    assert_eq!(code(huge), "ok");
    assert!(
        huge.text().len() <= cap + 200,
        "{} bytes",
        huge.text().len()
    );
    assert!(huge.text().contains("output truncated"));
    assert_eq!(
        huge.meta().unwrap()["originalBytes"],
        json!(100 * 1024 * 1024)
    );

    let deep = &out.results[1];
    assert_eq!(code(deep), "PIPELINE_ERROR");
    assert!(deep.text().contains("nests 5000 levels"), "{}", deep.text());

    let bytes = &out.results[2];
    assert_eq!(code(bytes), "ok");
    assert_eq!(bytes.text(), "ok \u{FFFD}\u{FFFD} then more");

    for e in log.snapshot().await.unwrap() {
        let line = e.to_json_line();
        assert!(
            line.len() < cap + 4096,
            "a log line of {} bytes",
            line.len()
        );
        assert_eq!(dsh::core::SessionEvent::from_json_line(&line).unwrap(), e);
    }
    let next = session
        .run_step(StepRequest::new(vec![call(
            "after",
            "hostile",
            json!({"kind": "ok"}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&next.results[0]), "ok");
    session.shutdown().await;
    harness.shutdown().await;
}
