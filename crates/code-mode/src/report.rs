//! What `run_code` answers: the script's value, its console, and every sub-call's outcome,
//! with denials first and binding.

use crate::bridge::{EngineReport, ScriptEnd, Stop};
use crate::limits::CodeLimits;
use dsh_core::{CancelReason, ContentBlock, ErrorCode, FrozenResult, ToolFailure};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// Codes a script can never turn into a success: policy said no.
fn is_binding(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::Denied | ErrorCode::Blocked)
}

/// One sub-call as the result lists it.
#[derive(Debug, Clone)]
pub(crate) struct SubCallRecord {
    tool: String,
    result: Option<FrozenResult>,
}

impl SubCallRecord {
    pub(crate) fn requested(tool: &str) -> SubCallRecord {
        SubCallRecord {
            tool: tool.to_string(),
            result: None,
        }
    }

    pub(crate) fn finish(&mut self, result: FrozenResult) {
        self.result = Some(result);
    }

    fn denial(&self) -> Option<(&str, ErrorCode, &str)> {
        let r = self.result.as_ref()?;
        let e = r.error_info()?;
        is_binding(e.code).then_some((r.call_id(), e.code, e.message.as_str()))
    }

    fn summary(&self) -> Value {
        match &self.result {
            None => json!({"tool": self.tool, "outcome": "unfinished"}),
            Some(r) => match r.error_info() {
                None => json!({"callId": r.call_id(), "tool": self.tool, "outcome": "ok"}),
                Some(e) => json!({
                    "callId": r.call_id(),
                    "tool": self.tool,
                    "outcome": e.code.as_str(),
                    "message": e.message,
                }),
            },
        }
    }
}

/// What a sub-call's promise settles with, as the prelude's `settle` reads it.
pub(crate) fn reply_json(r: &FrozenResult) -> String {
    let reply = match r.error_info() {
        None => json!({
            "ok": true,
            "result": {
                "callId": r.call_id(),
                "tool": r.tool(),
                "text": r.text(),
                "content": r.content(),
                "value": r.value(),
            }
        }),
        Some(e) => json!({
            "ok": false,
            "denied": is_binding(e.code),
            "code": e.code.as_str(),
            "message": e.message,
            "tool": r.tool(),
            "callId": r.call_id(),
        }),
    };
    reply.to_string()
}

/// The canonical value of a script that returned and had nothing denied.
pub(crate) fn success_value(value: Value, report: &EngineReport, calls: &[SubCallRecord]) -> Value {
    json!({
        "returned": value,
        "console": report.console,
        "consoleDroppedBytes": report.console_dropped,
        "subCalls": calls.iter().map(SubCallRecord::summary).collect::<Vec<_>>(),
    })
}

/// The JSON Schema of [`success_value`].
pub(crate) fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "returned": {},
            "console": {"type": "string"},
            "consoleDroppedBytes": {"type": "integer", "minimum": 0},
            "subCalls": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "callId": {"type": "string"},
                        "tool": {"type": "string"},
                        "outcome": {"type": "string"},
                        "message": {"type": "string"}
                    },
                    "required": ["tool", "outcome"]
                }
            }
        },
        "required": ["returned", "console", "consoleDroppedBytes", "subCalls"]
    })
}

/// The text the model sees for a success value.
pub(crate) fn present(value: &Value) -> Vec<ContentBlock> {
    let mut out = String::new();
    let _ = write!(out, "returned: {}", value["returned"]);
    console_section(
        &mut out,
        value["console"].as_str().unwrap_or_default(),
        value["consoleDroppedBytes"].as_u64().unwrap_or(0),
    );
    if let Some(calls) = value["subCalls"].as_array() {
        calls_section(&mut out, calls);
    }
    vec![ContentBlock::text(out)]
}

fn console_section(out: &mut String, console: &str, dropped: u64) {
    if console.is_empty() && dropped == 0 {
        return;
    }
    out.push_str("\nconsole:\n");
    out.push_str(console);
    if dropped > 0 {
        let _ = write!(
            out,
            "\n[console output cut here: {dropped} more bytes were dropped]"
        );
    }
}

fn calls_section(out: &mut String, calls: &[Value]) {
    if calls.is_empty() {
        return;
    }
    let _ = write!(out, "\nsub-calls ({}):", calls.len());
    for c in calls {
        let id = c["callId"].as_str().unwrap_or("-");
        let tool = c["tool"].as_str().unwrap_or_default();
        let outcome = c["outcome"].as_str().unwrap_or_default();
        let _ = write!(out, "\n- {id} {tool}: {outcome}");
        if let Some(message) = c["message"].as_str() {
            let _ = write!(out, ": {message}");
        }
    }
}

