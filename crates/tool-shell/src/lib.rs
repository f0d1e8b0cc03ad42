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
//! `unsafe` is denied in this crate and allowed in two modules: `process/child.rs`, the fork
//! and what runs between fork and exec, and `process/child_net.rs`, the network namespace's
//! loopback and the listener handed to dsh (`SCM_RIGHTS`).
//!
//! With `net(…)` rules ([`SandboxConfig::with_proxy`]), a command's only way out of its own
//! network namespace is a port on its loopback that leads to dsh's proxy (`dsh-net`): see
//! `net.rs` and the book's chapter "The network by policy" (`docs/src/network.md`).
//!
//! ## The parts
//!
//! - `process/`: every fork happens on one spawner thread that lives as long as dsh (a
//!   parent-death signal fires when the forking thread exits). dsh forks a keeper (parent-death
//!   signal, `setsid`, the namespaces, the mounts), which forks an init (PID 1 of the call, or
//!   a child subreaper where the kernel gives no PID namespace), which starts `bash -c
//!   COMMAND` as `vfork` does. Where a call has cgroups, its keeper is forked by a standby made
//!   ahead on a background thread and already in the call's cgroups (a cgroup join waits for
//!   an RCU grace period); the keeper's reaping and the cgroups' removal happen there too,
//!   after the result (`process/background.rs`).
//!   init reports the command's status on a report pipe and obeys a control pipe: `T` is
//!   SIGTERM to every process of the call, `K` SIGKILL, and the end of the pipe (dsh's death)
//!   kills everything.
//! - `sandbox/`: prepared in dsh per call. Mounts first (the whole world read-only, the
//!   workspace and the ancestors of a protected path bound onto themselves, a tmpfs for
//!   `TMPDIR`, read-only paths bound read-only, hidden paths covered), then Landlock (write
//!   only the workspace and the call's `TMPDIR`), then seccomp (always: no new `AF_UNIX`
//!   socket, no `io_uring`, no keyring calls; with the network off no other socket either, no
//!   `ptrace`).
//! - `git_dirs`: the walk of the workspace at each call: every `.git` entry (kept read-only)
//!   and what the policy's path rules hide or keep read-only; each folder's listing is kept
//!   between calls and read again only when the folder's stamp changed.
//! - `limits`: a cgroup per call where dsh can make one, rlimits where it cannot; what held
//!   each limit and which was hit goes into the result's meta.
//! - `capture` and `spill`: each stream keeps 256 KiB of head and of tail; the model sees 8 KiB
//!   and 24 KiB; a cut stream goes whole (up to 64 MiB) to a spill file, in a folder made by the
//!   first call that spills and reached without following symlinks.
//! - `env`: names like `*KEY*`, `*SECRET*`, `*TOKEN*`, `*PASSWORD*` and `LD_*` are removed.
//! - `parse`: one permission subject per simple command, wherever it sits in the script.
//!
//! The book's chapter "The shell sandbox" (`docs/src/shell-sandbox.md`) says what each kernel
//! gives and what the sandbox does not hold.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod capture;
mod config;
mod env;
mod error;
mod git_dirs;
mod limits;
mod net;
mod parse;
mod process;
mod sandbox;
mod spill;
mod tool;

pub use config::{PathClass, PathRules, SandboxConfig, SandboxMode, ShellConfig, ShellLimits};
pub use error::ShellError;
pub use tool::{SHELL, ShellTool};

/// The permission subjects the shell tool gives a command (its simple commands, encoded by
/// `dsh_core::command_words`): for checking what a policy will see.
pub fn command_subjects(command: &str) -> Vec<String> {
    parse::subjects(command)
}
