//! Figures of the scheduler and the pipeline (`pipeline/*`).

use crate::Bench;
use crate::report::{emit, quantile};
use async_trait::async_trait;
use dsh_core::around::{DispatchOutcome, DispatchRequest, Next};
use dsh_core::{
    Around, ExecutionMode, HookError, Hooks, PostExecuteContext, PostExecuteHandler,
    PostExecuteOutcome, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, ResultObserver,
    ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh_guards::{FnGuard, GuardCall, GuardVerdict};
use dsh_scheduler::{CancelTarget, Harness, HarnessBuilder, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Benchmarks of this module.
pub const BENCHES: &[Bench] = &[
    Bench {
        name: "pipeline/overhead",
        in_all: true,
        run: overhead,
    },
    Bench {
        name: "pipeline/throughput",
        in_all: true,
        run: throughput,
    },
    Bench {
        name: "pipeline/parallel_efficiency",
        in_all: true,
        run: parallel_efficiency,
    },
    Bench {
        name: "pipeline/cancel_latency",
        in_all: true,
        run: cancel_latency,
    },
    Bench {
        name: "pipeline/memory",
        in_all: true,
        run: memory,
    },
    Bench {
        name: "soak",
        in_all: false,
        run: soak,
    },
];

/// A parallel-safe tool: `{}` returns at once, `sleep_ms` sleeps (listening to its signal
/// unless `deaf`), `wait` parks until its signal fires.
struct Noop;

#[async_trait]
impl ToolDefinition for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "does nothing"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        if let Some(ms) = input.get("sleep_ms").and_then(Value::as_u64) {
            let sleep = tokio::time::sleep(Duration::from_millis(ms));
            if input.get("deaf").and_then(Value::as_bool) == Some(true) {
                sleep.await;
            } else {
                tokio::select! {
                    _ = sleep => {}
                    _ = ctx.signal.cancelled() => {}
                }
            }
        }
        Ok(Value::Null)
    }
}

struct PassPre;
#[async_trait]
impl PreExecuteHandler for PassPre {
    fn name(&self) -> &str {
        "pass"
    }
    async fn pre_execute(
        &self,
        _c: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        Ok(PreExecuteOutcome::allow())
    }
}

struct PassAround;
#[async_trait]
impl Around for PassAround {
    fn name(&self) -> &str {
        "pass"
    }
    async fn around(&self, req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        next.run(req).await
    }
}

struct PassPost;
#[async_trait]
impl PostExecuteHandler for PassPost {
    fn name(&self) -> &str {
        "pass"
    }
    async fn post_execute(
        &self,
        _c: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        Ok(PostExecuteOutcome::accept())
    }
}

struct Count(Arc<AtomicUsize>);
impl ResultObserver for Count {
    fn name(&self) -> &str {
        "count"
    }
    fn observe(&self, _r: &dsh_core::FrozenResult) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// [`Count`] that says it never blocks (the opt-in: observers then run inline).
struct InlineCount(Arc<AtomicUsize>);
impl ResultObserver for InlineCount {
    fn name(&self) -> &str {
        "count"
    }
    fn observe(&self, _r: &dsh_core::FrozenResult) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn may_block(&self) -> bool {
        false
    }
}

/// The runtime the pipeline benches (and `pipeline/handoff`) run on.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot build a runtime: {e}");
            std::process::exit(3);
        }
    }
}

fn must<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{what}: {e}");
            std::process::exit(3);
        }
    }
}

/// A harness with one handler at every hook point and one guard that never blocks.
async fn full_harness() -> Harness {
    full_harness_with(GuardKind::NonBlocking).await
}

/// Whether the bench's guard says it may block (so it runs on tokio's blocking pool).
#[derive(Clone, Copy)]
enum GuardKind {
    NonBlocking,
    MayBlock,
    /// Non-blocking guard, and the observer opts in to running inline (a second figure).
    AllInline,
}

async fn full_harness_with(guard: GuardKind) -> Harness {
    let registry = Arc::new(ToolRegistry::new());
    must(registry.register(Noop), "register");
    pass_through_harness(registry, Hooks::new(), guard).await
}

/// A harness over `registry` with `hooks` plus one pass-through handler at every hook point
/// and one guard that abstains.
async fn pass_through_harness(
    registry: Arc<ToolRegistry>,
    mut hooks: Hooks,
    guard: GuardKind,
) -> Harness {
    hooks.pre_execute(PassPre);
    hooks.around(PassAround);
    hooks.post_execute(PassPost);
    match guard {
        GuardKind::AllInline => hooks.observe(InlineCount(Arc::new(AtomicUsize::new(0)))),
        _ => hooks.observe(Count(Arc::new(AtomicUsize::new(0)))),
    };
    let harness = must(
        HarnessBuilder::new(registry).hooks(hooks).build().await,
        "harness",
    );
    let owner = must(
        harness
            .pipeline()
            .guards()
            .register({
                let pass: fn(&GuardCall) -> GuardVerdict = |_c| GuardVerdict::Abstain;
                match guard {
                    GuardKind::NonBlocking | GuardKind::AllInline => {
                        FnGuard::non_blocking("pass", pass)
                    }
                    GuardKind::MayBlock => FnGuard::new("pass", pass),
                }
            })
            .await,
        "guard",
    );
    std::mem::forget(owner); // the guard stays for the harness's life
    harness
}

