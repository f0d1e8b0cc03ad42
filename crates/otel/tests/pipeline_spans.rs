//! Real calls through dsh's pipeline, their spans bridged to OpenTelemetry and collected by
//! the SDK's in-memory exporter: names, kind, GenAI attributes, parents and error status as
//! a back end would receive them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use dsh_core::{
    ExecutionMode, Hooks, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh_otel::{Export, Telemetry, dsh_targets};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh_session::SessionLog;
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::{Value, json};
use std::sync::Arc;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

/// A read-only tool that answers its text.
struct Lookup;

#[async_trait]
impl ToolDefinition for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Returns its text"
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
        Ok(input["text"].clone())
    }
}

/// A tool whose body always fails.
struct Explode;

#[async_trait]
impl ToolDefinition for Explode {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> &str {
        "Fails"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Err(ToolFailure::new("it failed on purpose"))
    }
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// Runs one step (a success, a failure) with the bridge installed; returns what was exported.
async fn exported_spans() -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), Export::Simple);
    let subscriber =
        tracing_subscriber::registry().with(telemetry.layer().with_filter(dsh_targets()));
    let _default = tracing::subscriber::set_default(subscriber);

    let registry = Arc::new(ToolRegistry::new());
    registry.register(Lookup).unwrap();
    registry.register(Explode).unwrap();
    let harness = HarnessBuilder::new(registry)
        .hooks(Hooks::new())
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log, SchedulerConfig::default(), None)
        .await
        .unwrap();
    let outcome = session
        .run_step(StepRequest::new(vec![
            ToolCall::new("ok-call", "lookup", json!({"text": "private words"})),
            ToolCall::new("bad-call", "explode", json!({})),
        ]))
        .await
        .unwrap();
    assert!(!outcome.results[0].is_error());
    assert!(outcome.results[1].is_error());
    // Not one of dsh's spans: the filter keeps it out.
    tracing::info_span!(target: "some_dependency", "noise").in_scope(|| {});
    session.shutdown().await;
    harness.shutdown().await;
    telemetry.flush().unwrap();
    exporter.get_finished_spans().unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn pipeline_calls_are_exported_as_gen_ai_execute_tool_spans() {
    let spans = exported_spans().await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert!(!names.contains(&"noise"), "{names:?}");

    let call = |id: &str| -> &SpanData {
        let found: Vec<&SpanData> = spans
            .iter()
            .filter(|s| attr(s, "gen_ai.tool.call.id").as_deref() == Some(id))
            .collect();
        assert_eq!(found.len(), 1, "one span carries call id {id}: {names:?}");
        found[0]
    };
    let ok = call("ok-call");
    let bad = call("bad-call");

    // Names, kind, the GenAI attributes; the bridge's own `otel.*` fields are consumed.
    assert_eq!(ok.name, "execute_tool lookup");
    assert_eq!(bad.name, "execute_tool explode");
    for (span, tool) in [(ok, "lookup"), (bad, "explode")] {
        assert_eq!(span.span_kind, SpanKind::Internal);
        assert_eq!(
            attr(span, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
        assert_eq!(attr(span, "gen_ai.tool.name").as_deref(), Some(tool));
        assert_eq!(attr(span, "otel.name"), None);
        assert_eq!(attr(span, "otel.kind"), None);
        assert_eq!(
            attr(span, "gen_ai.tool.call.arguments"),
            None,
            "arguments are exported only when opted in"
        );
        assert_eq!(span.instrumentation_scope.name(), dsh_otel::SCOPE_NAME);
    }

    // The error: `error.type` is the error code, and the status says Error.
    assert_eq!(attr(ok, "error.type"), None);
    assert_eq!(ok.status, Status::Unset);
    assert_eq!(attr(bad, "error.type").as_deref(), Some("TOOL_ERROR"));
    assert_eq!(bad.status, Status::error("TOOL_ERROR"));

    // Each call's phases are its children, in its trace.
    for parent in [ok, bad] {
        for phase in ["prepare", "dispatch", "finalize"] {
            let children: Vec<&SpanData> = spans
                .iter()
                .filter(|s| s.name == phase && s.parent_span_id == parent.span_context.span_id())
                .collect();
            assert_eq!(
                children.len(),
                1,
                "one {phase} span under {}: {names:?}",
                parent.name
            );
            let child = children[0];
            assert_eq!(
                child.span_context.trace_id(),
                parent.span_context.trace_id()
            );
            assert_eq!(child.span_kind, SpanKind::Internal);
            assert_eq!(child.status, Status::Unset, "the error is the call's");
        }
        assert_ne!(parent.span_context.span_id(), SpanId::INVALID);
    }
}
