//! Test tools and a harness builder shared by the workspace's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use dsh::core::SessionEvent;
use dsh::core::{
    ContentBlock, ExecutionMode, FrozenResult, Hooks, RetryPolicy, ToolCall, ToolContext,
    ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh::scheduler::{Harness, HarnessBuilder, PipelineConfig, SchedulerConfig, Session};
use dsh::session::{Durability, LogBackend, MemoryBackend, SessionError, SessionLog, WriterConfig};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub mod user_code;

/// Keeps the panics tests cause on purpose (messages with "on purpose" or "exploded") out of
/// the output; every other panic, test failures included, still prints.
pub fn quiet_intentional_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if !(msg.contains("on purpose") || msg.contains("exploded")) {
                default(info);
            }
        }));
    });
}

/// What the probe tools saw, shared by every probe of a test.
#[derive(Default)]
pub struct Probe {
    /// Bodies running now.
    pub active: AtomicUsize,
    /// The most bodies that ran at once.
    pub max_active: AtomicUsize,
    /// Exclusive bodies running now.
    pub exclusive_active: AtomicUsize,
    /// Set when an exclusive body ever ran beside another body.
    pub exclusive_overlap: AtomicBool,
    /// Bodies started.
    pub started: AtomicUsize,
    /// Bodies that ran to their end (not abandoned).
    pub completed: AtomicUsize,
    /// Calls to `finalize_content`, per tool.
    pub finalized: AtomicUsize,
    /// Arguments each body received, by call id.
    pub seen: Mutex<HashMap<String, Value>>,
    /// Attempts per call id.
    pub attempts: Mutex<HashMap<String, u32>>,
    /// The signal each body was handed, by call id.
    pub signals: Mutex<HashMap<String, dsh::core::Signal>>,
}

struct ActiveGuard {
    probe: Arc<Probe>,
    exclusive: bool,
}

impl ActiveGuard {
    fn enter(probe: &Arc<Probe>, exclusive: bool) -> ActiveGuard {
        let now = probe.active.fetch_add(1, Ordering::SeqCst) + 1;
        probe.max_active.fetch_max(now, Ordering::SeqCst);
        let exclusive_now = if exclusive {
            probe.exclusive_active.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            probe.exclusive_active.load(Ordering::SeqCst)
        };
        if (exclusive && now > 1) || (!exclusive && exclusive_now > 0) {
            probe.exclusive_overlap.store(true, Ordering::SeqCst);
        }
        ActiveGuard {
            probe: probe.clone(),
            exclusive,
        }
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let before = self.probe.active.fetch_sub(1, Ordering::SeqCst);
        if self.exclusive {
            self.probe.exclusive_active.fetch_sub(1, Ordering::SeqCst);
            if before > 1 {
                self.probe.exclusive_overlap.store(true, Ordering::SeqCst);
            }
        }
    }
}

/// A tool whose behaviour is chosen by its arguments:
/// `sleep_ms`, `ignore_cancel` (sleeps without looking at the signal), `fail` (message),
/// `retryable` (with `fail`: fails the first `fail_times` attempts), `panic`, `bad_output`
/// (breaks the output schema), `value` (returned), `marker` (kept in the value, not shown).
pub struct ProbeTool {
    pub name: String,
    pub parallel: bool,
    pub probe: Arc<Probe>,
    pub timeout_ms: Option<u64>,
    pub retry: Option<RetryPolicy>,
    pub finalize_panics: bool,
}

impl ProbeTool {
    pub fn new(name: &str, parallel: bool, probe: &Arc<Probe>) -> ProbeTool {
        ProbeTool {
            name: name.to_string(),
            parallel,
            probe: probe.clone(),
            timeout_ms: None,
            retry: None,
            finalize_panics: false,
        }
    }
}

/// Text `finalize_content` appends to every result of a probe tool.
pub const FINALIZED: &str = "[finalized]";

