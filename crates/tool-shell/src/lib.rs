//! # dsh-tool-shell
//!
//! The `shell` tool: `bash -c COMMAND` in the workspace, carried through dsh's pipeline like
//! every tool, with three promises the shells of today's agents do not keep:
//!
//! - **Nothing outlives the call.** The command runs in its own PID namespace (or, where the
//!   kernel gives none, under a child subreaper), session and process group, dies with dsh,
//!   and is reaped. At its deadline, on a cancel, and when it exits leaving processes behind,
//!   the whole tree gets SIGTERM, then SIGKILL after a grace: background jobs, `nohup`,
//!   double-forked `setsid` daemons included (`process`).
//! - **Bounded output.** Each stream keeps its head and tail in memory and counts the rest;
//!   the model sees head and tail with `… N bytes omitted …`, and the whole output goes to a
//!   spill file it can read (`capture`, `spill`).
//! - **A sandbox that fails closed** (Linux): user, mount, PID and network namespaces,
//!   Landlock, seccomp, no capabilities, `no_new_privs`. What cannot be set up makes the call
//!   `DENIED`, never unsandboxed (`sandbox`).
//!
//! Permission rules see the command's simple commands, parsed by tree-sitter-bash (`parse`).
//!
//! `unsafe` is denied in this crate and allowed in one module, `process/child.rs`: the fork
//! and what runs between fork and exec.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod capture;
mod config;
mod env;
mod error;
mod parse;
mod process;
mod sandbox;
mod spill;
mod tool;

pub use config::{SandboxConfig, SandboxMode, ShellConfig, ShellLimits};
pub use error::ShellError;
pub use tool::{SHELL, ShellTool};

/// The permission subjects the shell tool gives a command (its simple commands, encoded by
/// `dsh_core::command_words`): for checking what a policy will see.
pub fn command_subjects(command: &str) -> Vec<String> {
    parse::subjects(command)
}
