//! The `run_code` tool.

use crate::error::CodeModeError;
use crate::limits::CodeLimits;
use crate::{host, report};
use async_trait::async_trait;
use dsh_core::dispatcher::RUN_CODE;
use dsh_core::{ContentBlock, ErrorCode, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Value, json};

/// How much later than the script's own limit the pipeline's timeout wrapper (when one is
/// registered) gives up: the script's own, more telling error normally comes first.
const WRAPPER_BACKSTOP_MS: u64 = 500;

const DESCRIPTION: &str = "Runs JavaScript (ES2023) with top-level await. `code` is the body \
of an async function: `return` a JSON value to answer. Every other tool is an async function \
of the `tools` object: `const r = await tools.read_file({ path: \"a.txt\" })` gives \
`{ callId, text, content, value }`, where `text` is what the tool shows and `value` its JSON \
data. Calls awaited together (`await Promise.all([...])`) may run in parallel. A failed call \
rejects with a `ToolError` (`code`, `message`); a call refused by policy rejects with a \
`ToolDenied` (`reason`): a refusal is binding, and run_code then answers DENIED whatever the \
script does. `console.log` output is returned (capped). There are no timers and no file, \
network or process access except through `tools`; time, memory, stack, sub-calls and output \
are limited.";

/// Code mode's tool: runs a script whose `tools.*` calls go through the whole pipeline.
///
/// Register it beside the other tools; the scheduler hands its body the dispatcher.
///
/// ```
/// use dsh_code_mode::{CodeLimits, RunCode};
/// use dsh_core::{ToolDefinition, ToolRegistry};
/// let registry = ToolRegistry::new();
/// registry.register(RunCode::new(CodeLimits::default())).unwrap();
/// assert_eq!(registry.names(), ["run_code"]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct RunCode {
    limits: CodeLimits,
}

impl RunCode {
    /// A `run_code` tool with these limits.
    pub fn new(limits: CodeLimits) -> RunCode {
        RunCode { limits }
    }

    /// Its limits.
    pub fn limits(&self) -> &CodeLimits {
        &self.limits
    }
}

impl From<CodeModeError> for ToolFailure {
    fn from(e: CodeModeError) -> ToolFailure {
        ToolFailure::with_code(ErrorCode::ToolError, e.to_string())
    }
}

#[async_trait]
impl ToolDefinition for RunCode {
    fn name(&self) -> &str {
        RUN_CODE
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "The body of an async function; `return` the answer."
                }
            },
            "required": ["code"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(report::output_schema())
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.limits.timeout_ms().saturating_add(WRAPPER_BACKSTOP_MS))
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let code = input.get("code").and_then(Value::as_str).ok_or_else(|| {
            ToolFailure::with_code(ErrorCode::ToolInputError, "`code` must be a string")
        })?;
        let dispatcher = ctx.dispatcher.clone().ok_or(CodeModeError::NoDispatcher)?;
        let finished = host::run(code, &self.limits, &ctx, dispatcher).await?;
        report::answer(
            finished.report,
            &finished.calls,
            &self.limits,
            ctx.signal.reason(),
        )
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        report::present(value)
    }
}
