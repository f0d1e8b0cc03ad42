//! Tracing spans that follow OpenTelemetry's GenAI conventions.
//!
//! Each call is one span named `execute_tool` whose `otel.name` is `execute_tool {tool}`
//! (kind internal) with `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`,
//! and `error.type` (the error code) when the result is an error. Its children are the phases
//! `prepare`, `dispatch` and `finalize`. Arguments and results are recorded only when
//! `PipelineConfig::record_content` opts in (`gen_ai.tool.call.arguments`,
//! `gen_ai.tool.call.result`), since they may hold what a user would not ship to a tracing
//! back end.

use dsh_core::{Arguments, FrozenResult};
use tracing::Span;
use tracing::field::Empty;

/// The span of one call (or sub-call, with its parent's id).
pub(crate) fn call_span(
    tool: &str,
    call_id: &str,
    step: u64,
    parent: Option<&str>,
    arguments: &Arguments,
    record_content: bool,
) -> Span {
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = %format!("execute_tool {tool}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool,
        gen_ai.tool.call.id = %call_id,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
        dsh.step = step,
        dsh.parent_call_id = parent,
    );
    if record_content {
        span.record(
            "gen_ai.tool.call.arguments",
            arguments.to_logged().to_string().as_str(),
        );
    }
    span
}

/// A phase of a call: `prepare`, `dispatch` or `finalize`.
pub(crate) fn phase_span(parent: &Span, phase: &'static str) -> Span {
    match phase {
        "prepare" => tracing::info_span!(parent: parent, "prepare", otel.kind = "internal"),
        "dispatch" => tracing::info_span!(parent: parent, "dispatch", otel.kind = "internal"),
        _ => tracing::info_span!(parent: parent, "finalize", otel.kind = "internal"),
    }
}

/// Records the outcome on the call's span.
pub(crate) fn record_outcome(span: &Span, result: &FrozenResult, record_content: bool) {
    if let Some(code) = result.code() {
        span.record("error.type", code.as_str());
    }
    if record_content {
        span.record("gen_ai.tool.call.result", result.text().as_str());
    }
}
