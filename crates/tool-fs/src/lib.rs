//! # dsh-tool-fs
//!
//! dsh's file tools, the fs-intent monitor, and workspace confinement.
//!
//! | tool          | arguments                                                          | mode      |
//! | ------------- | ------------------------------------------------------------------ | --------- |
//! | `read_file`   | `path`, `offset?`, `limit?`                                        | parallel  |
//! | `list_dir`    | `path`                                                             | parallel  |
//! | `glob`        | `pattern`, `path?`                                                 | parallel  |
//! | `grep`        | `pattern`, `path?`, `glob?`, `case_insensitive?`, `output_mode?`, `context?` | parallel |
//! | `write_file`  | `path`, `content`                                                  | exclusive |
//! | `edit_file`   | `path`, `old_string`, `new_string`, `replace_all?`                 | exclusive |
//! | `apply_patch` | `input` (Codex's patch format)                                     | exclusive |
//!
//! Three layers keep the tools inside the workspace root:
//!
//! 1. the [`Sandbox`] (`tools/pre-execute`) refuses a call whose paths leave the root (`..`,
//!    absolute paths outside, symlinks pointing out, NUL bytes, overlong names) before it
//!    runs, and every mutation in read-only mode;
//! 2. each tool resolves its paths again with [`sandbox::resolve`];
//! 3. every open goes through a `cap-std` directory handle on the root ([`Workspace`]), which
//!    refuses on its own a path that leads outside, so a symlink swapped in after the check
//!    cannot be used to escape.
//!
//! Every path a tool touches is also put to the pipeline's path policy
//! ([`dsh_core::ToolContext::policy`]: the permission rules, and the files the harness
//! protects), resolved, as it is used:
//!
//! - `grep`, `glob` and `list_dir` skip each entry the rules hide from `read_file` (a hidden
//!   folder is not entered) and say how many they skipped, never which; they read ignore
//!   files only inside the workspace and never through a symlink, and they say what they
//!   could not search (paths past `PATH_MAX`, unreadable folders, binary files that match);
//! - `read_file` refuses a path the rules deny;
//! - `write_file`, `edit_file` and `apply_patch` refuse every target (each add, update,
//!   delete, move source and destination) the policy forbids, before reading it and again
//!   just before writing: dsh's own files (the log, the policy, ...) whatever the rules say,
//!   through a symlink or a hard link too.
//!
//! A change is sized before it is built: an edit or a patch whose result would pass
//! [`Limits::max_file_bytes`] (or a patch holding more than [`Limits::max_patch_bytes`]) is
//! refused, so a call's memory stays bounded whatever its arguments.
//!
//! Before a mutation a tool announces it at `fs/write-intent` or `fs/edit-intent`; the
//! [`FsIntentMonitor`] (an actor) enforces read-before-edit there, and more
//! [`FsIntentHandler`]s can be added with [`FsToolset::on_intent`]. Only a read that showed
//! the model the file records a read (not a binary file, not an offset past the end), with
//! the hash of the bytes shown, and the record is in place before the read returns.
//!
//! ```
//! use std::sync::Arc;
//! use dsh_core::{Hooks, ToolCall, ToolRegistry};
//! use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
//! use dsh_session::SessionLog;
//! use dsh_tool_fs::FsToolset;
//! use serde_json::json;
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("hello.txt"), "hi\n").unwrap();
//! let toolset = FsToolset::builder(dir.path()).build().await.unwrap();
//! let registry = Arc::new(ToolRegistry::new());
//! toolset.register(&registry).unwrap();
//! let mut hooks = Hooks::new();
//! hooks.pre_execute_arc(toolset.sandbox());
//! let harness = HarnessBuilder::new(registry).hooks(hooks).build().await.unwrap();
//! let session = harness
//!     .open(SessionLog::memory().await.unwrap(), SchedulerConfig::default(), None)
//!     .await
//!     .unwrap();
//! let step = StepRequest::new(vec![
//!     ToolCall::new("c1", "read_file", json!({"path": "hello.txt"})),
//!     ToolCall::new("c2", "read_file", json!({"path": "../etc/passwd"})),
//! ]);
//! let outcome = session.run_step(step).await.unwrap();
//! assert_eq!(outcome.results[0].text(), "     1\thi\n");
//! assert_eq!(outcome.results[1].code().unwrap().as_str(), "DENIED");
//! session.shutdown().await;
//! harness.shutdown().await;
//! toolset.shutdown().await;
//! # });
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod edit;
mod error;
mod hash;
mod intent;
mod monitor;
pub mod patch;
pub mod records;
pub mod sandbox;
pub mod tools;
mod toolset;
mod workspace;

pub use error::{Denial, FsError};
pub use hash::ContentHash;
pub use intent::{FsIntent, FsIntentHandler, FsOp, IntentKind, IntentVerdict};
pub use monitor::{FsIntentMonitor, MonitorMsg, Refusal};
pub use sandbox::Sandbox;
pub use toolset::{FsToolset, FsToolsetBuilder, Limits, MAX_SWEEP_ENTRIES};
pub use workspace::{Existing, Workspace};
