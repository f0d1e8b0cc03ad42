//! # dsh-core
//!
//! The vocabulary of dsh and its pure parts: tool definitions, the input a call carries,
//! pre-execute decisions, results (candidate and frozen), the stable error codes, content
//! blocks, session events, the hook traits, the around-wrappers shipped with dsh, the registry
//! with compiled schemas, and the signal type. No actors and no I/O live here; the pipeline
//! that strings these together is in `dsh-scheduler`.
//!
//! ```
//! use dsh_core::{ErrorCode, ToolRegistry};
//! let registry = ToolRegistry::new();
//! assert!(registry.is_empty());
//! assert_eq!(ErrorCode::UnknownTool.as_str(), "UNKNOWN_TOOL");
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod around;
pub mod command_words;
pub mod content;
pub mod dispatcher;
pub mod error;
pub mod event;
pub mod hooks;
pub mod inline;
pub mod live;
pub mod net_rules;
pub mod paths;
pub mod policy;
pub mod pool;
pub mod registry;
pub mod result;
pub mod resume;
pub mod shutdown;
pub mod signal;
mod spin;
pub mod tool;
pub mod transcript;
pub mod typed;

pub use around::Around;
pub use content::ContentBlock;
pub use dispatcher::SubCallDispatcher;
pub use error::{CoreError, ErrorCode};
pub use event::{EventBody, SessionEvent};
pub use hooks::{
    ApprovalAnswer, ApprovalRequest, ApprovalResponder, HookError, Hooks, PostExecuteContext,
    PostExecuteHandler, PostExecuteOutcome, PreExecuteContext, PreExecuteHandler,
    PreExecuteOutcome, PreToolDecision, Replacement, ResultObserver,
};
pub use paths::{Confinement, DeclaredPath, PathArg, ResolvedPath, ResolvedPaths};
pub use policy::{Access, PathPolicies, PathPolicy, ProtectedPaths};
pub use registry::{RegisteredTool, ToolRegistry};
pub use result::{DeferredMessage, FrozenResult, ToolError};
pub use resume::ResumeFromLog;
pub use shutdown::Shutdown;
pub use signal::{CancelHandle, CancelReason, Signal};
pub use tool::{
    Arguments, ExecutionMode, MAX_ARGUMENT_BYTES, MAX_ARGUMENT_DEPTH, PartialOutput, RetryPolicy,
    SubjectKind, ToolCall, ToolContext, ToolDefinition, ToolExecutionInput, ToolFailure,
};
/// Variables that hold dsh's database URL, password included (`DSH_STORE`), or name the file
/// that does (`DSH_STORE_FILE`): removed from the environment of everything dsh starts (shell
/// commands, command hooks, MCP servers).
pub const STORE_ENV_VARS: [&str; 2] = ["DSH_STORE", "DSH_STORE_FILE"];

pub use typed::{Typed, TypedTool, WorkspacePath};
