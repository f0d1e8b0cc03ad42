//! `dsh serve`'s server side against rmcp's client, in process over a pipe: the tool list,
//! calls through the open step and the log, parallel safe calls, cancellation, progress, and
//! a policy `ask` put to the client by elicitation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use dsh_core::{
    EventBody, HookError, Hooks, PostExecuteContext, PostExecuteHandler, PostExecuteOutcome,
    PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, SessionEvent, ToolContext,
    ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig};
use dsh_serve::{DshServer, ElicitingApprover, ServeConfig};
use dsh_session::SessionLog;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProgressNotificationParam, ProtocolVersion,
    Request, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Sleeps `ms` (parallel-safe; stops on cancel); an object output.
struct Nap {
    active: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

#[async_trait]
impl ToolDefinition for Nap {
    fn name(&self) -> &str {
        "nap"
    }
    fn description(&self) -> &str {
        "sleeps"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}})
    }
    fn output_schema(&self) -> Option<Value> {
        Some(
            json!({"type": "object", "properties": {"slept": {"type": "integer"}}, "required": ["slept"]}),
        )
    }
    fn execution_mode(&self) -> dsh_core::ExecutionMode {
        dsh_core::ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _: &Value) -> bool {
        true
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        let ms = input["ms"].as_u64().unwrap_or(0);
        let slept = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!({"slept": ms})),
            why = ctx.signal.cancelled() => Err(ToolFailure::new(format!("woken: {why}"))),
        };
        self.active.fetch_sub(1, Ordering::SeqCst);
        slept
    }
    fn present(&self, value: &Value) -> Vec<dsh_core::ContentBlock> {
        vec![dsh_core::ContentBlock::text(format!(
            "slept {}",
            value["slept"]
        ))]
    }
}

/// An exclusive tool that writes nothing but says what it got.
struct Note;

#[async_trait]
impl ToolDefinition for Note {
    fn name(&self) -> &str {
        "note"
    }
    fn description(&self) -> &str {
        "notes"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    async fn execute(&self, input: Value, _: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!(format!(
            "noted {}",
            input["text"].as_str().unwrap_or_default()
        )))
    }
}

/// `note` with text `ask` asks; with `deny` is denied.
struct Policy;

#[async_trait]
impl PreExecuteHandler for Policy {
    fn name(&self) -> &str {
        "policy"
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        Ok(match call.arguments["text"].as_str() {
            Some("ask") => PreExecuteOutcome::ask("may I?"),
            Some("deny") => PreExecuteOutcome::deny("no notes of that kind"),
            _ => PreExecuteOutcome::abstain(),
        })
    }
}

/// Every `nap` adds a context.
struct Context;

#[async_trait]
impl PostExecuteHandler for Context {
    fn name(&self) -> &str {
        "context"
    }
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        Ok(if call.tool.name() == "nap" {
            PostExecuteOutcome::accept().with_context("a context for the model")
        } else {
            PostExecuteOutcome::accept()
        })
    }
}

/// The client: answers elicitations as told (or declares none), counts progress.
#[derive(Clone)]
struct Client {
    elicit: Option<ElicitationAction>,
    progress: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.elicit.is_some() {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("test-client", "1"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            panic!("a form elicitation");
        };
        assert!(
            message.contains("note") && message.contains("may I?"),
            "{message}"
        );
        let action = self.elicit.clone().unwrap_or(ElicitationAction::Decline);
        let accepted = action == ElicitationAction::Accept;
        let answer = ElicitResult::new(action);
        Ok(if accepted {
            answer.with_content(json!({}))
        } else {
            answer
        })
    }

    async fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.fetch_add(1, Ordering::SeqCst);
    }
}

struct Served {
    client: RunningService<RoleClient, Client>,
    log: SessionLog,
    max_naps: Arc<AtomicUsize>,
    progress: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
}

async fn serve(elicit: Option<ElicitationAction>) -> Served {
    let registry = Arc::new(ToolRegistry::new());
    let max_naps = Arc::new(AtomicUsize::new(0));
    registry
        .register(Nap {
            active: Arc::default(),
            max: max_naps.clone(),
        })
        .unwrap();
    registry.register(Note).unwrap();
    let mut hooks = Hooks::new();
    hooks.pre_execute(Policy);
    hooks.post_execute(Context);
    let approver = Arc::new(ElicitingApprover::new());
    let harness = HarnessBuilder::new(registry.clone())
        .hooks(hooks)
        .approval(approver.clone())
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let server = DshServer::new(
        session,
        &registry,
        approver,
        ServeConfig {
            progress_every: Duration::from_millis(50),
            ..ServeConfig::default()
        },
    );
    let (server_end, client_end) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let _harness = harness;
        let _ = server
            .serve(tokio::io::split(server_end), std::future::pending())
            .await;
    });
    let progress = Arc::new(AtomicUsize::new(0));
    let asked = Arc::new(AtomicUsize::new(0));
    let client = Client {
        elicit,
        progress: progress.clone(),
        asked: asked.clone(),
    }
    .serve(tokio::io::split(client_end))
    .await
    .unwrap();
    Served {
        client,
        log,
        max_naps,
        progress,
        asked,
    }
}

