//! One MCP server: its process, its connection, and its restart after a crash or a hang.
//!
//! The connection is started lazily again on the call after the server died. Calls share
//! the live connection (the MCP peer multiplexes requests); only starting and stopping take
//! the lock. A call that times out asks the server for a `ping`: a server that cannot answer
//! is hung, and is killed so that the next call starts a fresh one.

use crate::config::McpServerConfig;
use crate::transport::{LineTransport, is_unreadable_answer};
use dsh_core::{CancelReason, ErrorCode, Signal, ToolFailure};
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientRequest, Implementation,
    InitializeRequestParams, PaginatedRequestParams, PingRequest, Tool,
};
use rmcp::service::RunningService;
use rmcp::{ClientCacheConfig, Peer, RoleClient, ServiceError};
use serde_json::{Map, Value};
use std::convert::Infallible;
use std::fmt;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::Mutex;

/// The deadline of each call to a server's tools when its config sets no `timeout`
/// (60 s); [`McpOptions::default_timeout`] changes it for a whole source.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long after its timeout a call ends by the server's own deadline, when no timeout
/// wrapper ended it first (the wrapper reads the same `timeout_ms`, and its result wins).
const BACKSTOP_MARGIN: Duration = Duration::from_millis(250);

/// The most pages of `tools/list` a server may answer with (default of
/// [`McpOptions::max_tool_pages`]).
pub const DEFAULT_MAX_TOOL_PAGES: usize = 100;
/// The most tools a server may list (default of [`McpOptions::max_tools`]).
pub const DEFAULT_MAX_TOOLS: usize = 1_000;
/// The most bytes a server's listed tools may take as JSON (default of
/// [`McpOptions::max_tool_list_bytes`]), 8 MiB.
pub const DEFAULT_MAX_TOOL_LIST_BYTES: usize = 8 * 1024 * 1024;
/// The longest message (one line) read from a server (default of
/// [`McpOptions::max_message_bytes`]), 16 MiB, as rmcp's own limit.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Timings, limits and the read-only mode of the servers of a source.
///
/// ```
/// use std::time::Duration;
/// let options = dsh_mcp::McpOptions {
///     health_check_timeout: Duration::from_millis(500),
///     ..Default::default()
/// };
/// assert_eq!(options.startup_timeout, Duration::from_secs(30));
/// assert_eq!(options.default_timeout, dsh_mcp::DEFAULT_TIMEOUT);
/// assert_eq!(options.default_timeout, Duration::from_secs(60));
/// assert_eq!((options.max_tool_pages, options.max_tools), (100, 1_000));
/// assert_eq!(options.max_tool_list_bytes, 8 * 1024 * 1024);
/// assert!(!options.read_only);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpOptions {
    /// The deadline of each tool call of a server whose config sets no `timeout`
    /// (default [`DEFAULT_TIMEOUT`], 60 s). It is the tools' `timeout_ms`, which the
    /// pipeline's timeout wrapper applies; the server also holds each call to it (plus a
    /// moment), so that a call ends even where no timeout wrapper is installed.
    pub default_timeout: Duration,
    /// How long a server may take to start, complete the handshake and list its tools.
    pub startup_timeout: Duration,
    /// After a call timed out, how long the server may take to answer a `ping` before it
    /// counts as hung and is killed.
    pub health_check_timeout: Duration,
    /// At shutdown, how long a server may take to exit after its stdin closed.
    pub shutdown_grace: Duration,
    /// At start, the most `tools/list` pages a server may answer with (each with a
    /// `nextCursor` asking for more); a server past it fails to start, naming the limit.
    pub max_tool_pages: usize,
    /// At start, the most tools a server may list; past it, it fails to start.
    pub max_tools: usize,
    /// At start, the most bytes the listed tools may take as JSON; past it, the server
    /// fails to start.
    pub max_tool_list_bytes: usize,
    /// The longest message (one line of JSON) read from a server. A longer answer ends its
    /// call at once with `TOOL_ERROR` (its bytes are dropped as they arrive, never held).
    pub max_message_bytes: usize,
    /// Read-only mode: only tools the server marks `readOnlyHint: true` run; every other
    /// tool is refused with `DENIED` (see [`McpToolSource::read_only_policy`](crate::McpToolSource::read_only_policy)).
    pub read_only: bool,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            default_timeout: DEFAULT_TIMEOUT,
            startup_timeout: Duration::from_secs(30),
            health_check_timeout: Duration::from_secs(2),
            shutdown_grace: Duration::from_secs(2),
            max_tool_pages: DEFAULT_MAX_TOOL_PAGES,
            max_tools: DEFAULT_MAX_TOOLS,
            max_tool_list_bytes: DEFAULT_MAX_TOOL_LIST_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            read_only: false,
        }
    }
}

