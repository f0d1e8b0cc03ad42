//! The MCP server: `tools/list` and `tools/call` over one session of the pipeline.

use crate::approval::ElicitingApprover;
use crate::error::ServeError;
use crate::tools::{mcp_result, mcp_tools};
use dsh_core::{ToolCall, ToolRegistry};
use dsh_scheduler::{
    CallCanceller, DeferredContext, Harness, OpenStep, PendingCall, SchedulerConfig,
    SchedulerError, Session,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::IntoTransport;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a session is served.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// How often a call whose request carries a progress token reports progress while it
    /// runs (MCP clients that reset their timeout on progress then keep waiting). Default 2 s.
    pub progress_every: Duration,
    /// The agent the calls are recorded for (default `main`).
    pub agent: String,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            progress_every: Duration::from_secs(2),
            agent: "main".into(),
        }
    }
}

/// The open step of the client and how many of its calls are in flight.
#[derive(Default)]
struct Step {
    open: Option<OpenStep>,
    in_flight: usize,
}

/// Where a server's calls go.
enum Source {
    /// One session for every call (stdio: one client).
    Fixed { session: Session, agent: String },
    /// The session of this MCP client session (`Mcp-Session-Id`), opened from the harness's
    /// store on the client's first call: one log per client session, and the client's calls
    /// recorded as its own agent, so read-before-edit is per client session.
    PerClient {
        harness: Harness,
        scheduler: SchedulerConfig,
        opened: tokio::sync::OnceCell<(Session, String)>,
    },
}

struct Inner {
    source: Source,
    tools: Vec<Tool>,
    structured: HashSet<String>,
    approver: Arc<ElicitingApprover>,
    config: ServeConfig,
    step: Mutex<Step>,
    next_call: AtomicU64,
}

/// dsh's MCP server for one client's session (an [`rmcp::ServerHandler`]). Clones share the
/// session and its open step.
#[derive(Clone)]
pub struct DshServer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DshServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DshServer")
            .field("session", &self.session())
            .field("tools", &self.inner.tools.len())
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The client session is over: no `ask` of its agent can reach it any more. (Its
        // session shuts itself down as its last handle goes.)
        if let Some(agent) = self.agent() {
            self.approver.disconnect(agent);
        }
    }
}

impl Inner {
    /// The session and agent calls go to, once there is one.
    fn opened(&self) -> Option<(&Session, &str)> {
        match &self.source {
            Source::Fixed { session, agent } => Some((session, agent)),
            Source::PerClient { opened, .. } => opened.get().map(|(s, a)| (s, a.as_str())),
        }
    }

    fn agent(&self) -> Option<&str> {
        self.opened().map(|(_, agent)| agent)
    }
}

/// The file name (without `.jsonl`) of a client session's log, from its `Mcp-Session-Id`
/// (visible ASCII, up to the header's length): letters, digits, `-` and `_` kept, anything
/// else `_`, at most 100 characters, never empty and never starting with a dot.
pub fn session_file_id(mcp_session_id: &str) -> String {
    let mut id: String = mcp_session_id
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() {
        id.push_str("session");
    }
    id
}

/// The `Mcp-Session-Id` of the HTTP request a call came in (rmcp puts the request's parts in
/// the context's extensions).
fn mcp_session_id(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// One call in flight: when the last one of a step ends (or its request is dropped), the step
/// is closed, so the next request opens the next step.
struct InFlight<'a> {
    server: &'a Inner,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let finished = {
            let mut step = self.server.step.lock().unwrap_or_else(|e| e.into_inner());
            step.in_flight = step.in_flight.saturating_sub(1);
            if step.in_flight == 0 {
                step.open.take()
            } else {
                None
            }
        };
        // Dropping the handle finishes the step: its calls all have their results already,
        // so it ends at once.
        drop(finished);
    }
}

impl DshServer {
    /// Serves `session`, listing the tools of `registry` (its harness's, read once, here).
    /// The harness should have `approver` as its approval responder, so that a policy `ask`
    /// reaches this server's client.
    pub fn new(
        session: Session,
        registry: &ToolRegistry,
        approver: Arc<ElicitingApprover>,
        config: ServeConfig,
    ) -> Self {
        let agent = config.agent.clone();
        Self::with_source(Source::Fixed { session, agent }, registry, approver, config)
    }

    /// Serves one MCP client session of the streamable HTTP transport: on its first
    /// `tools/call` it opens the session named by its `Mcp-Session-Id` ([`session_file_id`])
    /// from `harness`'s store (with a directory store, `<id>.jsonl`), and records its calls as
    /// that agent. Many such servers share one harness. The harness should have `approver` as
    /// its approval responder: an `ask` reaches the client whose call asked. Offers only the
    /// protocol versions with the `initialize` handshake (up to 2025-11-25), whose
    /// `Mcp-Session-Id` names the client's session.
    pub fn per_client(
        harness: Harness,
        scheduler: SchedulerConfig,
        approver: Arc<ElicitingApprover>,
        config: ServeConfig,
    ) -> Self {
        let registry = harness.pipeline().registry().clone();
        let source = Source::PerClient {
            harness,
            scheduler,
            opened: tokio::sync::OnceCell::new(),
        };
        Self::with_source(source, &registry, approver, config)
    }

    fn with_source(
        source: Source,
        registry: &ToolRegistry,
        approver: Arc<ElicitingApprover>,
        config: ServeConfig,
    ) -> Self {
        let tools = mcp_tools(registry);
        let structured = tools
            .iter()
            .filter(|t| t.output_schema.is_some())
            .map(|t| t.name.to_string())
            .collect();
        DshServer {
            inner: Arc::new(Inner {
                source,
                tools,
                structured,
                approver,
                config,
                step: Mutex::new(Step::default()),
                next_call: AtomicU64::new(1),
            }),
        }
    }