fn call(name: &str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        panic!("object arguments")
    };
    CallToolRequestParams::new(name.to_string()).with_arguments(args)
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn events(log: &SessionLog) -> Vec<SessionEvent> {
    log.snapshot().await.unwrap()
}

/// Each call has one result, after it, in its step.
fn assert_paired(events: &[SessionEvent]) {
    let mut open = std::collections::HashMap::new();
    for e in events {
        match &e.body {
            EventBody::ToolCall(c) => {
                open.insert(e.seq, (e.step, c.call_id.clone()));
            }
            EventBody::ToolResult {
                source_event_seqs,
                data,
                ..
            } => {
                let (step, id) = open.remove(&source_event_seqs[0]).unwrap();
                assert_eq!((step, id), (e.step, data.call_id.clone()));
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "calls without results: {open:?}");
}

#[tokio::test]
async fn tools_are_listed_sorted_with_schemas_and_annotations() {
    let served = serve(None).await;
    let tools = served.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["nap", "note"]);
    let nap = &tools[0];
    assert_eq!(nap.input_schema.get("type"), Some(&json!("object")));
    assert!(nap.output_schema.is_some());
    let hints = nap.annotations.clone().unwrap();
    assert_eq!(hints.read_only_hint, Some(true));
    assert_eq!(hints.destructive_hint, Some(false));
    let note = &tools[1];
    assert!(note.output_schema.is_none());
    assert_eq!(
        note.annotations.clone().unwrap().destructive_hint,
        Some(true)
    );
    served.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_call_is_recorded_and_answered_with_its_context_and_structure() {
    let served = serve(None).await;
    let result = served
        .client
        .call_tool(call("nap", json!({"ms": 1})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false));
    assert_eq!(text(&result), "slept 1\na context for the model");
    // A client that shows the model the structured result shows it the context too.
    assert_eq!(
        result.structured_content,
        Some(json!({"slept": 1, "additionalContext": ["a context for the model"]}))
    );
    let recorded = events(&served.log).await;
    assert_eq!(recorded.len(), 2, "a call and its result, no user message");
    assert_paired(&recorded);
    // Errors carry their code; an unknown tool is answered by the pipeline and recorded.
    let denied = served
        .client
        .call_tool(call("note", json!({"text": "deny"})))
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true));
    assert!(text(&denied).starts_with("DENIED: "), "{}", text(&denied));
    let unknown = served
        .client
        .call_tool(call("nope", json!({})))
        .await
        .unwrap();
    assert!(
        text(&unknown).starts_with("UNKNOWN_TOOL: "),
        "{}",
        text(&unknown)
    );
    let events = events(&served.log).await;
    assert_eq!(events.len(), 6);
    assert_paired(&events);
    served.client.cancel().await.unwrap();
}

