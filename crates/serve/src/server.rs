//! The MCP server: `tools/list` and `tools/call` over one session of the pipeline.

use crate::approval::{ElicitingApprover, Question, ask_message};
use crate::error::ServeError;
use crate::stateless::{self, StateKey, StatelessSessions};
use crate::tools::{mcp_result, mcp_tools};
use dsh_core::{ApprovalAnswer, FrozenResult, ToolCall, ToolRegistry};
use dsh_scheduler::{
    CallCanceller, DeferredContext, Harness, OpenStep, PendingCall, SchedulerConfig,
    SchedulerError, Session,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, Implementation,
    InputRequest, InputRequests, InputRequiredResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::IntoTransport;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The key of the one input request of an `ask`'s `InputRequiredResult` (its elicitation).
pub const APPROVAL_INPUT: &str = "approval";

/// How long the result of a call whose `ask` went to the client is kept for the client's
/// retry after the call ended (the approval timeout bounds the wait before that).
const PARKED_RETAIN: Duration = Duration::from_secs(600);

/// A call's result, awaited by whichever request answers for it.
type Outcome = Pin<Box<dyn Future<Output = Result<FrozenResult, SchedulerError>> + Send>>;

/// A call of the stateless era whose `ask` went to the client as an `InputRequiredResult`:
/// it stays in flight (in its step, in the log) until the client's retry answers, or the
/// approval timeout denies it.
struct Parked {
    answer: oneshot::Sender<ApprovalAnswer>,
    outcome: oneshot::Receiver<Result<FrozenResult, SchedulerError>>,
    canceller: CallCanceller,
}

/// How waiting for a call ended.
enum Waited {
    Done(Result<FrozenResult, SchedulerError>),
    Asked(Question),
}

/// How a session is served.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// How often a call whose request carries a progress token reports progress while it
    /// runs (MCP clients that reset their timeout on progress then keep waiting). Default 2 s.
    pub progress_every: Duration,
    /// The agent the calls are recorded for (default `main`).
    pub agent: String,
    /// A node of a fleet over one store (see [`crate::fleet`]): `requestState`s are signed
    /// with the fleet's key, and a retry whose call does not wait here is forwarded to the
    /// node that holds the session. `None`: a server of its own.
    pub fleet: Option<crate::fleet::FleetConfig>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            progress_every: Duration::from_secs(2),
            agent: "main".into(),
            fleet: None,
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
// One per server: the size of the larger variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Source {
    /// One session for every call (stdio: one client).
    Fixed { session: Session, agent: String },
    /// The session of this MCP client session (`Mcp-Session-Id`), opened from the harness's
    /// store on the client's first call: one log per client session, and the client's calls
    /// recorded as its own agent, so read-before-edit is per client session.
    /// In the stateless 2026-07-28 era, `named` is the session's id (see
    /// [`crate::stateless`]).
    PerClient {
        harness: Harness,
        scheduler: SchedulerConfig,
        named: Option<String>,
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
    next_call: Arc<AtomicU64>,
    /// Call ids are `<call_prefix><n>`.
    call_prefix: String,
    /// Signs this session's `requestState`s.
    key: StateKey,
    /// The calls waiting for the client's answer to their `ask`, by call id.
    parked: Mutex<HashMap<String, Parked>>,
    /// Over HTTP: where requests of the stateless era go.
    stateless: Option<Arc<StatelessSessions>>,
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

/// A fresh random log name for a 2025-11-25 client session: 32 hex digits.
fn private_log_id() -> String {
    let id: [u8; 16] = rand::random();
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Opens session `id` of `harness`, continuing its log. A named session released when idle
/// may still be closing (its log is let go as its actor stops): that is waited for, briefly.
async fn open_released(
    harness: &Harness,
    id: &str,
    scheduler: &SchedulerConfig,
) -> Result<dsh_scheduler::OpenedSession, SchedulerError> {
    let mut tries = 0;
    loop {
        match harness.open_session(id, scheduler.clone(), None).await {
            Err(SchedulerError::AlreadyOpen(_)) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            opened => return opened,
        }
    }
}

/// The scope (token) the HTTP guard gave the request a call came in.
fn request_scope(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::http_guard::SessionScope>())
        .map(|scope| scope.0.clone())
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
struct InFlight {
    server: Arc<Inner>,
}

impl Drop for InFlight {
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
        Self::with_source(
            Source::Fixed { session, agent },
            registry,
            approver,
            config,
            "mcp_".into(),
            Arc::new(AtomicU64::new(1)),
        )
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
            named: None,
            opened: tokio::sync::OnceCell::new(),
        };
        Self::with_source(
            source,
            &registry,
            approver,
            config,
            "mcp_".into(),
            Arc::new(AtomicU64::new(1)),
        )
    }

    /// The server of session `id` of the stateless era (its log `<id>.jsonl`, its agent
    /// `id`), whose call ids start with `call_prefix`.
    pub(crate) fn named(
        harness: Harness,
        scheduler: SchedulerConfig,
        approver: Arc<ElicitingApprover>,
        config: ServeConfig,
        id: String,
        call_prefix: String,
        next_call: Arc<AtomicU64>,
    ) -> Self {
        let registry = harness.pipeline().registry().clone();
        let source = Source::PerClient {
            harness,
            scheduler,
            named: Some(id),
            opened: tokio::sync::OnceCell::new(),
        };
        Self::with_source(source, &registry, approver, config, call_prefix, next_call)
    }

    /// Also serves the requests of the stateless 2026-07-28 era, each in the session it
    /// names in `sessions` (see [`StatelessSessions::client_server`]).
    pub(crate) fn serving_stateless(self, sessions: Arc<StatelessSessions>) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.stateless = Some(sessions);
                DshServer {
                    inner: Arc::new(inner),
                }
            }
            Err(inner) => DshServer { inner },
        }
    }

    fn with_source(
        source: Source,
        registry: &ToolRegistry,
        approver: Arc<ElicitingApprover>,
        config: ServeConfig,
        call_prefix: String,
        next_call: Arc<AtomicU64>,
    ) -> Self {
        let tools = mcp_tools(registry);
        let structured = tools
            .iter()
            .filter(|t| t.output_schema.is_some())
            .map(|t| t.name.to_string())
            .collect();
        let key = match &config.fleet {
            Some(fleet) => StateKey::from_bytes(fleet.state_key.bytes()),
            None => StateKey::random(),
        };
        DshServer {
            inner: Arc::new(Inner {
                source,
                tools,
                structured,
                approver,
                config,
                step: Mutex::new(Step::default()),
                next_call,
                call_prefix,
                key,
                parked: Mutex::new(HashMap::new()),
                stateless: None,
            }),
        }
    }

    /// Whether nothing but its owner holds this server: no request is being served by it, no
    /// call of it runs, no `ask` of it waits.
    pub(crate) fn is_unused(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// The session the calls go to (for a per-client server, once its first call opened it).
    pub fn session(&self) -> Option<&Session> {
        self.inner.opened().map(|(session, _)| session)
    }

    /// The session and agent of this client, opened on its first call for a per-client
    /// server.
    pub(crate) async fn open(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Session, String), SchedulerError> {
        match &self.inner.source {
            Source::Fixed { session, agent } => Ok((session.clone(), agent.clone())),
            Source::PerClient {
                harness,
                scheduler,
                named,
                opened,
            } => {
                let (session, agent) = opened
                    .get_or_try_init(|| async {
                        let id = match named {
                            Some(id) => id.clone(),
                            // The log's name is not the `Mcp-Session-Id`: whoever can list
                            // the folder learns nothing that reaches the session. It starts
                            // with the token's scope, so `--view` shows it to that token only.
                            // A 2025-11-25 client that names its dsh session (`Dsh-Session`)
                            // continues it on any node of a fleet; an unnamed one is its own.
                            None => match mcp_session_id(context) {
                                Some(_) => match crate::fleet_names::named(context) {
                                    Ok(Some(id)) => id,
                                    Ok(None) => match request_scope(context) {
                                        Some(scope) => format!("{scope}-{}", private_log_id()),
                                        None => private_log_id(),
                                    },
                                    Err(why) => return Err(SchedulerError::Unavailable(why)),
                                },
                                None => {
                                    return Err(SchedulerError::Unavailable(
                                        "the request names no MCP session (Mcp-Session-Id)".into(),
                                    ));
                                }
                            },
                        };
                        let opened = open_released(harness, &id, scheduler).await?;
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
    ) -> Result<(PendingCall, InFlight), SchedulerError> {
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
                server: self.inner.clone(),
            },
        ))
    }

    /// The session id (and agent) this server's calls go to, when it is fixed before any
    /// call: stdio's agent, or a session of the stateless era.
    fn bound_id(&self) -> Option<&str> {
        match &self.inner.source {
            Source::Fixed { agent, .. } => Some(agent),
            Source::PerClient { named, .. } => named.as_deref(),
        }
    }

    /// Runs one `tools/call` through the pipeline. In the stateless era (`stateless`), an
    /// `ask` is answered as an `InputRequiredResult` (the call stays in flight), and a
    /// request carrying a `requestState` is the client's answer to one.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        stateless: bool,
    ) -> Result<CallToolResponse, McpError> {
        if stateless && request.request_state.is_some() {
            return self.resume(request, context).await;
        }
        let (session, agent) = match self.open(&context).await {
            Ok(opened) => opened,
            Err(e) => {
                if let Some(busy) = crate::fleet::busy(&e) {
                    return Err(busy);
                }
                return Ok(failure(&e).into());
            }
        };
        if !stateless {
            self.inner.approver.connect(&agent, context.peer.clone());
        }
        let n = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
        let call_id = format!("{}{n}", self.inner.call_prefix);
        let _origin = (!stateless).then(|| {
            self.inner
                .approver
                .originate(&agent, &call_id, context.id.clone())
        });
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        // In the stateless era the client cannot be asked by a request of the server's own:
        // the `ask` of this call comes back here.
        let (_route, mut questions) = if stateless {
            let can_ask = context
                .client_capabilities()
                .is_some_and(|caps| caps.elicitation.is_some());
            let (route, questions) = self.inner.approver.route(&agent, &call_id, can_ask);
            (Some(route), Some(questions))
        } else {
            (None, None)
        };
        let call = ToolCall::new(call_id.clone(), name.clone(), arguments.clone());
        let (pending, in_flight) = match self.push(&session, &agent, call) {
            Ok(pushed) => pushed,
            Err(e) => return Ok(failure(&e).into()),
        };
        let canceller: CallCanceller = pending.canceller();
        let mut result: Outcome = Box::pin(pending.result());
        let waited = self
            .wait(&mut result, &canceller, &context, &name, questions.as_mut())
            .await;
        let question = match waited {
            Waited::Done(answer) => {
                drop(in_flight);
                return Ok(self.answer(answer, &name).into());
            }
            Waited::Asked(question) => question,
        };
        // The `ask` goes to the client; the call waits, in flight, for its retry.
        let Some(state) = self.inner.key.seal(&agent, &call_id, &name, &arguments) else {
            // Dropping the question's answer rejects the call: it ends DENIED.
            drop(question);
            let answer = result.await;
            drop(in_flight);
            return Ok(self.answer(answer, &name).into());
        };
        let message = ask_message(&question.tool, &question.prompt, &question.arguments);
        let (done, outcome) = oneshot::channel();
        self.inner
            .parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                call_id.clone(),
                Parked {
                    answer: question.answer,
                    outcome,
                    canceller,
                },
            );
        // Weak: once the call ended, the kept result does not hold the session open.
        let inner = Arc::downgrade(&self.inner);
        let parked_id = call_id.clone();
        tokio::spawn(async move {
            let answer = result.await;
            drop(in_flight);
            let _ = done.send(answer);
            tokio::time::sleep(PARKED_RETAIN).await;
            if let Some(inner) = inner.upgrade() {
                inner
                    .parked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&parked_id);
            }
        });
        tracing::info!(session = %agent, call = %call_id, tool = %name, "asked the client (input required)");
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: ElicitationSchema::new(BTreeMap::new()),
        };
        let mut requests = InputRequests::new();
        requests.insert(
            APPROVAL_INPUT.to_string(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        Ok(InputRequiredResult::new(Some(requests), Some(state)).into())
    }

    /// The client's retry with its answer to an `ask`: the `requestState` must be one this
    /// server signed for this session, call, tool and arguments, and the call must still
    /// wait for it (once); anything else is refused and changes nothing.
    async fn resume(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let refused = || {
            McpError::invalid_params(
                "the requestState is not valid for this call and session (forged, altered, or \
                 made for another call or session)",
                None,
            )
        };
        let Some(session) = self.bound_id() else {
            return Err(refused());
        };
        let state = request.request_state.as_deref().unwrap_or_default();
        let name = request.name.to_string();
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let Some(call_id) = self.inner.key.open(state, session, &name, &arguments) else {
            tracing::warn!(session, "refused a requestState that does not verify");
            return Err(refused());
        };
        let answer = approval_answer(request.input_responses.as_ref())?;
        let parked = self
            .inner
            .parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&call_id);
        let Some(parked) = parked else {
            // In a fleet, the call may wait on the node holding the session: the answer goes
            // there; or that node died, and its call was closed when this one took over.
            if self.inner.config.fleet.is_some() {
                return crate::fleet::answer_elsewhere(self, request, &context, &call_id).await;
            }
            return Err(McpError::invalid_params(
                format!(
                    "call {call_id} does not wait for an answer (it was answered already, or \
                     ended long ago)"
                ),
                None,
            ));
        };
        // When the approval timeout ran out already, nobody takes the answer: the call was
        // DENIED, and that is its result below.
        let _ = parked.answer.send(answer);
        let outcome = parked.outcome;
        let mut result: Outcome = Box::pin(async move {
            outcome.await.unwrap_or_else(|_| {
                Err(SchedulerError::Unavailable(
                    "the call's result was lost".into(),
                ))
            })
        });
        match self
            .wait(&mut result, &parked.canceller, &context, &name, None)
            .await
        {
            Waited::Done(answer) => Ok(self.answer(answer, &name).into()),
            Waited::Asked(_) => {
                Ok(failure(&SchedulerError::Unavailable("the call asked twice".into())).into())
            }
        }
    }

    /// A call's result as MCP answers it.
    fn answer(&self, answer: Result<FrozenResult, SchedulerError>, name: &str) -> CallToolResult {
        match answer {
            Ok(result) => mcp_result(&result, self.inner.structured.contains(name)),
            Err(e) => failure(&e),
        }
    }

    /// Waits for `result`: cancels the call when the client cancels the request or closes
    /// its stream, reports progress when the request has a progress token, and returns early
    /// with the call's `ask` when `questions` receives one.
    async fn wait(
        &self,
        result: &mut Outcome,
        canceller: &CallCanceller,
        context: &RequestContext<RoleServer>,
        name: &str,
        questions: Option<&mut mpsc::Receiver<Question>>,
    ) -> Waited {
        let progress = context.meta.get_progress_token();
        let every = self
            .inner
            .config
            .progress_every
            .max(Duration::from_millis(10));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
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
        let asked = async move {
            match questions {
                Some(questions) => match questions.recv().await {
                    Some(question) => question,
                    None => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::pin!(asked);
        let mut cancelled = false;
        let mut reported = 0u64;
        loop {
            tokio::select! {
                answer = &mut *result => return Waited::Done(answer),
                question = &mut asked, if !cancelled => return Waited::Asked(question),
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
/// The end of stdin is the client going away: the calls still in flight are cancelled at once
/// (recorded `ABORTED`), so dsh ends within the cancel's bound instead of running them on for
/// a client that will never read their results (a stdio client gives its server a couple of
/// seconds after closing stdin before it signals it).
pub async fn serve_stdio(
    server: DshServer,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let session = server.session().cloned();
    let stdin = EndOfInput::new(tokio::io::stdin(), move || {
        if let Some(session) = &session {
            // A session already shutting down has nothing left to cancel.
            let _ = session.cancel(dsh_scheduler::CancelTarget::Session);
        }
    });
    // Lines that are not JSON-RPC messages are answered (`-32700`/`-32600`), not dropped.
    let transport = crate::stdio_lines::FilteredLines::new(stdin, tokio::io::stdout());
    server.serve(transport, shutdown).await
}

/// A reader that calls `on_end` once, when its input ends (or fails).
struct EndOfInput<R, F: FnMut()> {
    inner: R,
    on_end: Option<F>,
}

impl<R, F: FnMut()> EndOfInput<R, F> {
    fn new(inner: R, on_end: F) -> Self {
        EndOfInput {
            inner,
            on_end: Some(on_end),
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin, F: FnMut() + Unpin> tokio::io::AsyncRead
    for EndOfInput<R, F>
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let (before, room) = (buf.filled().len(), buf.remaining() > 0);
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let ended = match &polled {
            std::task::Poll::Ready(Ok(())) => room && buf.filled().len() == before,
            std::task::Poll::Ready(Err(_)) => true,
            std::task::Poll::Pending => false,
        };
        if ended && let Some(mut on_end) = self.on_end.take() {
            on_end();
        }
        polled
    }
}

/// The client's answer to an `ask`, from its retry's `inputResponses`: accept allows the
/// call once, decline or cancel denies it. A retry without a readable answer is refused (and
/// the call keeps waiting).
fn approval_answer(
    responses: Option<&rmcp::model::InputResponses>,
) -> Result<ApprovalAnswer, McpError> {
    let Some(response) = responses.and_then(|r| r.get(APPROVAL_INPUT)) else {
        return Err(McpError::invalid_params(
            format!("the retry carries no answer (inputResponses.{APPROVAL_INPUT})"),
            None,
        ));
    };
    let answer: ElicitResult = serde_json::from_value(response.clone()).map_err(|e| {
        McpError::invalid_params(
            format!("inputResponses.{APPROVAL_INPUT} is not an elicitation result: {e}"),
            None,
        )
    })?;
    Ok(match answer.action {
        ElicitationAction::Accept => ApprovalAnswer::Approve,
        ElicitationAction::Decline => {
            ApprovalAnswer::Reject(Some("declined by the MCP client".into()))
        }
        ElicitationAction::Cancel => {
            ApprovalAnswer::Reject(Some("cancelled by the MCP client".into()))
        }
        _ => ApprovalAnswer::Reject(Some(
            "the MCP client gave an answer dsh does not know".into(),
        )),
    })
}

/// A call that got no result of its own (the session is gone, or the log failed it).
pub(crate) fn failure(error: &SchedulerError) -> CallToolResult {
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
        match (&self.inner.source, &self.inner.stateless) {
            (Source::Fixed { .. }, _) | (Source::PerClient { .. }, Some(_)) => {
                Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
            }
            // Without the stateless sessions, a request of the 2026-07-28 era names no
            // session: only the versions with `initialize` (and `Mcp-Session-Id`).
            (Source::PerClient { .. }, None) => {
                Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // A session name is checked on every request of the stateless era.
        if stateless::is_stateless(&context) && self.inner.stateless.is_some() {
            stateless::session_id(&context)?;
        }
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !stateless::is_stateless(&context) {
            return self.call(request, context, false).await;
        }
        // The stateless era: the session the request names (over HTTP), or this server's own
        // (stdio). A retry answers a call that exists already.
        let server = match &self.inner.stateless {
            Some(sessions) => sessions.server(&context, request.request_state.is_none())?,
            None => self.clone(),
        };
        server.call(request, context, true).await
    }
}