    /// The session the calls go to (for a per-client server, once its first call opened it).
    pub fn session(&self) -> Option<&Session> {
        self.inner.opened().map(|(session, _)| session)
    }

    /// The session and agent of this client, opened on its first call for a per-client
    /// server.
    async fn open(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Session, String), SchedulerError> {
        match &self.inner.source {
            Source::Fixed { session, agent } => Ok((session.clone(), agent.clone())),
            Source::PerClient {
                harness,
                scheduler,
                opened,
            } => {
                let (session, agent) = opened
                    .get_or_try_init(|| async {
                        let Some(header) = mcp_session_id(context) else {
                            return Err(SchedulerError::Unavailable(
                                "the request names no MCP session (Mcp-Session-Id)".into(),
                            ));
                        };
                        let id = session_file_id(&header);
                        let opened = harness.open_session(&id, scheduler.clone(), None).await?;
                        tracing::info!(session = %id, "opened the session of an MCP client");
                        Ok((opened.session, id))
                    })
                    .await?;
                Ok((session.clone(), agent.clone()))
            }
        }
    }

    /// Pushes a call into the client's open step (opening one if none is), counted in flight.
    fn push(
        &self,
        session: &Session,
        agent: &str,
        call: ToolCall,
    ) -> Result<(PendingCall, InFlight<'_>), SchedulerError> {
        let mut step = self.inner.step.lock().unwrap_or_else(|e| e.into_inner());
        if step.open.is_none() {
            step.open = Some(session.open_step_with(agent, DeferredContext::InResults)?);
        }
        let Some(open) = step.open.as_ref() else {
            return Err(SchedulerError::Unavailable("no open step".into()));
        };
        let pending = open.push(call)?;
        step.in_flight += 1;
        Ok((
            pending,
            InFlight {
                server: &self.inner,
            },
        ))
    }

    /// Runs one `tools/call` through the pipeline.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let (session, agent) = match self.open(&context).await {
            Ok(opened) => opened,
            Err(e) => return failure(&e),
        };
        self.inner.approver.connect(&agent, context.peer.clone());
        let n = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = ToolCall::new(format!("mcp_{n}"), name.clone(), arguments);
        let (pending, in_flight) = match self.push(&session, &agent, call) {
            Ok(pushed) => pushed,
            Err(e) => return failure(&e),
        };
        let canceller: CallCanceller = pending.canceller();
        let progress = context.meta.get_progress_token();
        let every = self
            .inner
            .config
            .progress_every
            .max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let result = pending.result();
        tokio::pin!(result);
        // Over HTTP: the client closing the stream its answer would come on cancels the call.
        let closed = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::http::StreamClosed>())
            .map(|closed| closed.0.clone());
        let stream_closed = async move {
            match closed {
                Some(closed) => closed.cancelled_owned().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(stream_closed);
        let mut cancelled = false;
        let mut reported = 0u64;
        let answer = loop {
            tokio::select! {
                answer = &mut result => break answer,
                () = &mut stream_closed, if !cancelled => {
                    cancelled = true;
                    let _ = canceller.cancel();
                }
                () = context.ct.cancelled(), if !cancelled => {
                    // The call ends ABORTED (or ABORTED_BEFORE_DISPATCH), recorded; the client
                    // no longer waits for the answer.
                    cancelled = true;
                    let _ = canceller.cancel();
                }
                _ = ticker.tick(), if progress.is_some() => {
                    if let Some(token) = progress.clone() {
                        reported += 1;
                        let note = ProgressNotificationParam::new(token, reported as f64)
                            .with_message(format!("{name} is running"));
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        };
        drop(in_flight);
        match answer {
            Ok(result) => mcp_result(&result, self.inner.structured.contains(&name)),
            Err(e) => failure(&e),
        }
    }

    /// Serves MCP on `transport` until the client goes away or `shutdown` resolves. Calls
    /// still in flight then are not cancelled here: shut the session down after this returns
    /// (they are recorded `ABORTED`).
    pub async fn serve<T, E, A>(
        self,
        transport: T,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError>
    where
        T: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let approver = self.inner.approver.clone();
        let agent = self.inner.agent().map(str::to_string);
        let service = ServiceExt::serve(self, transport)
            .await
            .map_err(|e| ServeError::Connect(e.to_string()))?;
        let stop = service.cancellation_token();
        let waiting = service.waiting();
        tokio::pin!(waiting);
        let ended = tokio::select! {
            ended = &mut waiting => ended,
            () = shutdown => {
                stop.cancel();
                waiting.await
            }
        };
        if let Some(agent) = agent {
            approver.disconnect(&agent);
        }
        ended
            .map(|_| ())
            .map_err(|e| ServeError::Connection(e.to_string()))
    }
}

/// Serves `server` on standard input and output until stdin ends or `shutdown` resolves.
pub async fn serve_stdio(
    server: DshServer,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    server.serve(rmcp::transport::stdio(), shutdown).await
}

/// A call that got no result of its own (the session is gone, or the log failed it).
fn failure(error: &SchedulerError) -> CallToolResult {
    let text = match error {
        SchedulerError::CallNotRecorded { error, .. } => format!(
            "PIPELINE_ERROR: the call's result could not be recorded in the session log ({error})"
        ),
        other => format!("PIPELINE_ERROR: {other}"),
    };
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl ServerHandler for DshServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("dsh", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "dsh runs each tool call through its policy, hooks, guards and sandbox, and \
                 records it in a session log.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.inner.source {
            Source::Fixed { .. } => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
            // The stateless 2026-07-28 era names no session: not served over HTTP yet.
            Source::PerClient { .. } => {
                Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Ok(self.call(request, context).await.into())
    }
}