#[tokio::test]
async fn concurrent_safe_calls_run_side_by_side() {
    let served = serve(None).await;
    let started = Instant::now();
    let calls = (0..10).map(|_| served.client.call_tool(call("nap", json!({"ms": 300}))));
    let results = futures::future::join_all(calls).await;
    let wall = started.elapsed();
    for r in &results {
        assert_eq!(r.as_ref().unwrap().is_error, Some(false));
    }
    assert!(wall < Duration::from_millis(1500), "took {wall:?}");
    assert!(served.max_naps.load(Ordering::SeqCst) >= 5);
    let events = events(&served.log).await;
    assert_eq!(events.len(), 20);
    assert_paired(&events);
    served.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_request_is_recorded_aborted() {
    let served = serve(None).await;
    let request = ClientRequest::CallToolRequest(Request::new(call("nap", json!({"ms": 60_000}))));
    let handle = served
        .client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    while events(&served.log).await.is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = events(&served.log).await;
        if events.len() == 2 {
            let EventBody::ToolResult { data, .. } = &events[1].body else {
                panic!("a result")
            };
            assert_eq!(data.error.as_ref().unwrap().code.as_str(), "ABORTED");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cancelled call was not recorded"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The session goes on.
    let next = served
        .client
        .call_tool(call("nap", json!({"ms": 0})))
        .await
        .unwrap();
    assert_eq!(next.is_error, Some(false));
    served.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_long_call_reports_progress() {
    let served = serve(None).await;
    let request = ClientRequest::CallToolRequest(Request::new(call("nap", json!({"ms": 400}))));
    let handle = served
        .client
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let answer = handle.await_response().await.unwrap();
    assert!(matches!(answer, ServerResult::CallToolResult(_)));
    assert!(
        served.progress.load(Ordering::SeqCst) >= 3,
        "{} progress notifications",
        served.progress.load(Ordering::SeqCst)
    );
    served.client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_ask_is_put_to_the_client_and_only_a_yes_runs_it() {
    let yes = serve(Some(ElicitationAction::Accept)).await;
    let ran = yes
        .client
        .call_tool(call("note", json!({"text": "ask"})))
        .await
        .unwrap();
    assert_eq!(text(&ran), "noted ask");
    assert_eq!(yes.asked.load(Ordering::SeqCst), 1);
    yes.client.cancel().await.unwrap();

    for answer in [ElicitationAction::Decline, ElicitationAction::Cancel] {
        let no = serve(Some(answer)).await;
        let refused = no
            .client
            .call_tool(call("note", json!({"text": "ask"})))
            .await
            .unwrap();
        assert!(text(&refused).starts_with("DENIED: "), "{}", text(&refused));
        assert_eq!(no.asked.load(Ordering::SeqCst), 1);
        no.client.cancel().await.unwrap();
    }

    // A client that cannot be asked is refused, never allowed.
    let mute = serve(None).await;
    let refused = mute
        .client
        .call_tool(call("note", json!({"text": "ask"})))
        .await
        .unwrap();
    assert!(text(&refused).starts_with("DENIED: "), "{}", text(&refused));
    assert_eq!(mute.asked.load(Ordering::SeqCst), 0);
    assert_paired(&events(&mute.log).await);
    mute.client.cancel().await.unwrap();
}

/// The stateless 2026-07-28 era over the pipe (rmcp's client started by `server/discover`):
/// an `ask` comes back as an `InputRequiredResult`; left unanswered past the approval timeout,
/// the call is recorded `DENIED`, and a late yes with its genuine `requestState` gets that
/// `DENIED`, never a run.
#[tokio::test]
async fn an_unanswered_ask_of_the_2026_era_is_denied_at_the_approval_timeout() {
    use dsh_scheduler::PipelineConfig;
    use rmcp::model::{CallToolResponse, InputResponses};
    use rmcp::{ClientLifecycleMode, ClientServiceExt};
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Note).unwrap();
    let mut hooks = Hooks::new();
    hooks.pre_execute(Policy);
    let approver = Arc::new(ElicitingApprover::new());
    let harness = HarnessBuilder::new(registry.clone())
        .hooks(hooks)
        .approval(approver.clone())
        .config(PipelineConfig {
            approval_timeout: Duration::from_millis(300),
            ..PipelineConfig::default()
        })
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let server = DshServer::new(session, &registry, approver, ServeConfig::default());
    let (server_end, client_end) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let _harness = harness;
        let _ = server
            .serve(tokio::io::split(server_end), std::future::pending())
            .await;
    });
    let asked = Arc::new(AtomicUsize::new(0));
    let client = Client {
        elicit: Some(ElicitationAction::Accept),
        progress: Arc::default(),
        asked: asked.clone(),
    }
    .serve_with_lifecycle(
        tokio::io::split(client_end),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .unwrap();
    let first = client
        .call_tool_once(call("note", json!({"text": "ask"})))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(input) = first else {
        panic!("an InputRequiredResult: {first:?}")
    };
    assert!(
        input
            .input_requests
            .as_ref()
            .is_some_and(|r| r.contains_key(dsh_serve::APPROVAL_INPUT)),
        "{input:?}"
    );
    let state = input.request_state.clone().expect("a requestState");
    // Nobody answers: the approval timeout denies the call, in the log.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !events(&log)
        .await
        .iter()
        .any(|e| matches!(e.body, EventBody::ToolResult { .. }))
    {
        assert!(Instant::now() < deadline, "the ask never timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut yes = InputResponses::new();
    yes.insert(
        dsh_serve::APPROVAL_INPUT.to_string(),
        json!({"action": "accept", "content": {}}),
    );
    let late = client
        .call_tool_once(
            call("note", json!({"text": "ask"}))
                .with_request_state(state)
                .with_input_responses(yes),
        )
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = late else {
        panic!("a complete result: {late:?}")
    };
    assert!(
        text(&result).starts_with("DENIED: ") && text(&result).contains("did not answer within"),
        "{}",
        text(&result)
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "rmcp's handler is not used by call_tool_once"
    );
    let events = events(&log).await;
    assert_paired(&events);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e.body, EventBody::ToolCall(_)))
            .count(),
        1
    );
    client.cancel().await.unwrap();
}
