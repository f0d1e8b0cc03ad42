//! One MCP tool as a dsh [`ToolDefinition`] named `mcp__<server>__<tool>`.

use crate::content::{Converted, blocks_from_content, convert};
use crate::server::McpServer;
use async_trait::async_trait;
use dsh_core::{ContentBlock, ErrorCode, ExecutionMode, ToolContext, ToolDefinition, ToolFailure};
use serde_json::Value;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

/// How many structured results keep their server-given presentation until it is asked for.
const REMEMBERED_PRESENTATIONS: usize = 64;

/// An MCP server's tool, called through the pipeline like any other.
pub struct McpTool {
    name: String,
    remote_name: String,
    description: String,
    input_schema: Value,
    output_schema: Option<Value>,
    read_only: bool,
    server: Arc<McpServer>,
    /// `present` only sees the value; for structured results (value = `structuredContent`)
    /// the server's own `content` is kept here, keyed by the value it goes with.
    presentations: Mutex<VecDeque<(Value, Vec<ContentBlock>)>>,
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("server", &self.server.config().name)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// The registered name of `tool` on the server whose tools are prefixed `prefix`.
///
/// ```
/// assert_eq!(dsh_mcp::tool_name("github", "list issues"), "mcp__github__list_issues");
/// ```
pub fn tool_name(prefix: &str, tool: &str) -> String {
    format!("mcp__{prefix}__{}", crate::config::normalize_name(tool))
}

impl McpTool {
    pub(crate) fn new(server: Arc<McpServer>, tool: &rmcp::model::Tool) -> McpTool {
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or_default()
            .to_string();
        McpTool {
            name: tool_name(&server.config().tool_prefix, &tool.name),
            remote_name: tool.name.to_string(),
            description,
            input_schema: Value::Object((*tool.input_schema).clone()),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|s| Value::Object((**s).clone())),
            read_only: tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
            server,
            presentations: Mutex::new(VecDeque::new()),
        }
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }

    /// The server's name, as the config spells it.
    pub fn server_name(&self) -> &str {
        &self.server.config().name
    }

    fn remember(&self, value: &Value, content: Vec<ContentBlock>) {
        let mut kept = match self.presentations.lock() {
            Ok(k) => k,
            Err(poisoned) => poisoned.into_inner(),
        };
        if kept.len() >= REMEMBERED_PRESENTATIONS {
            kept.pop_front();
        }
        kept.push_back((value.clone(), content));
    }

    fn recall(&self, value: &Value) -> Option<Vec<ContentBlock>> {
        let kept = match self.presentations.lock() {
            Ok(k) => k,
            Err(poisoned) => poisoned.into_inner(),
        };
        kept.iter()
            .rev()
            .find(|(v, _)| v == value)
            .map(|(_, c)| c.clone())
    }
}

#[async_trait]
impl ToolDefinition for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }

    fn output_schema(&self) -> Option<Value> {
        self.output_schema.clone()
    }

    /// Parallel only where the server marks the tool `readOnlyHint: true`.
    fn execution_mode(&self) -> ExecutionMode {
        if self.read_only {
            ExecutionMode::Parallel
        } else {
            ExecutionMode::Exclusive
        }
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.read_only
    }

    fn timeout_ms(&self) -> Option<u64> {
        self.server.config().timeout_ms
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let Value::Object(arguments) = input else {
            return Err(ToolFailure::with_code(
                ErrorCode::ToolInputError,
                "MCP tools take an object of arguments",
            ));
        };
        let result = self
            .server
            .call(&self.remote_name, arguments, &ctx.signal)
            .await?;
        let Converted {
            value,
            structured_content,
        } = convert(result, &self.name)?;
        if let Some(content) = structured_content {
            self.remember(&value, content);
        }
        Ok(value)
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        if let Some(content) = self.recall(value) {
            return content;
        }
        if self.output_schema.is_some() {
            return vec![ContentBlock::text(value.to_string())];
        }
        blocks_from_content(value)
    }
}
