//! The `claude-code` tool profile.
//!
//! Claude Code's tools under their own names and argument shapes (`Read {file_path}`,
//! `Edit {file_path, old_string, new_string}`, `Bash {command, timeout}`, …), each a thin
//! adapter ([`ProfileTool`]) over one of dsh's built-in tools: the adapter validates the
//! model's arguments against Claude Code's schema, translates them into the built-in's input,
//! and hands everything else (body, presentation, permission subjects, concurrency, timeout)
//! to the built-in. So there is one behaviour to test: confinement, read-before-edit,
//! read-only mode and the path rules hold for `Edit` because they hold for `edit_file`
//! ([`dsh_core::ToolDefinition::stands_for`] tells name-keyed handlers which built-in call
//! an adapter's call is). The log records the name and the arguments the model used.
//!
//! [`settings`] reads the `permissions` block of Claude Code's settings files into dsh's
//! rule syntax.
//!
//! ```
//! use dsh_claude_code::{PROFILE, builtin_of};
//! assert_eq!(builtin_of("MultiEdit"), Some("edit_file"));
//! assert!(PROFILE.iter().any(|t| t.name == "Bash" && t.changes_things));
//! ```

mod error;
pub mod settings;
mod tools;

pub use error::ClaudeCodeError;
pub use tools::{PROFILE, ProfileEntry, ProfileTool, builtin_of, profile_tools};
