//! # dsh-code-mode
//!
//! Code mode: the `run_code` tool runs a JavaScript script (top-level `await`) on an embedded
//! QuickJS engine with hard limits, and every `tools.*` call the script makes is a sub-call
//! sent back through the whole pipeline (pre-execute, approval, guards, wrappers, body,
//! post-execute, finalize, observers) by the scheduler's dispatcher, under a child of the
//! `run_code` call's signal, and recorded as a `tool/code-dispatch` event.
//!
//! Register [`RunCode`] with the other tools:
//!
//! ```
//! use std::sync::Arc;
//! use dsh_code_mode::{CodeLimits, RunCode};
//! use dsh_core::ToolRegistry;
//! let registry = Arc::new(ToolRegistry::new());
//! registry.register(RunCode::new(CodeLimits::default())).unwrap();
//! // ... register the other tools, then `HarnessBuilder::new(registry)`.
//! ```
//!
//! ## Where the engine runs, and why
//!
//! QuickJS is blocking C code, and a script can hold the CPU until its interrupt handler
//! stops it. Each script therefore runs on a thread of its own (not a tokio worker, and not
//! `spawn_blocking`, whose threads' stack size we do not choose: QuickJS's stack limit is
//! measured on the thread that created the runtime, so that thread's stack is sized from the
//! limit). The body's task keeps the async side: it receives the script's sub-call requests
//! over a channel, runs them concurrently through the dispatcher (which decides what may
//! overlap), and sends each outcome back; the engine thread blocks only on its own channel.
//! So no tokio worker ever runs script code, cancellation reaches the sub-call futures
//! directly (they live in the body's task), and the interrupt handler, which checks the
//! call's signal, the deadline and whether the body's task is still there to listen, ends a
//! script that runs on its own.
//!
//! rquickjs's async runtime was the other way: it polls the script as a future on a tokio
//! worker, so a script's CPU between two awaits runs on that worker, bounded only by the time
//! limit (a minute of a blocked worker on a two-core machine), and with the `parallel`
//! feature the runtime hops between workers, each with its own stack to measure the limit
//! against. A thread per script costs about 0.1 ms at start, well inside the startup goal.
//!
//! ## What a script is told
//!
//! - `await tools.x(args)` resolves to `{ callId, tool, text, content, value }`.
//! - A failure rejects with a `ToolError` (`code`, `message`, `tool`, `callId`).
//! - A refusal by policy (`DENIED`, `BLOCKED`) rejects with a `ToolDenied` (a `ToolError`
//!   with `reason`). It is binding: whatever the script then does, `run_code` answers
//!   `DENIED`, listing every refusal first.
//! - Limits end the script with their own error: wall time (`TOOL_TIMEOUT`), memory, stack,
//!   sub-calls, and the size of the returned value; console output is capped.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod bridge;
mod engine;
mod error;
mod host;
mod limits;
mod report;
mod tool;

pub use dsh_core::dispatcher::RUN_CODE;
pub use error::CodeModeError;
pub use limits::CodeLimits;
pub use tool::RunCode;

/// Scripts whose engine thread is still alive (running, or winding down after a stop).
///
/// A stopped script's thread ends on its own within moments; a count that stays up means a
/// script is still running.
///
/// ```
/// assert_eq!(dsh_code_mode::live_engines(), 0);
/// ```
pub fn live_engines() -> usize {
    engine::live()
}
