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
//!   not answer a ping); either is started again on the next call. An answer dsh cannot
//!   read (longer than [`McpOptions::max_message_bytes`], or not decodable, such as a lone
//!   surrogate `\ud800`) ends its call at once with `TOOL_ERROR` saying why. A server's
//!   stderr is logged with `tracing` (target `dsh_mcp::stderr`), never put into results.
//! - **Limits at start**: a server's tool list may take at most
//!   [`McpOptions::max_tool_pages`] pages (100), [`McpOptions::max_tools`] tools (1,000) and
//!   [`McpOptions::max_tool_list_bytes`] bytes of JSON (8 MiB); a server past one fails to
//!   start with an error naming the limit.
//! - **Names**: `mcp__<server>__<tool>` is read back at the first `__` after `mcp__`, so a
//!   server name that would make that ambiguous (see [`McpServers`]) is refused. A tool
//!   whose name is empty, longer than the registry takes, or equal (after characters
//!   outside `[A-Za-z0-9_-]` become `_`) to another tool's of its server is not registered,
//!   nor is one whose schema the registry refuses (too costly to validate, or invalid):
//!   each is listed by [`McpToolSource::skipped`] for the user to see.
//! - **Read-only mode** ([`McpOptions::read_only`]): only tools the server marks
//!   `readOnlyHint: true` run; the others are `DENIED` by the pre-execute handler of
//!   [`McpToolSource::read_only_policy`] and, should it not be installed, by the tool
//!   itself.
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
//! for skipped in source.skipped() {
//!     eprintln!("{skipped}"); // a tool the model will not see, and why
//! }
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
mod read_only;
mod server;
mod tool;
mod transport;

#[cfg(feature = "test-server")]
pub mod test_server;

pub use config::{McpServerConfig, McpServers};
pub use error::McpError;
pub use read_only::McpReadOnly;
pub use server::{
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_TOOL_LIST_BYTES, DEFAULT_MAX_TOOL_PAGES,
    DEFAULT_MAX_TOOLS, DEFAULT_TIMEOUT, McpOptions,
};
pub use tool::{McpTool, tool_name};

use dsh_core::{CoreError, ToolDefinition as _, ToolRegistry};
use server::McpServer;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// The longest tool name the registry takes.
const MAX_TOOL_NAME: usize = 128;

/// A server's tool that was not registered, and why: the model will not see it, so the
/// user should.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedTool {
    /// The server's name, as the config spells it.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// Why it was left out.
    pub reason: String,
}

impl fmt::Display for SkippedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MCP server `{}`: tool `{}` was not registered: {}",
            self.server,
            self.tool.escape_debug(),
            self.reason
        )
    }
}