/// Turns a finished script into the body's answer: the success value, or a failure whose
/// message carries the whole report (what the model sees of an error is its message).
pub(crate) fn answer(
    report: EngineReport,
    calls: &[SubCallRecord],
    limits: &CodeLimits,
    cancelled: Option<CancelReason>,
) -> Result<Value, ToolFailure> {
    let denials: Vec<_> = calls.iter().filter_map(SubCallRecord::denial).collect();
    let summaries: Vec<Value> = calls.iter().map(SubCallRecord::summary).collect();
    let (code, what) = match (&report.end, cancelled) {
        (_, Some(reason)) if reason.is_timeout() => (ErrorCode::ToolTimeout, timeout_line(limits)),
        (_, Some(reason)) => (
            ErrorCode::Aborted,
            format!("was cancelled ({reason}); it and its running sub-calls were stopped."),
        ),
        (ScriptEnd::Returned(value), None) if denials.is_empty() => {
            return Ok(success_value(value.clone(), &report, calls));
        }
        (end, None) => end_line(end, limits),
    };
    let mut out = String::new();
    let code = if !denials.is_empty() && !code.is_abort() {
        let _ = write!(
            out,
            "DENIED: {} sub-call(s) of this script were refused by policy. A refusal is binding: \
             the refused action did not happen, and the script cannot turn it into a success.",
            denials.len()
        );
        for (id, c, why) in &denials {
            let _ = write!(out, "\n- {id} {c}: {why}");
        }
        let _ = write!(out, "\nThe script then {what}");
        ErrorCode::Denied
    } else {
        let _ = write!(out, "The script {what}");
        code
    };
    console_section(&mut out, &report.console, report.console_dropped as u64);
    calls_section(&mut out, &summaries);
    Err(ToolFailure::with_code(code, out))
}

fn timeout_line(limits: &CodeLimits) -> String {
    format!(
        "did not finish within its time limit of {} ms and was stopped.",
        limits.timeout_ms()
    )
}

/// A limit as people write it: `16 MiB`, `512 KiB`, `1000 bytes`.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

fn end_line(end: &ScriptEnd, limits: &CodeLimits) -> (ErrorCode, String) {
    let tool_error = |s: String| (ErrorCode::ToolError, s);
    match end {
        ScriptEnd::Returned(v) => tool_error(format!("returned: {v}")),
        ScriptEnd::Threw(text) => tool_error(format!("threw an uncaught exception: {text}")),
        ScriptEnd::Syntax {
            message,
            line,
            column,
        } => tool_error(format!(
            "did not compile: SyntaxError at line {line}, column {column}: {message}"
        )),
        ScriptEnd::OutOfMemory => tool_error(format!(
            "ran out of memory (it may use at most {}) and was stopped.",
            size(limits.memory_bytes)
        )),
        ScriptEnd::StackOverflow => tool_error(format!(
            "exceeded its stack limit of {} (recursion too deep) and was stopped.",
            size(limits.stack_bytes)
        )),
        ScriptEnd::BadResult(why) => tool_error(format!(
            "returned a value that cannot be turned into JSON: {why}"
        )),
        ScriptEnd::ResultTooLarge(n) => tool_error(format!(
            "returned {n} bytes of JSON, over the limit of {} bytes; return less (a summary, or \
             the part you need).",
            limits.max_result_bytes
        )),
        ScriptEnd::Stopped(Stop::Deadline) => (ErrorCode::ToolTimeout, timeout_line(limits)),
        ScriptEnd::Killed(Stop::Cancelled) => (
            ErrorCode::Aborted,
            "was cancelled; it did not stop when told (it was inside a built-in that does not \
             look), so its process was killed, and its console output is lost."
                .into(),
        ),
        ScriptEnd::Killed(_) => (
            ErrorCode::ToolTimeout,
            format!(
                "did not finish within its time limit of {} ms; it did not stop when told (it \
                 was inside a built-in that does not look), so its process was killed, and its \
                 console output is lost.",
                limits.timeout_ms()
            ),
        ),
        ScriptEnd::NoSlot { slots } => (
            ErrorCode::ToolTimeout,
            format!(
                "did not start within its time limit of {} ms: all {slots} script slots stayed \
                 busy with other scripts.",
                limits.timeout_ms()
            ),
        ),
        ScriptEnd::Stopped(Stop::Cancelled) => (
            ErrorCode::Aborted,
            "was cancelled; it and its running sub-calls were stopped.".into(),
        ),
        ScriptEnd::Stopped(Stop::SubcallLimit) => tool_error(format!(
            "tried to make more than {} sub-calls (the limit) and was stopped.",
            limits.max_subcalls
        )),
        ScriptEnd::Stalled => tool_error(
            "awaited a promise that nothing will ever settle (only tools.* calls complete \
             asynchronously here: there are no timers), and was stopped."
                .into(),
        ),
        ScriptEnd::Internal(why) => tool_error(format!(
            "could not run: the JavaScript engine failed: {why}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_shown_in_the_units_they_were_set_in() {
        assert_eq!(size(16 << 20), "16 MiB");
        assert_eq!(size(1536 << 10), "1536 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