/// Longest stderr line logged as one record; longer ones are logged in pieces.
const MAX_STDERR_LINE: u64 = 8 * 1024;

type Client = RunningService<RoleClient, InitializeRequestParams>;

/// The server's process group: killed when dropped, so no server outlives its connection.
struct ServerProcess {
    child: Box<dyn ChildWrapper>,
}

impl ServerProcess {
    fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Also reaches the server's own children (`npx` and the like) through the group.
        let _ = self.child.start_kill();
    }
}

struct Live {
    generation: u64,
    client: Client,
    process: ServerProcess,
}

impl Live {
    fn is_usable(&mut self) -> bool {
        !self.client.is_closed()
            && !self.client.peer().is_transport_closed()
            && !self.process.has_exited()
    }
}

/// A started (or restartable) MCP server.
pub(crate) struct McpServer {
    config: McpServerConfig,
    options: McpOptions,
    live: Mutex<Option<Live>>,
    generations: AtomicU64,
    /// Set by `shutdown`: later calls fail instead of starting the server again.
    closed: AtomicBool,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.config.name)
            .field("command", &self.config.command)
            .finish()
    }
}

fn client_info() -> InitializeRequestParams {
    InitializeRequestParams::new(
        ClientCapabilities::default(),
        Implementation::new("dsh", env!("CARGO_PKG_VERSION")),
    )
}

/// Logs the server's stderr, line by line; it never reaches a result.
fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(MAX_STDERR_LINE)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end();
                    if !text.is_empty() {
                        tracing::info!(target: "dsh_mcp::stderr", server = %server, "{text}");
                    }
                }
            }
        }
    });
}

/// What went wrong, saying so plainly for an answer dsh could not read.
fn service_error_text(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(e) if is_unreadable_answer(e) => {
            format!("dsh cannot read the answer: {}", e.message)
        }
        other => other.to_string(),
    }
}