/// Started MCP servers and their tools.
pub struct McpToolSource {
    servers: Vec<Arc<McpServer>>,
    tools: Vec<Arc<McpTool>>,
    options: McpOptions,
    /// Tools left out at start (names) and at registration (schemas).
    skipped: Mutex<Vec<SkippedTool>>,
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
            options,
            skipped: Mutex::new(Vec::new()),
        };
        let mut failed = None;
        let mut skipped = Vec::new();
        for (server, tools) in servers.iter().zip(listed) {
            source.servers.push(server.clone());
            match tools {
                Ok(tools) => {
                    let (kept, left_out) = name_tools(server, &tools);
                    source.tools.extend(kept);
                    skipped.extend(left_out);
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
        for s in &skipped {
            tracing::warn!("{s}");
        }
        source.skipped = Mutex::new(skipped);
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

    /// The tools that were not registered, and why: left out at start (a name that is
    /// empty, too long, or shared with another tool of its server) or by
    /// [`McpToolSource::register`] (a schema the registry refuses). Print them: the model
    /// will not see these tools.
    pub fn skipped(&self) -> Vec<SkippedTool> {
        self.skipped_list().clone()
    }

    fn skipped_list(&self) -> std::sync::MutexGuard<'_, Vec<SkippedTool>> {
        match self.skipped.lock() {
            Ok(list) => list,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// In read-only mode ([`McpOptions::read_only`]), the `tools/pre-execute` handler that
    /// denies every tool of this source the server does not mark `readOnlyHint: true`,
    /// before it runs (install it first, beside the sandbox); `None` otherwise. The tools
    /// also refuse to run themselves in read-only mode, so a pipeline without the handler
    /// still runs no such tool, but then the body was dispatched.
    pub fn read_only_policy(&self) -> Option<McpReadOnly> {
        if !self.options.read_only {
            return None;
        }
        let writable = self
            .tools
            .iter()
            .filter(|t| !t.is_read_only())
            .map(|t| t.name().to_string())
            .collect();
        Some(McpReadOnly::new(writable))
    }

    /// Adds every tool to `registry` and returns their names. A tool whose schema the
    /// registry refuses (invalid, or too costly to validate) is left out and listed by
    /// [`McpToolSource::skipped`]; a name already taken is an error (and nothing of this
    /// source stays registered).
    pub fn register(&self, registry: &ToolRegistry) -> Result<Vec<String>, McpError> {
        let mut added = Vec::new();
        let mut refused = Vec::new();
        for tool in &self.tools {
            match registry.register_arc(tool.clone()) {
                Ok(()) => added.push(tool.name().to_string()),
                Err(e @ CoreError::InvalidSchema { .. }) => {
                    tracing::warn!(server = %tool.server_name(), error = %e, "MCP tool skipped");
                    refused.push(SkippedTool {
                        server: tool.server_name().to_string(),
                        tool: tool.remote_name().to_string(),
                        reason: e.to_string(),
                    });
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
        let mut skipped = self.skipped_list();
        for r in refused {
            if !skipped.contains(&r) {
                skipped.push(r);
            }
        }
        Ok(added)
    }

    /// Stops every server: stdin is closed, and a server that does not exit is killed.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}

/// The tools of one server that can be registered, and the others with the reason.
///
/// Names are checked here, not left to the registry: two tools of a server whose names
/// become the same registered name are both left out (which one a call meant cannot be
/// told), and so is a name that is empty or too long.
fn name_tools(
    server: &Arc<McpServer>,
    tools: &[rmcp::model::Tool],
) -> (Vec<Arc<McpTool>>, Vec<SkippedTool>) {
    let server_name = &server.config().name;
    let mut by_name: BTreeMap<String, Vec<&rmcp::model::Tool>> = BTreeMap::new();
    let mut skipped = Vec::new();
    let skip = |tool: &str, reason: String| SkippedTool {
        server: server_name.clone(),
        tool: tool.to_string(),
        reason,
    };
    for t in tools {
        let name = tool_name(&server.config().tool_prefix, &t.name);
        if t.name.is_empty() {
            skipped.push(skip(&t.name, "its name is empty".into()));
        } else if name.len() > MAX_TOOL_NAME {
            skipped.push(skip(
                &t.name,
                format!("its name `{name}` would be longer than {MAX_TOOL_NAME} characters"),
            ));
        } else {
            by_name.entry(name).or_default().push(t);
        }
    }
    let mut kept = Vec::new();
    for (name, group) in by_name {
        if let [only] = group.as_slice() {
            kept.push(Arc::new(McpTool::new(server.clone(), only)));
            continue;
        }
        let all: Vec<String> = group
            .iter()
            .map(|t| format!("`{}`", t.name.escape_debug()))
            .collect();
        for t in group {
            skipped.push(skip(
                &t.name,
                format!(
                    "the server's tools {} would all be named `{name}`, so a call could not \
                     say which one it means",
                    all.join(", ")
                ),
            ));
        }
    }
    // The server's own order, as listed.
    let position = |name: &str| tools.iter().position(|t| t.name == name);
    kept.sort_by_key(|t| position(t.remote_name()));
    (kept, skipped)
}
