//! Read-only mode: a `tools/pre-execute` handler that lets only read-only MCP tools run.

use async_trait::async_trait;
use dsh_core::hooks::{HookError, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Denies, before they run, the tools of a source that their server does not mark
/// `readOnlyHint: true`; abstains on every other call (the built-in tools keep their own
/// read-only rules). Made by [`McpToolSource::read_only_policy`](crate::McpToolSource::read_only_policy).
#[derive(Debug, Clone)]
pub struct McpReadOnly {
    writable: Arc<BTreeSet<String>>,
}

impl McpReadOnly {
    pub(crate) fn new(writable: BTreeSet<String>) -> McpReadOnly {
        McpReadOnly {
            writable: Arc::new(writable),
        }
    }
}

/// Why a tool is refused in read-only mode (the handler's and the tool's own words).
pub(crate) fn refusal(tool: &str) -> String {
    format!(
        "read-only mode: MCP tool `{tool}` may change something (its server does not mark it \
         `readOnlyHint: true`), so it does not run"
    )
}

#[async_trait]
impl PreExecuteHandler for McpReadOnly {
    fn name(&self) -> &str {
        "mcp-read-only"
    }

    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        let tool = call.tool.name();
        Ok(if self.writable.contains(tool) {
            PreExecuteOutcome::deny(refusal(tool))
        } else {
            PreExecuteOutcome::abstain()
        })
    }
}