#[async_trait]
impl ToolDefinition for ProbeTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "a test probe"
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "sleep_ms": {"type": "integer", "minimum": 0},
                "ignore_cancel": {"type": "boolean"},
                "fail": {"type": "string"},
                "fail_times": {"type": "integer"},
                "retryable": {"type": "boolean"},
                "panic": {"type": "boolean"},
                "bad_output": {"type": "boolean"},
                "marker": {"type": "string"},
                "text": {"type": "string"},
                "unsafe": {"type": "boolean"}
            },
            "additionalProperties": false
        })
    }
    fn output_schema(&self) -> Option<Value> {
        Some(json!({"type": "object", "required": ["shown"]}))
    }
    fn execution_mode(&self) -> ExecutionMode {
        if self.parallel {
            ExecutionMode::Parallel
        } else {
            ExecutionMode::Exclusive
        }
    }
    fn is_concurrency_safe(&self, input: &Value) -> bool {
        if input.get("unsafe").and_then(Value::as_bool) == Some(true) {
            panic!("is_concurrency_safe exploded");
        }
        self.parallel
    }
    fn timeout_ms(&self) -> Option<u64> {
        self.timeout_ms
    }
    fn retry_policy(&self) -> Option<RetryPolicy> {
        self.retry
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.probe.started.fetch_add(1, Ordering::SeqCst);
        self.probe
            .seen
            .lock()
            .unwrap()
            .insert(ctx.call_id.clone(), input.clone());
        self.probe
            .signals
            .lock()
            .unwrap()
            .insert(ctx.call_id.clone(), ctx.signal.clone());
        let attempt = {
            let mut attempts = self.probe.attempts.lock().unwrap();
            let a = attempts.entry(ctx.call_id.clone()).or_insert(0);
            *a += 1;
            *a
        };
        let _active = ActiveGuard::enter(&self.probe, !self.parallel);
        if let Some(ms) = input.get("sleep_ms").and_then(Value::as_u64) {
            let sleep = tokio::time::sleep(Duration::from_millis(ms));
            if input.get("ignore_cancel").and_then(Value::as_bool) == Some(true) {
                sleep.await;
            } else {
                tokio::select! {
                    _ = sleep => {}
                    _ = ctx.signal.cancelled() => {
                        return Err(ToolFailure::new("stopped on signal"));
                    }
                }
            }
        }
        if input.get("panic").and_then(Value::as_bool) == Some(true) {
            panic!("probe body panicked on purpose");
        }
        if let Some(msg) = input.get("fail").and_then(Value::as_str) {
            let times = input
                .get("fail_times")
                .and_then(Value::as_u64)
                .unwrap_or(u64::MAX);
            if u64::from(attempt) <= times {
                let f = ToolFailure::new(msg.to_string());
                let retryable = input.get("retryable").and_then(Value::as_bool) == Some(true);
                return Err(if retryable { f.retryable() } else { f });
            }
        }
        self.probe.completed.fetch_add(1, Ordering::SeqCst);
        if input.get("bad_output").and_then(Value::as_bool) == Some(true) {
            return Ok(json!({"nope": true}));
        }
        let text = input
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("done")
            .to_string();
        Ok(json!({
            "shown": text,
            "attempt": attempt,
            "marker": input.get("marker").cloned().unwrap_or(Value::Null),
        }))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(
            value["shown"].as_str().unwrap_or_default().to_string(),
        )]
    }
    fn finalize_content(&self, mut content: Vec<ContentBlock>) -> Vec<ContentBlock> {
        self.probe.finalized.fetch_add(1, Ordering::SeqCst);
        if self.finalize_panics {
            panic!("finalize_content exploded");
        }
        content.push(ContentBlock::text(FINALIZED));
        content
    }
}

/// A registry with `par` (parallel-safe) and `ex` (exclusive) probes.
pub fn probe_registry(probe: &Arc<Probe>) -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    registry
        .register(ProbeTool::new("par", true, probe))
        .unwrap();
    registry
        .register(ProbeTool::new("ex", false, probe))
        .unwrap();
    registry
}

/// A harness and an open in-memory session.
pub async fn open(
    registry: Arc<ToolRegistry>,
    hooks: Hooks,
    config: SchedulerConfig,
) -> (Harness, Session, SessionLog) {
    open_with(HarnessBuilder::new(registry).hooks(hooks), config).await
}

/// Same, from a builder.
pub async fn open_with(
    builder: HarnessBuilder,
    config: SchedulerConfig,
) -> (Harness, Session, SessionLog) {
    quiet_intentional_panics();
    let harness = builder.build().await.unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness.open(log.clone(), config, None).await.unwrap();
    (harness, session, log)
}

/// A pipeline config with a short grace, for tests.
pub fn quick_config() -> PipelineConfig {
    PipelineConfig {
        body_grace: Duration::from_millis(20),
        ..PipelineConfig::default()
    }
}

/// A call.
pub fn call(id: &str, tool: &str, args: Value) -> ToolCall {
    ToolCall::new(id, tool, args)
}

/// The code of a result, or "ok".
pub fn code(r: &FrozenResult) -> &'static str {
    r.code().map(|c| c.as_str()).unwrap_or("ok")
}

/// A line of `/proc/self/status` (`VmRSS`, `VmHWM`, ...), in bytes; `None` off Linux.
fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line
        .trim_start_matches(field)
        .trim_start_matches(':')
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// This process's resident set size now, in bytes (`VmRSS`); `None` off Linux.
pub fn rss_bytes() -> Option<u64> {
    proc_status_bytes("VmRSS")
}

/// The most this process has ever had resident, in bytes (`VmHWM`); `None` off Linux.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_bytes("VmHWM")
}

/// An in-memory log whose commits fail (as a full disk would) whenever they hold an event
/// `refuse` picks; every other commit succeeds.
pub struct Refusing {
    inner: MemoryBackend,
    refuse: fn(&SessionEvent) -> bool,
}

impl LogBackend for Refusing {
    fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        if events.iter().any(self.refuse) {
            return Err(SessionError::Io {
                context: "appending to the log".into(),
                message: "No space left on device (os error 28)".into(),
            });
        }
        self.inner.commit(events, sync)
    }
    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        self.inner.read_all()
    }
    fn blocks(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "refusing memory".into()
    }
}

/// A new log over [`Refusing`].
pub async fn refusing_log(refuse: fn(&SessionEvent) -> bool) -> SessionLog {
    SessionLog::spawn(
        Box::new(Refusing {
            inner: MemoryBackend::default(),
            refuse,
        }),
        WriterConfig {
            durability: Durability::None,
            next_seq: 1,
        },
        None,
    )
    .await
    .unwrap()
}

/// Records every result the `tools/result` observers see.
#[derive(Default, Clone)]
pub struct Observed(pub Arc<Mutex<Vec<FrozenResult>>>);

impl dsh::core::ResultObserver for Observed {
    fn name(&self) -> &str {
        "observed"
    }
    fn observe(&self, result: &FrozenResult) {
        self.0.lock().unwrap().push(result.clone());
    }
}

impl Observed {
    /// The results seen for `call_id`.
    pub fn of(&self, call_id: &str) -> Vec<FrozenResult> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.call_id() == call_id)
            .cloned()
            .collect()
    }
}
