//! The door code mode uses to send sub-calls back through the whole pipeline.
//!
//! Tools never depend on the scheduler; the scheduler implements this trait and hands it to
//! each body through [`crate::ToolContext::dispatcher`].

use crate::result::FrozenResult;
use crate::tool::ToolContext;
use async_trait::async_trait;
use serde_json::Value;

/// The tool name of code mode. A script's `tools` object never offers it.
pub const RUN_CODE: &str = "run_code";

/// Runs sub-calls of a running call through the same pipeline (pre-execute, approval, guards,
/// wrappers, body, post-execute, finalize, observers), under the parent's signal.
#[async_trait]
pub trait SubCallDispatcher: Send + Sync {
    /// Runs `name(arguments)` as a sub-call of the call `parent` belongs to. The result is
    /// final: a denial stays a denial.
    async fn dispatch(&self, parent: &ToolContext, name: &str, arguments: Value) -> FrozenResult;

    /// The tools a sub-call may name, sorted.
    fn tool_names(&self) -> Vec<String>;
}
