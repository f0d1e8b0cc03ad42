//! Tracing spans follow OpenTelemetry's GenAI conventions: one `execute_tool` span per call
//! with the gen_ai attributes and `error.type`, and a child span per phase.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh::core::Hooks;
use dsh::scheduler::{HarnessBuilder, PipelineConfig, SchedulerConfig, StepRequest};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, Clone, Default)]
struct SpanSeen {
    name: String,
    parent: Option<u64>,
    fields: HashMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<HashMap<u64, SpanSeen>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = SpanSeen {
            name: attrs.metadata().name().to_string(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.id().into_u64()),
            ..SpanSeen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        self.0.lock().unwrap().insert(id.into_u64(), seen);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(seen) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

async fn spans_of(record_content: bool) -> Vec<SpanSeen> {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let probe = Arc::new(Probe::default());
    let builder = HarnessBuilder::new(probe_registry(&probe))
        .hooks(Hooks::new())
        .config(PipelineConfig {
            record_content,
            ..PipelineConfig::default()
        });
    let (harness, session, _log) = open_with(builder, SchedulerConfig::default()).await;
    session
        .run_step(StepRequest::new(vec![
            call("ok-call", "par", json!({"text": "secret-ish"})),
            call("bad-call", "ex", json!({"fail": "nope"})),
        ]))
        .await
        .unwrap();
    session.shutdown().await;
    harness.shutdown().await;
    let all = capture.0.lock().unwrap().clone();
    let mut spans: Vec<SpanSeen> = all.values().cloned().collect();
    // Resolve parents to names for the assertions.
    for s in &mut spans {
        if let Some(p) = s.parent {
            let parent_name = all.get(&p).map(|x| x.name.clone()).unwrap_or_default();
            let parent_call = all
                .get(&p)
                .and_then(|x| x.fields.get("gen_ai.tool.call.id").cloned());
            s.fields.insert("parent.name".into(), parent_name);
            if let Some(c) = parent_call {
                s.fields.insert("parent.call".into(), c);
            }
        }
    }
    spans
}

#[tokio::test(flavor = "current_thread")]
async fn each_call_has_an_execute_tool_span_with_gen_ai_attributes_and_phase_children() {
    let spans = spans_of(false).await;
    let call_span = |id: &str| {
        spans
            .iter()
            .find(|s| {
                s.name == "execute_tool"
                    && s.fields.get("gen_ai.tool.call.id").map(String::as_str) == Some(id)
            })
            .unwrap_or_else(|| panic!("no execute_tool span for {id}: {spans:#?}"))
            .clone()
    };
    let ok = call_span("ok-call");
    assert_eq!(ok.fields["otel.name"], "execute_tool par");
    assert_eq!(ok.fields["otel.kind"], "internal");
    assert_eq!(ok.fields["gen_ai.operation.name"], "execute_tool");
    assert_eq!(ok.fields["gen_ai.tool.name"], "par");
    assert!(
        !ok.fields.contains_key("error.type"),
        "a success has no error.type"
    );
    assert!(
        !ok.fields.contains_key("gen_ai.tool.call.arguments"),
        "content is opt-in"
    );

    let bad = call_span("bad-call");
    assert_eq!(bad.fields["error.type"], "TOOL_ERROR");

    for phase in ["prepare", "dispatch", "finalize"] {
        for id in ["ok-call", "bad-call"] {
            assert!(
                spans.iter().any(|s| s.name == phase
                    && s.fields.get("parent.name").map(String::as_str) == Some("execute_tool")
                    && s.fields.get("parent.call").map(String::as_str) == Some(id)),
                "no {phase} span under {id}"
            );
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn arguments_and_results_are_recorded_only_when_opted_in() {
    let spans = spans_of(true).await;
    let ok = spans
        .iter()
        .find(|s| {
            s.name == "execute_tool"
                && s.fields.get("gen_ai.tool.call.id").map(String::as_str) == Some("ok-call")
        })
        .unwrap();
    assert!(ok.fields["gen_ai.tool.call.arguments"].contains("secret-ish"));
    assert!(ok.fields["gen_ai.tool.call.result"].contains("secret-ish"));
}