async fn session(harness: &Harness, cap: usize) -> Session {
    let log = must(SessionLog::memory().await, "log");
    let config = SchedulerConfig {
        max_parallel_tool_calls: cap,
        ..SchedulerConfig::default()
    };
    must(harness.open(log, config, None).await, "session")
}

fn noop_step(id: &str) -> StepRequest {
    StepRequest::new(vec![ToolCall::new(id, "noop", json!({}))])
}

/// `STEPS` one-call steps through `session` after a warm-up, each step's latency in µs.
async fn step_latencies(session: &Session, tag: &str) -> Vec<f64> {
    const WARM_UP: usize = 2_000;
    const STEPS: usize = 20_000;
    let mut samples = Vec::with_capacity(STEPS);
    for i in 0..WARM_UP + STEPS {
        let t = Instant::now();
        must(
            session.run_step(noop_step(&format!("{tag}{i}"))).await,
            "step",
        );
        if i >= WARM_UP {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    samples
}

/// The latencies of `harness`'s steps, from a task on the runtime (how a service calls the
/// harness), and the floor: the same body run by a bare `tokio::spawn` from that task.
async fn overhead_from_a_task(guard: GuardKind) -> (Vec<f64>, Vec<f64>) {
    let harness = full_harness_with(guard).await;
    let session = session(&harness, 10).await;
    let samples = step_latencies(&session, "c").await;
    let mut floor = Vec::with_capacity(samples.len());
    for _ in 0..samples.len() {
        let t = Instant::now();
        let body =
            tokio::spawn(async { Noop.execute(json!({}), ToolContext::detached("f")).await });
        let _ = body.await;
        floor.push(t.elapsed().as_secs_f64() * 1e6);
    }
    session.shutdown().await;
    harness.shutdown().await;
    (samples, floor)
}

fn overhead() {
    let rt = runtime();
    let b = "pipeline/overhead";
    let (mut samples, mut floor) = must(
        rt.block_on(rt.spawn(overhead_from_a_task(GuardKind::NonBlocking))),
        "bench task",
    );
    let (mut pooled, _) = must(
        rt.block_on(rt.spawn(overhead_from_a_task(GuardKind::MayBlock))),
        "bench task",
    );
    let (mut inline, _) = must(
        rt.block_on(rt.spawn(overhead_from_a_task(GuardKind::AllInline))),
        "bench task",
    );
    // The same steps awaited by `block_on` on a thread outside the runtime (a
    // `#[tokio::main]` body): every step then also wakes that thread.
    let mut outside = rt.block_on(async {
        let harness = full_harness().await;
        let session = session(&harness, 10).await;
        let samples = step_latencies(&session, "o").await;
        session.shutdown().await;
        harness.shutdown().await;
        samples
    });
    let p50 = quantile(&mut samples, 0.5);
    let floor_p50 = quantile(&mut floor, 0.5);
    emit(b, "p50_us", p50, "us");
    emit(b, "p99_us", quantile(&mut samples, 0.99), "us");
    emit(b, "floor_p50_us", floor_p50, "us");
    emit(b, "ratio_to_floor", p50 / floor_p50, "ratio");
    emit(b, "blocking_guard_p50_us", quantile(&mut pooled, 0.5), "us");
    // The opt-in: the observer says it never blocks (`ResultObserver::may_block`).
    emit(
        b,
        "inline_observer_p50_us",
        quantile(&mut inline, 0.5),
        "us",
    );
    emit(b, "block_on_p50_us", quantile(&mut outside, 0.5), "us");
    emit(b, "block_on_p99_us", quantile(&mut outside, 0.99), "us");
}

fn throughput() {
    let rt = runtime();
    rt.block_on(async {
        let harness = full_harness().await;
        let mut sessions = Vec::new();
        for _ in 0..100 {
            sessions.push(session(&harness, 10).await);
        }
        let per_session_steps = 100;
        let calls_per_step = 10;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for s in &sessions {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for step in 0..per_session_steps {
                    let calls = (0..calls_per_step)
                        .map(|i| ToolCall::new(format!("c{step}_{i}"), "noop", json!({})))
                        .collect();
                    must(s.run_step(StepRequest::new(calls)).await, "step");
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        let secs = started.elapsed().as_secs_f64();
        let calls = (sessions.len() * per_session_steps * calls_per_step) as f64;
        emit(
            "pipeline/throughput",
            "calls_per_s",
            calls / secs,
            "calls/s",
        );
        for s in &sessions {
            s.shutdown().await;
        }
        harness.shutdown().await;
    });
}

fn parallel_efficiency() {
    let rt = runtime();
    rt.block_on(async {
        let harness = full_harness().await;
        let session = session(&harness, 10).await;
        let mut walls = Vec::new();
        for round in 0..5 {
            let calls = (0..10)
                .map(|i| ToolCall::new(format!("r{round}c{i}"), "noop", json!({"sleep_ms": 100})))
                .collect();
            let t = Instant::now();
            must(session.run_step(StepRequest::new(calls)).await, "step");
            walls.push(t.elapsed().as_secs_f64() * 1e3);
        }
        emit(
            "pipeline/parallel_efficiency",
            "wall_ms",
            quantile(&mut walls, 0.5),
            "ms",
        );
        session.shutdown().await;
        harness.shutdown().await;
    });
}

fn cancel_latency() {
    let rt = runtime();
    rt.block_on(async {
        let harness = full_harness().await;
        let session = session(&harness, 10).await;
        let mut samples = Vec::new();
        for round in 0..200 {
            let calls: Vec<ToolCall> = (0..10)
                .map(|i| {
                    ToolCall::new(
                        format!("r{round}c{i}"),
                        "noop",
                        json!({"sleep_ms": 60_000, "deaf": i % 2 == 0}),
                    )
                })
                .collect();
            let s = session.clone();
            let step = tokio::spawn(async move { s.run_step(StepRequest::new(calls)).await });
            // Let every call reach its body.
            tokio::time::sleep(Duration::from_millis(5)).await;
            let t = Instant::now();
            must(session.cancel(CancelTarget::Step), "cancel");
            let out = must(must(step.await, "join"), "step");
            samples.push(t.elapsed().as_secs_f64() * 1e3);
            if out.results.iter().any(|r| !r.is_error()) {
                eprintln!("a cancelled call succeeded");
            }
        }
        emit(
            "pipeline/cancel_latency",
            "p99_ms",
            quantile(&mut samples, 0.99),
            "ms",
        );
        session.shutdown().await;
        harness.shutdown().await;
    });
}

/// Resident set size of this process, in bytes (Linux).
pub fn rss_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0
}

fn memory() {
    let rt = runtime();
    rt.block_on(async {
        let harness = full_harness().await;
        let n = 10_000;
        let session = session(&harness, n).await;
        // Warm the allocator with a smaller batch first.
        for round in 0..2 {
            let calls = (0..n / 10)
                .map(|i| ToolCall::new(format!("w{round}_{i}"), "noop", json!({"sleep_ms": 10})))
                .collect();
            must(session.run_step(StepRequest::new(calls)).await, "warm-up");
        }
        let before = rss_bytes();
        let calls = (0..n)
            .map(|i| ToolCall::new(format!("c{i}"), "noop", json!({"sleep_ms": 60_000})))
            .collect();
        let s = session.clone();
        let step = tokio::spawn(async move { s.run_step(StepRequest::new(calls)).await });
        // Wait until every call is in its body.
        let mut peak = before;
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(25)).await;
            peak = peak.max(rss_bytes());
        }
        must(session.cancel(CancelTarget::Step), "cancel");
        let _ = step.await;
        emit(
            "pipeline/memory",
            "bytes_per_inflight_call",
            (peak - before) / n as f64,
            "bytes",
        );
        session.shutdown().await;
        harness.shutdown().await;
    });
}

/// The soak's harness: the file tools on `root` (with their sandbox), `run_code`, `noop`, and
/// one pass-through handler at every hook point plus a guard.
async fn soak_harness(root: &std::path::Path) -> (Harness, dsh_tool_fs::FsToolset) {
    let registry = Arc::new(ToolRegistry::new());
    must(registry.register(Noop), "register");
    must(
        registry.register(dsh_code_mode::RunCode::new(
            dsh_code_mode::CodeLimits::default(),
        )),
        "register run_code",
    );
    let toolset = must(
        dsh_tool_fs::FsToolset::builder(root).build().await,
        "file tools",
    );
    must(toolset.register(&registry), "register the file tools");
    let mut hooks = Hooks::new();
    hooks.pre_execute_arc(toolset.sandbox());
    (
        pass_through_harness(registry, hooks, GuardKind::NonBlocking).await,
        toolset,
    )
}

/// The calls of soak step `step` (1-based), about ten a step: reads, greps, listings and
/// globs of a small project; every other step an edit of the file the step before read (it
/// toggles one word, so the file stays the same size); now and then a `run_code` script
/// with a sub-call, a path outside the workspace, a sleep; and the bad input a model sends
/// (arguments that are not an object, an unknown tool).
fn soak_step(step: usize, on: bool) -> Vec<ToolCall> {
    let mut calls = vec![
        ToolCall::new("read", "read_file", json!({"path": "src/state.txt"})),
        ToolCall::new("grep", "grep", json!({"pattern": "fn \\w+"})),
        ToolCall::new("ls", "list_dir", json!({"path": "src"})),
        ToolCall::new("glob", "glob", json!({"pattern": "**/*.rs"})),
        ToolCall::new("noop", "noop", json!({})),
        ToolCall::new("bad", "noop", json!("not an object")),
        ToolCall::new("missing", "no_such_tool", json!({})),
    ];
    if step.is_multiple_of(2) {
        let (old, new) = if on { ("on", "off") } else { ("off", "on") };
        calls.push(ToolCall::new(
            "edit",
            "edit_file",
            json!({"path": "src/state.txt", "old_string": format!("state: {old}"),
                   "new_string": format!("state: {new}")}),
        ));
    }
    if step.is_multiple_of(7) {
        calls.push(ToolCall::new("sleep", "noop", json!({"sleep_ms": 1})));
    }
    if step.is_multiple_of(11) {
        calls.push(ToolCall::new(
            "outside",
            "read_file",
            json!({"path": "../../etc/passwd"}),
        ));
    }
    if step.is_multiple_of(50) {
        calls.push(ToolCall::new(
            "code",
            "run_code",
            json!({"code": "const r = await tools.list_dir({path: 'src'}); return r.total;"}),
        ));
    }
    calls
}

/// One session, 1,000,000 calls of mixed tools and outcomes: does memory or the actor count
/// creep? (`DSH_SOAK_CALLS` sets another count.)
fn soak() {
    let rt = runtime();
    rt.block_on(async {
        let start_actors = dsh_core::live::live_actors();
        let project = must(tempfile::tempdir(), "temp dir");
        let src = project.path().join("src");
        must(std::fs::create_dir_all(&src), "project");
        for k in 0..20 {
            let body: String = (0..40)
                .map(|l| format!("fn f{k}_{l}() -> u32 {{ {l} }}\n"))
                .collect();
            must(
                std::fs::write(src.join(format!("m{k}.rs")), body),
                "project",
            );
        }
        must(
            std::fs::write(src.join("state.txt"), "state: on\n"),
            "project",
        );
        let (harness, toolset) = soak_harness(project.path()).await;
        // A file log: an in-memory one would grow by design and hide a real leak.
        let dir = must(tempfile::tempdir(), "temp dir");
        let (log, _) = must(
            SessionLog::open_file(
                dir.path().join("soak.jsonl"),
                dsh_session::Durability::None,
                None,
            )
            .await,
            "log",
        );
        let session = must(
            harness.open(log, SchedulerConfig::default(), None).await,
            "session",
        );
        let total = std::env::var("DSH_SOAK_CALLS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000usize);
        let warm_up = total / 10;
        let mut after_warm_up = 0.0;
        let started = Instant::now();
        let (mut done, mut step, mut on, mut errors) = (0usize, 0usize, true, 0usize);
        let mut edits_failed = 0usize;
        while done < total {
            step += 1;
            let calls = soak_step(step, on);
            let n = calls.len();
            let out = must(session.run_step(StepRequest::new(calls)).await, "step");
            for r in &out.results {
                if r.error_info().is_some() {
                    errors += 1;
                    if r.call_id() == "edit" {
                        edits_failed += 1;
                    }
                }
                if r.call_id() == "edit" && r.error_info().is_none() {
                    on = !on;
                }
            }
            done += n;
            if after_warm_up == 0.0 && done >= warm_up {
                after_warm_up = rss_bytes();
            }
        }
        let end = rss_bytes();
        session.shutdown().await;
        harness.shutdown().await;
        toolset.shutdown().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        if edits_failed > 0 {
            eprintln!("soak: {edits_failed} edits failed (expected none)");
        }
        emit("soak", "calls", done as f64, "calls");
        emit("soak", "error_results", errors as f64, "results");
        emit(
            "soak",
            "calls_per_s",
            done as f64 / started.elapsed().as_secs_f64(),
            "calls/s",
        );
        emit(
            "soak",
            "rss_growth_mib",
            (end - after_warm_up) / (1024.0 * 1024.0),
            "MiB",
        );
        emit("soak", "live_actors_start", start_actors as f64, "actors");
        emit(
            "soak",
            "live_actors_end",
            dsh_core::live::live_actors() as f64,
            "actors",
        );
    });
}
