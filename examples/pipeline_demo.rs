//! Sends a few calls through the whole pipeline (a permission rule, a guard, an unknown tool,
//! malformed arguments, a parallel pair) and prints the session log, one event a line.
//!
//! Run it with `cargo run --example pipeline_demo`.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use async_trait::async_trait;
use dsh::core::{
    Arguments, Hooks, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry,
    around::{MetricsLayer, RetryLayer, TimeoutLayer},
    tool::ExecutionMode,
};
use dsh::guards::{FnGuard, GuardCall, GuardVerdict, PermissionRules};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh::session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;

/// Upper-cases its text; safe to run beside others.
struct Shout;

#[async_trait]
impl ToolDefinition for Shout {
    fn name(&self) -> &str {
        "shout"
    }
    fn description(&self) -> &str {
        "Upper-cases a text."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        let text = input["text"].as_str().unwrap_or_default();
        Ok(json!({ "shouted": text.to_uppercase() }))
    }
    fn present(&self, value: &Value) -> Vec<dsh::core::ContentBlock> {
        vec![dsh::core::ContentBlock::text(
            value["shouted"].as_str().unwrap_or_default(),
        )]
    }
}

/// Pretends to write a file (exclusive).
struct Write;

#[async_trait]
impl ToolDefinition for Write {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Pretends to write a file."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]})
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!(format!(
            "wrote {}",
            input["path"].as_str().unwrap_or("?")
        )))
    }
}

#[tokio::main]
async fn main() {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Shout).unwrap();
    registry.register(Write).unwrap();

    let mut hooks = Hooks::new();
    hooks.pre_execute(PermissionRules::from_toml(r#"deny = ["write_file(secrets/**)"]"#).unwrap());
    hooks.around(MetricsLayer::default());
    hooks.around(RetryLayer);

    // The harness installs the timeout wrapper innermost (inside metrics and retry); this one
    // also gives tools without their own `timeout_ms` a 30 s deadline.
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .timeout(TimeoutLayer::default().with_default_ms(30_000))
        .build()
        .await
        .unwrap();
    let _owner = harness
        .pipeline()
        .guards()
        .register(FnGuard::non_blocking(
            "no-etc",
            |call: &GuardCall| match call.arguments.get("path").and_then(Value::as_str) {
                Some(p) if p.starts_with("/etc") => GuardVerdict::Deny("/etc is off limits".into()),
                _ => GuardVerdict::Abstain,
            },
        ))
        .await
        .unwrap();

    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();

    let steps = vec![
        vec![
            ToolCall::new("call_1", "shout", json!({"text": "hello"})),
            ToolCall::new("call_2", "shout", json!({"text": "world"})),
        ],
        vec![
            ToolCall::new(
                "call_3",
                "write_file",
                json!({"path": "notes.txt", "content": "x"}),
            ),
            ToolCall::new(
                "call_4",
                "write_file",
                json!({"path": "secrets/key", "content": "x"}),
            ),
            ToolCall::new(
                "call_5",
                "write_file",
                json!({"path": "/etc/passwd", "content": "x"}),
            ),
        ],
        vec![
            ToolCall::new("call_6", "rm_rf", json!({})),
            ToolCall {
                call_id: "call_7".into(),
                name: "shout".into(),
                arguments: Arguments::parse("{not json"),
            },
        ],
    ];
    for calls in steps {
        let outcome = session.run_step(StepRequest::new(calls)).await.unwrap();
        for r in &outcome.results {
            let code = r.code().map(|c| c.as_str()).unwrap_or("ok");
            eprintln!(
                "step {} {} -> {code}: {}",
                outcome.step,
                r.call_id(),
                r.text()
            );
        }
    }
    for event in log.snapshot().await.unwrap() {
        println!("{}", event.to_json_line());
    }
    session.shutdown().await;
    harness.shutdown().await;
}
