//! The MCP server: `tools/list` and `tools/call` over one session of the pipeline.

use crate::approval::ElicitingApprover;
use crate::error::ServeError;
use crate::tools::{mcp_result, mcp_tools};
use dsh_core::{ToolCall, ToolRegistry};
use dsh_scheduler::{
    CallCanceller, DeferredContext, OpenStep, PendingCall, SchedulerError, Session,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::IntoTransport;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
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

struct Inner {
    session: Session,
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
            .field("session", &self.inner.session)
            .field("tools", &self.inner.tools.len())
            .finish()
    }
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
        let tools = mcp_tools(registry);
        let structured = tools
            .iter()
            .filter(|t| t.output_schema.is_some())
            .map(|t| t.name.to_string())
            .collect();
        DshServer {
            inner: Arc::new(Inner {
                session,
                tools,
                structured,
                approver,
                config,
                step: Mutex::new(Step::default()),
                next_call: AtomicU64::new(1),
            }),
        }
    }

    /// The session the calls go to.
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// Pushes a call into the client's open step (opening one if none is), counted in flight.
    fn push(&self, call: ToolCall) -> Result<(PendingCall, InFlight<'_>), SchedulerError> {
        let mut step = self.inner.step.lock().unwrap_or_else(|e| e.into_inner());
        if step.open.is_none() {
            step.open = Some(
                self.inner
                    .session
                    .open_step_with(self.inner.config.agent.clone(), DeferredContext::InResults)?,
            );
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
        self.inner.approver.connect(context.peer.clone());
        let n = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = ToolCall::new(format!("mcp_{n}"), name.clone(), arguments);
        let (pending, in_flight) = match self.push(call) {
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
        let mut cancelled = false;
        let mut reported = 0u64;
        let answer = loop {
            tokio::select! {
                answer = &mut result => break answer,
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
        approver.disconnect();
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
