//! Tools and a harness shared by code mode's tests: `run_code` beside a few probe tools, run
//! through the real pipeline.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use dsh_code_mode::{CodeLimits, RunCode};
use dsh_core::{
    ExecutionMode, FrozenResult, Hooks, Signal, ToolCall, ToolContext, ToolDefinition, ToolFailure,
    ToolRegistry,
};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the probe tools saw.
#[derive(Default)]
pub struct Probe {
    pub active: AtomicUsize,
    pub max_active: AtomicUsize,
    pub started: AtomicUsize,
    pub completed: AtomicUsize,
    /// The signal of every body, in start order.
    pub signals: Mutex<Vec<Signal>>,
}

struct Active(Arc<Probe>);

impl Active {
    fn enter(probe: &Arc<Probe>) -> Active {
        let now = probe.active.fetch_add(1, Ordering::SeqCst) + 1;
        probe.max_active.fetch_max(now, Ordering::SeqCst);
        Active(probe.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `nap` (parallel-safe) and `solo` (exclusive): sleep `ms` unless cancelled, then answer
/// `{ shown: text, slept: ms }`, showing `text`.
pub struct Nap {
    pub name: &'static str,
    pub parallel: bool,
    pub probe: Arc<Probe>,
}

#[async_trait]
impl ToolDefinition for Nap {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "sleeps"
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "ms": {"type": "integer", "minimum": 0},
                "text": {"type": "string"},
                "fail": {"type": "string"}
            },
            "additionalProperties": false
        })
    }
    fn execution_mode(&self) -> ExecutionMode {
        if self.parallel {
            ExecutionMode::Parallel
        } else {
            ExecutionMode::Exclusive
        }
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.parallel
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.probe.started.fetch_add(1, Ordering::SeqCst);
        self.probe.signals.lock().unwrap().push(ctx.signal.clone());
        let _active = Active::enter(&self.probe);
        let ms = input.get("ms").and_then(Value::as_u64).unwrap_or(0);
        if ms > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = ctx.signal.cancelled() => return Err(ToolFailure::new("stopped on signal")),
            }
        }
        if let Some(why) = input.get("fail").and_then(Value::as_str) {
            return Err(ToolFailure::new(why.to_string()));
        }
        self.probe.completed.fetch_add(1, Ordering::SeqCst);
        let text = input.get("text").and_then(Value::as_str).unwrap_or("done");
        Ok(json!({"shown": text, "slept": ms}))
    }
    fn present(&self, value: &Value) -> Vec<dsh_core::ContentBlock> {
        vec![dsh_core::ContentBlock::text(
            value["shown"].as_str().unwrap_or_default().to_string(),
        )]
    }
}

/// `run_code` with these limits, its scripts run by this crate's worker binary.
pub fn run_code_tool(limits: CodeLimits) -> RunCode {
    RunCode::new(limits).with_worker(dsh_code_mode::WorkerCommand::new(env!(
        "CARGO_BIN_EXE_dsh-code-worker"
    )))
}

/// A registry with `run_code` (these limits), `nap` and `solo`.
pub fn registry(probe: &Arc<Probe>, limits: CodeLimits) -> Arc<ToolRegistry> {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(run_code_tool(limits)).unwrap();
    registry
        .register(Nap {
            name: "nap",
            parallel: true,
            probe: probe.clone(),
        })
        .unwrap();
    registry
        .register(Nap {
            name: "solo",
            parallel: false,
            probe: probe.clone(),
        })
        .unwrap();
    registry
}

/// Limits small enough for fast tests.
pub fn test_limits() -> CodeLimits {
    CodeLimits {
        timeout: Duration::from_secs(5),
        memory_bytes: 16 << 20,
        ..CodeLimits::default()
    }
}

/// A harness and an open in-memory session.
pub async fn open(
    registry: Arc<ToolRegistry>,
    hooks: Hooks,
    config: SchedulerConfig,
) -> (Harness, Session, SessionLog) {
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness.open(log.clone(), config, None).await.unwrap();
    (harness, session, log)
}

/// Runs one step with one `run_code` call and answers its result.
pub async fn run_code(session: &Session, id: &str, code: &str) -> FrozenResult {
    let out = session
        .run_step(StepRequest::new(vec![ToolCall::new(
            id,
            "run_code",
            json!({ "code": code }),
        )]))
        .await
        .unwrap();
    out.results[0].clone()
}

/// The code of a result, or "ok".
pub fn code(r: &FrozenResult) -> &'static str {
    r.code().map(|c| c.as_str()).unwrap_or("ok")
}

/// What the script returned (a successful run_code's `returned`).
pub fn returned(r: &FrozenResult) -> Value {
    assert!(!r.is_error(), "run_code failed: {}", r.text());
    r.value().unwrap()["returned"].clone()
}

/// Waits (a few seconds at most) until every script's worker process has ended.
pub async fn engines_gone() {
    let start = Instant::now();
    while dsh_code_mode::live_engines() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "a script's worker process is still running"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Serializes the tests of one binary that count live workers (the count is global).
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

/// What `/proc/PID/stat` says of a process: its command name, state letter (`Z`: ended, not
/// reaped) and parent; `None` once it is gone (Linux only).
pub struct ProcStat {
    pub comm: String,
    pub state: char,
    pub ppid: u32,
}

pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces, so read after its last `)`.
    let (head, rest) = stat.rsplit_once(')')?;
    let (_, comm) = head.split_once('(')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(ProcStat {
        comm: comm.to_string(),
        state,
        ppid,
    })
}

/// Every process of the machine, with what its stat says.
pub fn processes() -> Vec<(u32, ProcStat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, proc_stat(pid)?)))
        .collect()
}

/// The parent of `pid`, while it exists.
pub fn parent(pid: u32) -> Option<u32> {
    proc_stat(pid).map(|s| s.ppid)
}

/// True while `pid` runs (a zombie, ended and not yet reaped, does not).
pub fn running(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|s| s.state != 'Z')
}

/// Waits until `done` (10 s at most, else fails saying `what`).
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The pids of the script workers this process started (Linux: from /proc): its children
/// and the children of its fork servers (the fork servers themselves run no script), so a
/// test can see that a stopped script's process is really gone.
pub fn child_workers() -> Vec<u32> {
    let me = std::process::id();
    let servers = dsh_code_mode::fork_servers();
    processes()
        .into_iter()
        .filter(|(pid, stat)| {
            let parent_ours = stat.ppid == me || servers.contains(&stat.ppid);
            parent_ours && !servers.contains(pid) && stat.comm.contains("dsh-code-worker")
        })
        .map(|(pid, _)| pid)
        // The idle spare a `RunCode` starts ahead of its next script (listed from its start
        // until a script takes it or it is reaped) has run nothing: not a script's process.
        .filter(|pid| !dsh_code_mode::spare_workers().contains(pid))
        .collect()
}
