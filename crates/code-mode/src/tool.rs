//! The `run_code` tool.

use crate::error::CodeModeError;
use crate::host::Workers;
use crate::limits::CodeLimits;
use crate::process::WorkerCommand;
use crate::{host, report};
use async_trait::async_trait;
use dsh_core::dispatcher::RUN_CODE;
use dsh_core::{ContentBlock, ErrorCode, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Scripts one [`RunCode`] (and its clones) runs at once unless told otherwise.
pub const DEFAULT_MAX_SCRIPTS: usize = 8;

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
/// Register it beside the other tools; the scheduler hands its body the dispatcher. Each
/// script runs in a worker process of its own (see the crate's documentation): by default
/// this same program, which must then call [`crate::worker_main_if_requested`] first thing in
/// `main`; [`RunCode::with_worker`] names another. At most [`DEFAULT_MAX_SCRIPTS`] scripts run
/// at once ([`RunCode::with_max_scripts`]); past that a call waits for a slot, within its own
/// time limit. Workers are tokio child processes: the runtime the pipeline runs on needs its
/// I/O driver (`enable_all`, as `#[tokio::main]` has).
///
/// ```
/// use dsh_code_mode::{CodeLimits, RunCode};
/// use dsh_core::{ToolDefinition, ToolRegistry};
/// let registry = ToolRegistry::new();
/// registry.register(RunCode::new(CodeLimits::default())).unwrap();
/// assert_eq!(registry.names(), ["run_code"]);
/// ```
#[derive(Debug, Clone)]
pub struct RunCode {
    limits: CodeLimits,
    workers: Workers,
}

impl Default for RunCode {
    fn default() -> Self {
        RunCode::new(CodeLimits::default())
    }
}

impl RunCode {
    /// A `run_code` tool with these limits, running scripts in this program as a worker.
    pub fn new(limits: CodeLimits) -> RunCode {
        RunCode {
            limits,
            workers: Workers {
                command: None,
                slots: Arc::new(Semaphore::new(DEFAULT_MAX_SCRIPTS)),
                max_scripts: DEFAULT_MAX_SCRIPTS,
                spare: Arc::default(),
            },
        }
    }

    /// Runs scripts in workers started with `command`.
    pub fn with_worker(mut self, command: WorkerCommand) -> RunCode {
        self.workers.command = Some(command);
        self
    }

    /// Runs at most `n` scripts at once (at least one); a call past it waits for a slot.
    pub fn with_max_scripts(mut self, n: usize) -> RunCode {
        let n = n.clamp(1, Semaphore::MAX_PERMITS);
        self.workers.slots = Arc::new(Semaphore::new(n));
        self.workers.max_scripts = n;
        self
    }

    /// Its limits.
    pub fn limits(&self) -> &CodeLimits {
        &self.limits
    }

    /// The worker it was given, if any (`None`: this program, as a worker).
    pub fn worker(&self) -> Option<&WorkerCommand> {
        self.workers.command.as_ref()
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
        Some(self.limits.timeout_ms())
    }

    /// The script's deadline is kept by `run_code` itself (its worker is told, then killed),
    /// and its answer says more than the wrapper's: a timeout wrapper backs it up instead of
    /// cutting it at the deadline, and a smaller cap still cuts it.
    fn owns_deadline(&self) -> bool {
        true
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let code = input.get("code").and_then(Value::as_str).ok_or_else(|| {
            ToolFailure::with_code(ErrorCode::ToolInputError, "`code` must be a string")
        })?;
        let dispatcher = ctx.dispatcher.clone().ok_or(CodeModeError::NoDispatcher)?;
        let finished = host::run(code, &self.limits, &ctx, dispatcher, &self.workers).await?;
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

    /// `present` formats the report it is given (no I/O, no lock), and `result_meta` and
    /// `finalize_content` are dsh's defaults: the pipeline calls them inline.
    fn user_code_may_block(&self) -> bool {
        false
    }
}
