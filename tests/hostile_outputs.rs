//! Hostile outputs become clear, bounded results: 100 MB of text (in bounded memory), JSON
//! nested far too deep, a presentation that panics, a failure message of megabytes, text
//! cleaned of bytes that were not UTF-8. The log stays small, parseable and valid, and the
//! session goes on.
//!
//! Bytes that are not UTF-8 cannot reach this crate's pipeline as such (a value's strings are
//! Rust strings); they come from disk through the file tools, whose test of them through the
//! whole pipeline is `crates/tool-fs/tests/read_tools.rs`
//! (`bytes_that_are_not_utf8_on_disk_become_clear_results`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    ContentBlock, EventBody, Hooks, SessionEvent, ToolContext, ToolDefinition, ToolFailure,
    ToolRegistry,
};
use dsh::scheduler::{PipelineConfig, SchedulerConfig, StepRequest};
use dsh::session::check;
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
        json!({
            "type": "object",
            "properties": {"kind": {"type": "string"}, "levels": {"type": "integer"}},
            "required": ["kind"]
        })
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
            "nested" => {
                let levels = input["levels"].as_u64().unwrap_or(0);
                let mut v = json!(0);
                for _ in 0..levels {
                    v = json!([v]);
                }
                v
            }
            "fail_huge" => return Err(ToolFailure::new("e".repeat(10 * 1024 * 1024))),
            "bytes" => {
                // Bytes from a file or a process are not always UTF-8: the tool cleans them
                // itself (a Rust string cannot hold them) without losing the rest.
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

/// Its value is fine; showing it panics.
struct Unpresentable;

#[async_trait]
impl ToolDefinition for Unpresentable {
    fn name(&self) -> &str {
        "unpresentable"
    }
    fn description(&self) -> &str {
        "cannot show what it returns"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!({"fine": true}))
    }
    fn present(&self, _value: &Value) -> Vec<ContentBlock> {
        panic!("presentation exploded on purpose");
    }
}

/// The tests of this file one at a time: the memory figures are the whole process's.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

/// Every line of the log is under `max` bytes, parses back to the same event, and the log
/// passes the checker.
fn assert_log_bounded_and_valid(events: &[SessionEvent], max: usize) {
    for e in events {
        let line = e.to_json_line();
        assert!(line.len() < max, "a log line of {} bytes", line.len());
        assert_eq!(&SessionEvent::from_json_line(&line).unwrap(), e);
    }
    check::check(events).unwrap();
}

/// The recorded `tool/result` of `call_id`: its message's text and its error code.
fn recorded(events: &[SessionEvent], call_id: &str) -> (String, Option<String>) {
    events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ToolResult { data, .. } if data.call_id == call_id => Some((
                data.message
                    .iter()
                    .filter_map(ContentBlock::as_text)
                    .collect::<String>(),
                data.error.as_ref().map(|e| e.code.as_str().to_string()),
            )),
            _ => None,
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_outputs_are_bounded_and_the_log_stays_whole() {
    let _serial = serial().await;
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Hostile).unwrap();
    let (harness, session, log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let rss_before = rss_bytes().unwrap();
    let out = session
        .run_step(StepRequest::new(vec![
            call("huge", "hostile", json!({"kind": "huge"})),
            call("deep", "hostile", json!({"kind": "deep"})),
            call("bytes", "hostile", json!({"kind": "bytes"})),
        ]))
        .await
        .unwrap();
    let cap = PipelineConfig::default().max_content_bytes;
    // 100 MB went through: the value is kept in the result (it is the canonical value), the
    // presentation was cut. The process holds about one copy, and never held many at once.
    const MB: u64 = 1024 * 1024;
    let held = rss_bytes().unwrap().saturating_sub(rss_before);
    let peak = peak_rss_bytes().unwrap().saturating_sub(rss_before);
    assert!(held < 300 * MB, "{} MB still resident", held / MB);
    assert!(peak < 600 * MB, "{} MB resident at the peak", peak / MB);

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

    let events = log.snapshot().await.unwrap();
    assert_log_bounded_and_valid(&events, cap + 4096);
    let (message, error) = recorded(&events, "huge");
    assert_eq!(error, None);
    assert!(
        message.len() <= cap + 200,
        "{} bytes recorded",
        message.len()
    );
    assert!(message.contains("output truncated"), "the cut is told");
    drop(out);
    let released = rss_bytes().unwrap().saturating_sub(rss_before);
    assert!(
        released < 50 * MB,
        "{} MB still resident once the results are gone",
        released / MB
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_that_cannot_be_presented_or_snapshotted_are_clear_bounded_errors() {
    let _serial = serial().await;
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Hostile).unwrap();
    registry.register(Unpresentable).unwrap();
    let (harness, session, log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let config = PipelineConfig::default();
    let limit = config.max_json_depth as u64;
    let out = session
        .run_step(StepRequest::new(vec![
            call("present", "unpresentable", json!({})),
            call(
                "at-limit",
                "hostile",
                json!({"kind": "nested", "levels": limit}),
            ),
            call(
                "over-limit",
                "hostile",
                json!({"kind": "nested", "levels": limit + 1}),
            ),
        ]))
        .await
        .unwrap();
    let codes: Vec<&str> = out.results.iter().map(code).collect();
    assert_eq!(codes, ["TOOL_ERROR", "ok", "PIPELINE_ERROR"]);
    assert_eq!(
        out.results[0].text(),
        "the tool failed to present its result: presentation exploded on purpose"
    );
    assert!(out.results[1].value().is_some(), "the limit itself is fine");
    assert_eq!(
        out.results[2].text(),
        format!(
            "the result could not be snapshotted: its value nests {} levels deep (the limit is {limit})",
            limit + 1
        )
    );
    assert!(
        out.results[2].value().is_none(),
        "nothing of the refused value is kept"
    );

    let events = log.snapshot().await.unwrap();
    assert_log_bounded_and_valid(&events, config.max_content_bytes + 4096);
    for (id, want) in [("present", "TOOL_ERROR"), ("over-limit", "PIPELINE_ERROR")] {
        assert_eq!(recorded(&events, id).1.as_deref(), Some(want), "{id}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_message_of_megabytes_is_recorded_cut() {
    let _serial = serial().await;
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Hostile).unwrap();
    let (harness, session, log) = open(registry, Hooks::new(), SchedulerConfig::default()).await;
    let cap = PipelineConfig::default().max_content_bytes;
    let out = session
        .run_step(StepRequest::new(vec![call(
            "fail-huge",
            "hostile",
            json!({"kind": "fail_huge"}),
        )]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "TOOL_ERROR");
    assert!(
        out.results[0].text().len() <= cap + 200,
        "{} bytes shown",
        out.results[0].text().len()
    );
    let events = log.snapshot().await.unwrap();
    assert_log_bounded_and_valid(&events, cap + 4096);
    session.shutdown().await;
    harness.shutdown().await;
}