/// The size of `value` as JSON, without building the text.
fn json_size(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A value that cannot be written counts as large as the limit allows.
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

fn failure(code: ErrorCode, message: String) -> ToolFailure {
    ToolFailure::with_code(code, message)
}

impl McpServer {
    pub(crate) fn new(config: McpServerConfig, options: McpOptions) -> McpServer {
        McpServer {
            config,
            options,
            live: Mutex::new(None),
            generations: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn config(&self) -> &McpServerConfig {
        &self.config
    }

    pub(crate) fn options(&self) -> &McpOptions {
        &self.options
    }

    /// The deadline of each call: the config's `timeout`, or the source's default (at
    /// least 1 ms).
    pub(crate) fn call_timeout(&self) -> Duration {
        self.config
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.options.default_timeout)
            .max(Duration::from_millis(1))
    }

    /// Starts the process and completes the MCP handshake.
    async fn connect(&self) -> Result<Live, String> {
        let mut command = tokio::process::Command::new(&self.config.command);
        command
            .args(&self.config.args)
            .env_remove(dsh_core::STORE_ENV_VARS[0])
            .env_remove(dsh_core::STORE_ENV_VARS[1])
            .envs(&self.config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(cwd) = &self.config.cwd {
            command.current_dir(cwd);
        }
        let mut wrapped = CommandWrap::from(command);
        wrapped.wrap(ProcessGroup::leader());
        let mut child = wrapped
            .spawn()
            .map_err(|e| format!("cannot run `{}`: {e}", self.config.command))?;
        let stdin = child.stdin().take();
        let stdout = child.stdout().take();
        let stderr = child.stderr().take();
        let mut process = ServerProcess { child };
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err("its stdin or stdout could not be connected".into());
        };
        if let Some(stderr) = stderr {
            log_stderr(self.config.name.clone(), stderr);
        }
        let transport = LineTransport::new(
            self.config.name.clone(),
            stdout,
            stdin,
            self.options.max_message_bytes,
        );
        let handshake = rmcp::serve_client(client_info(), transport);
        let client = match tokio::time::timeout(self.options.startup_timeout, handshake).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                let exited = process.has_exited();
                return Err(if exited {
                    format!("it exited during the MCP handshake ({e})")
                } else {
                    format!("the MCP handshake failed: {e}")
                });
            }
            Err(_) => {
                return Err(format!(
                    "no MCP handshake within {} ms",
                    self.options.startup_timeout.as_millis()
                ));
            }
        };
        // dsh lists tools once; cached pages would only hold a hostile server's list twice.
        client
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        if generation > 1 {
            tracing::info!(server = %self.config.name, generation, "MCP server restarted");
        }
        Ok(Live {
            generation,
            client,
            process,
        })
    }

    /// Starts the server and lists its tools (at start-up).
    pub(crate) async fn start_and_list(&self) -> Result<Vec<Tool>, String> {
        let peer = {
            let mut live = self.live.lock().await;
            let started = self.connect().await?;
            let peer = started.client.peer().clone();
            *live = Some(started);
            peer
        };
        match tokio::time::timeout(self.options.startup_timeout, self.list_tools(&peer)).await {
            Ok(listed) => listed,
            Err(_) => Err(format!(
                "it did not list its tools within {} ms",
                self.options.startup_timeout.as_millis()
            )),
        }
    }

    /// Follows `nextCursor` page by page, within the page, tool and byte limits.
    async fn list_tools(&self, peer: &Peer<RoleClient>) -> Result<Vec<Tool>, String> {
        let options = &self.options;
        let mut tools = Vec::new();
        let mut bytes = 0usize;
        let mut cursor = None;
        for page in 1.. {
            let params = PaginatedRequestParams::default().with_cursor(cursor);
            let listed = peer
                .list_tools(Some(params))
                .await
                .map_err(|e| format!("listing its tools failed: {}", service_error_text(&e)))?;
            for tool in listed.tools {
                bytes = bytes.saturating_add(json_size(&tool));
                if bytes > options.max_tool_list_bytes {
                    return Err(format!(
                        "its tool list is larger than the limit of {} bytes \
                         (max_tool_list_bytes)",
                        options.max_tool_list_bytes
                    ));
                }
                tools.push(tool);
                if tools.len() > options.max_tools {
                    return Err(format!(
                        "it lists more than the limit of {} tools (max_tools)",
                        options.max_tools
                    ));
                }
            }
            cursor = listed.next_cursor;
            if cursor.is_none() {
                break;
            }
            if page >= options.max_tool_pages {
                return Err(format!(
                    "its tool list goes on past the limit of {} pages (max_tool_pages)",
                    options.max_tool_pages
                ));
            }
        }
        Ok(tools)
    }

    /// The live connection's peer, starting the server again if it died.
    ///
    /// Runs in its own task: a caller that gives up (its deadline passed) does not cut a
    /// restart short, so a server slower to start than its tools' timeout still comes up for
    /// a later call.
    async fn peer(
        self: &Arc<Self>,
        signal: &Signal,
    ) -> Result<(Peer<RoleClient>, u64), ToolFailure> {
        // The common case, a live connection nobody is (re)starting, needs no task: the
        // spawn below exists only so that a start is never cut in half by a cancel.
        if let Ok(mut live) = self.live.try_lock()
            && !self.closed.load(Ordering::SeqCst)
            && let Some(current) = live.as_mut()
            && current.is_usable()
        {
            return Ok((current.client.peer().clone(), current.generation));
        }
        let server = self.clone();
        let ready = tokio::spawn(async move { server.ensure_live().await });
        tokio::select! {
            ready = ready => ready.map_err(|e| e.to_string()).and_then(|r| r).map_err(|e| {
                failure(
                    ErrorCode::ToolError,
                    format!("MCP server `{}` is not available: {e}", self.config.name),
                )
            }),
            reason = signal.cancelled() => Err(self.cancelled(reason)),
        }
    }

    async fn ensure_live(&self) -> Result<(Peer<RoleClient>, u64), String> {
        let mut live = self.live.lock().await;
        if self.closed.load(Ordering::SeqCst) {
            return Err("it was shut down".into());
        }
        if let Some(current) = live.as_mut()
            && current.is_usable()
        {
            return Ok((current.client.peer().clone(), current.generation));
        }
        if live.take().is_some() {
            tracing::warn!(server = %self.config.name, "MCP server is gone; starting it again");
        }
        let started = self.connect().await?;
        let pair = (started.client.peer().clone(), started.generation);
        *live = Some(started);
        Ok(pair)
    }

    fn cancelled(&self, reason: CancelReason) -> ToolFailure {
        if reason.is_timeout() {
            failure(
                ErrorCode::ToolTimeout,
                format!(
                    "MCP server `{}` did not answer in time (its timeout is {} ms)",
                    self.config.name,
                    self.call_timeout().as_millis()
                ),
            )
        } else {
            failure(ErrorCode::Aborted, reason.to_string())
        }
    }

    /// Forgets the connection of `generation` (if it is still the live one), killing it.
    async fn drop_connection(&self, generation: u64) {
        let mut live = self.live.lock().await;
        if live.as_ref().map(|l| l.generation) == Some(generation) {
            *live = None;
        }
    }

    /// After a timeout: a server that cannot answer a ping is hung, and is killed.
    fn check_health(self: &Arc<Self>, generation: u64) {
        let server = self.clone();
        tokio::spawn(async move {
            let mut live = server.live.lock().await;
            let Some(current) = live.as_ref() else {
                return;
            };
            if current.generation != generation {
                return;
            }
            let ping = current
                .client
                .peer()
                .send_request(ClientRequest::PingRequest(PingRequest {
                    method: Default::default(),
                    extensions: Default::default(),
                }));
            let answered = matches!(
                tokio::time::timeout(server.options.health_check_timeout, ping).await,
                Ok(Ok(_))
            );
            if !answered {
                tracing::warn!(
                    server = %server.config.name,
                    "MCP server did not answer a ping after a call timed out; killing it \
                     (it starts again on the next call)"
                );
                *live = None;
            }
        });
    }

    /// Calls one of the server's tools, bounded by `signal` and by the server's own
    /// deadline ([`McpServer::call_timeout`] and a moment more), so that a call ends even
    /// where no timeout wrapper is installed.
    pub(crate) async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: Map<String, Value>,
        signal: &Signal,
    ) -> Result<CallToolResult, ToolFailure> {
        let (timer, signal) = dsh_core::around::deadline(signal);
        let limit = self.call_timeout() + BACKSTOP_MARGIN;
        // Fires the deadline into the call's own signal, so that the call ends the way a
        // wrapper's timeout ends it (the server is pinged, and killed if it hangs).
        let backstop = async move {
            tokio::time::sleep(limit).await;
            timer.cancel(CancelReason::Timeout);
            std::future::pending::<Infallible>().await
        };
        tokio::select! {
            answer = self.call_within(tool, arguments, &signal) => answer,
            never = backstop => match never {},
        }
    }

    async fn call_within(
        self: &Arc<Self>,
        tool: &str,
        arguments: Map<String, Value>,
        signal: &Signal,
    ) -> Result<CallToolResult, ToolFailure> {
        let (peer, generation) = self.peer(signal).await?;
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        // Dropping the request (on cancel) sends the server `notifications/cancelled`.
        let answer = tokio::select! {
            answer = peer.call_tool(params) => answer,
            reason = signal.cancelled() => {
                if reason.is_timeout() {
                    self.check_health(generation);
                }
                return Err(self.cancelled(reason));
            }
        };
        match answer {
            Ok(result) => Ok(result),
            Err(ServiceError::McpError(e)) if is_unreadable_answer(&e) => Err(failure(
                ErrorCode::ToolError,
                format!(
                    "MCP server `{}` answered, but dsh cannot read the answer: {}",
                    self.config.name, e.message
                ),
            )),
            Err(ServiceError::McpError(e)) => Err(failure(
                ErrorCode::ToolError,
                format!(
                    "MCP server `{}` refused the call: {}",
                    self.config.name, e.message
                ),
            )),
            Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                self.drop_connection(generation).await;
                Err(failure(
                    ErrorCode::ToolError,
                    format!(
                        "MCP server `{}` stopped before it answered ({e}); it is started \
                         again on the next call",
                        self.config.name
                    ),
                ))
            }
            Err(e) => Err(failure(
                ErrorCode::ToolError,
                format!("MCP server `{}`: {e}", self.config.name),
            )),
        }
    }

    /// Closes the connection: stdin is closed, the server gets `shutdown_grace` to exit, and
    /// is killed after that.
    pub(crate) async fn shutdown(&self) {
        let mut guard = self.live.lock().await;
        self.closed.store(true, Ordering::SeqCst);
        let Some(mut live) = guard.take() else {
            return;
        };
        let _ = live
            .client
            .close_with_timeout(self.options.shutdown_grace)
            .await;
        let exited = tokio::time::timeout(self.options.shutdown_grace, live.process.child.wait());
        if !matches!(exited.await, Ok(Ok(_))) {
            tracing::warn!(server = %self.config.name, "MCP server did not exit; killed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::McpServers;

    fn server(entry: &str, options: McpOptions) -> McpServer {
        let servers =
            McpServers::from_json(&format!(r#"{{"mcpServers": {{"s": {entry}}}}}"#)).unwrap();
        McpServer::new(servers.servers()[0].clone(), options)
    }

    #[test]
    fn a_server_without_a_timeout_gets_the_default_of_60_seconds() {
        assert_eq!(DEFAULT_TIMEOUT, Duration::from_secs(60));
        assert_eq!(McpOptions::default().default_timeout, DEFAULT_TIMEOUT);
        let s = server(r#"{"command": "x"}"#, McpOptions::default());
        assert_eq!(s.config().timeout_ms, None);
        assert_eq!(s.call_timeout(), Duration::from_secs(60));
    }

    #[test]
    fn a_configured_timeout_wins_over_the_default_and_the_default_can_be_changed() {
        let s = server(r#"{"command": "x", "timeout": 250}"#, McpOptions::default());
        assert_eq!(s.call_timeout(), Duration::from_millis(250));
        let options = McpOptions {
            default_timeout: Duration::from_secs(5),
            ..Default::default()
        };
        assert_eq!(
            server(r#"{"command": "x"}"#, options).call_timeout(),
            Duration::from_secs(5)
        );
        assert_eq!(
            server(r#"{"command": "x", "timeout": 250}"#, options).call_timeout(),
            Duration::from_millis(250)
        );
        let zero = McpOptions {
            default_timeout: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(
            server(r#"{"command": "x"}"#, zero).call_timeout(),
            Duration::from_millis(1),
            "never a deadline that has passed before the call starts"
        );
    }
}
