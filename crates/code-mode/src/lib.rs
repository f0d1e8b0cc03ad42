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
//! QuickJS is blocking C code, and it looks at its interrupt handler only every 10,000 calls
//! and never inside a long built-in: `Array(1e5).fill(3n ** 60000n).forEach(String)` would
//! hold a core for most of an hour after its call ended. So each script runs in a worker
//! process of its own, which can always be stopped: at the deadline (or on cancel) the worker
//! is told to stop, its interrupt handler ends the script and it reports; if it has not
//! reported a short grace later (it is stuck in a built-in), its process is killed, so a
//! script's CPU is freed by its deadline plus a quarter of a second, whatever it runs. A
//! worker whose parent is gone sees its stdin end and exits.
//!
//! The worker is the embedding program itself, started again with [`WORKER_ARG`]: call
//! [`worker_main_if_requested`] first thing in `main` (the `dsh` binary does), or give
//! [`RunCode::with_worker`] another program that runs [`worker_main`]. Without either,
//! `run_code` fails with a clear error rather than run scripts it could not stop.
//!
//! Starting that program for each script costs milliseconds (exec, the loader, the
//! program's start), so `run_code` starts it once more as a *fork server* (one process with
//! one thread) and forks each script's worker from it: a fresh process that ran nothing
//! before, holding only its own standard streams, killed and reaped by the server, which
//! itself ends (killing and reaping what it forked) when its `RunCode` and workers are gone
//! or dsh is. A program given to [`RunCode::with_worker`] that is not a fork server (its
//! hello says so) has its workers started one by one, as before. The next script's worker
//! is forked ahead of time ([`spare_workers`]).
//!
//! The body's task keeps the async side: it receives the script's sub-call requests over the
//! worker's stdout, runs them concurrently through the dispatcher (which decides what may
//! overlap), and writes each outcome back. So no tokio worker ever runs script code, and
//! cancellation reaches the sub-call futures directly (they live in the body's task). Inside
//! the worker the script runs on a thread whose stack is sized from the limit (QuickJS
//! measures its stack limit from the thread that created the runtime).
//!
//! Scripts alive at once are bounded ([`DEFAULT_MAX_SCRIPTS`], [`RunCode::with_max_scripts`]):
//! a process holds its slot until it is reaped, and a call past the bound waits its turn
//! within its own time limit (`TOOL_TIMEOUT` saying so if no slot freed in time).
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
mod fork_server;
mod fork_sys;
mod host;
mod limits;
mod process;
mod report;
mod tool;
mod worker;

pub use dsh_core::dispatcher::RUN_CODE;
pub use error::CodeModeError;
pub use limits::CodeLimits;
pub use process::WorkerCommand;
pub use tool::{DEFAULT_MAX_SCRIPTS, RunCode};
pub use worker::{WORKER_ARG, worker_main, worker_main_if_requested};

/// Scripts whose worker process is still alive (running, or killed and not yet reaped).
///
/// A stopped script's process is gone within moments; a count that stays up means a script
/// is still running.
///
/// ```
/// assert_eq!(dsh_code_mode::live_engines(), 0);
/// ```
pub fn live_engines() -> usize {
    process::live()
}

/// Process ids of the idle spare workers: each `RunCode` keeps the worker process its next
/// script will run in started ahead of time (fresh, used by one script only). They run no
/// script and are not counted by [`live_engines`].
pub fn spare_workers() -> Vec<u32> {
    process::spare_pids()
}

/// Process ids of the fork servers running: each `RunCode` whose worker program can be one
/// starts it once and forks every script's worker from it (fresh processes, one a script).
/// A fork server runs no script and is not counted by [`live_engines`].
pub fn fork_servers() -> Vec<u32> {
    fork_server::server_pids()
}
