//! # dsh-mcp
//!
//! MCP servers as a tool source. Each configured stdio server is started, its tools are
//! listed and registered as [`dsh_core::ToolDefinition`]s named `mcp__<server>__<tool>`, and
//! every call to one goes through the whole pipeline like any other tool: the same
//! permission rules, hooks, guards, timeouts and session log.
//!
//! - **Schemas**: the tool's `inputSchema` (and `outputSchema`, where the server gives one)
//!   are the definition's schemas, so the pipeline validates arguments and structured results.
//! - **Concurrency**: a tool runs beside others only where the server marks it
//!   `annotations.readOnlyHint: true`; every other tool is exclusive.
//! - **Timeouts**: a server's `timeout` (milliseconds), or [`DEFAULT_TIMEOUT`] (60 s) for a
//!   server that sets none ([`McpOptions::default_timeout`] changes it), is the `timeout_ms`
//!   of its tools, read by the pipeline's timeout wrapper. The server also holds each call to
//!   that deadline (plus a moment), so a call ends with `TOOL_TIMEOUT` even in a pipeline
//!   without a timeout wrapper.
//! - **Failures**: `isError: true` is a `TOOL_ERROR` with the tool's text; a server that
//!   crashes gives `TOOL_ERROR`, one that hangs `TOOL_TIMEOUT` (and is killed when it does
//!   not answer a ping); either is started again on the next call. A server's stderr is
//!   logged with `tracing` (target `dsh_mcp::stderr`), never put into results.
//! - **Results**: text content becomes text blocks, images image blocks; `structuredContent`,
//!   when present, is the canonical value, and the server's `content` stays its
//!   presentation. Where two results of a tool have equal `structuredContent` but different
//!   `content` and are outstanding at once (parallel read-only calls), neither can be told
//!   from the other by its value, so each is presented as its value's JSON (which MCP asks
//!   servers to put in `content` anyway), never as the other call's content.
//!
//! ```no_run
//! use std::sync::Arc;
//! use dsh_core::ToolRegistry;
//! use dsh_mcp::{McpServers, McpToolSource};
//! # async fn demo() -> Result<(), dsh_mcp::McpError> {
//! let servers = McpServers::from_file(".mcp.json")?;
//! let source = McpToolSource::start(servers).await?;
//! let registry = Arc::new(ToolRegistry::new());
//! let names = source.register(&registry)?; // e.g. ["mcp__github__list_issues", ...]
//! // ... build the harness on `registry`, run sessions ...
//! source.shutdown().await;
//! # Ok(()) }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod config;
mod content;
mod error;
mod server;
mod tool;

#[cfg(feature = "test-server")]
pub mod test_server;

pub use config::{McpServerConfig, McpServers};
pub use error::McpError;
pub use server::{DEFAULT_TIMEOUT, McpOptions};
pub use tool::{McpTool, tool_name};

use dsh_core::{CoreError, ToolDefinition as _, ToolRegistry};
use server::McpServer;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// The longest tool name the registry takes.
const MAX_TOOL_NAME: usize = 128;

/// Started MCP servers and their tools.
pub struct McpToolSource {
    servers: Vec<Arc<McpServer>>,
    tools: Vec<Arc<McpTool>>,
}

impl fmt::Debug for McpToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpToolSource")
            .field("servers", &self.servers)
            .field("tools", &self.tool_names())
            .finish()
    }
}

impl McpToolSource {
    /// Starts every server (all at once) and lists its tools, with the default timings.
    pub async fn start(servers: McpServers) -> Result<McpToolSource, McpError> {
        McpToolSource::start_with(servers, McpOptions::default()).await
    }

    /// Starts every server with the given timings. If one fails, the others are stopped and
    /// the error names it.
    pub async fn start_with(
        servers: McpServers,
        options: McpOptions,
    ) -> Result<McpToolSource, McpError> {
        let servers: Vec<Arc<McpServer>> = servers
            .servers()
            .iter()
            .map(|c| Arc::new(McpServer::new(c.clone(), options)))
            .collect();
        let listed = futures::future::join_all(servers.iter().map(|s| s.start_and_list())).await;
        let mut source = McpToolSource {
            servers: Vec::new(),
            tools: Vec::new(),
        };
        let mut failed = None;
        let mut names = BTreeSet::new();
        for (server, tools) in servers.iter().zip(listed) {
            source.servers.push(server.clone());
            match tools {
                Ok(tools) => {
                    for t in &tools {
                        let tool = McpTool::new(server.clone(), t);
                        if tool.name().len() > MAX_TOOL_NAME {
                            tracing::warn!(server = %server.config().name, tool = %t.name,
                                "MCP tool skipped: its name would be longer than {MAX_TOOL_NAME}");
                        } else if !names.insert(tool.name().to_string()) {
                            tracing::warn!(server = %server.config().name, tool = %t.name,
                                "MCP tool skipped: another of its tools has the same name");
                        } else {
                            source.tools.push(Arc::new(tool));
                        }
                    }
                }
                Err(reason) if failed.is_none() => {
                    failed = Some(McpError::Start {
                        server: server.config().name.clone(),
                        reason,
                    });
                }
                Err(_) => {}
            }
        }
        if let Some(e) = failed {
            source.shutdown().await;
            return Err(e);
        }
        Ok(source)
    }

    /// The tools, as listed at start.
    pub fn tools(&self) -> &[Arc<McpTool>] {
        &self.tools
    }

    /// The registered names of the tools.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_string()).collect()
    }

    /// Adds every tool to `registry` and returns their names. A tool whose schema does not
    /// compile is skipped with a warning; a name already taken is an error (and nothing of
    /// this source stays registered).
    pub fn register(&self, registry: &ToolRegistry) -> Result<Vec<String>, McpError> {
        let mut added = Vec::new();
        for tool in &self.tools {
            match registry.register_arc(tool.clone()) {
                Ok(()) => added.push(tool.name().to_string()),
                Err(e @ CoreError::InvalidSchema { .. }) => {
                    tracing::warn!(server = %tool.server_name(), error = %e, "MCP tool skipped");
                }
                Err(e) => {
                    for name in &added {
                        registry.unregister(name);
                    }
                    return Err(McpError::Register {
                        server: tool.server_name().to_string(),
                        tool: tool.name().to_string(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(added)
    }

    /// Stops every server: stdin is closed, and a server that does not exit is killed.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}
