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

fn runtime() -> tokio::runtime::Runtime {
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

/// A harness with one handler at every hook point and one guard.
async fn full_harness() -> Harness {
    let registry = Arc::new(ToolRegistry::new());
    must(registry.register(Noop), "register");
    let mut hooks = Hooks::new();
    hooks.pre_execute(PassPre);
    hooks.around(PassAround);
    hooks.post_execute(PassPost);
    hooks.observe(Count(Arc::new(AtomicUsize::new(0))));
    let harness = must(
        HarnessBuilder::new(registry).hooks(hooks).build().await,
        "harness",
    );
    let owner = must(
        harness
            .pipeline()
            .guards()
            .register(FnGuard::new("pass", |_c: &GuardCall| GuardVerdict::Abstain))
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

fn overhead() {
    let rt = runtime();
    rt.block_on(async {
        let harness = full_harness().await;
        let session = session(&harness, 10).await;
        for i in 0..2_000 {
            must(session.run_step(noop_step(&format!("w{i}"))).await, "step");
        }
        let mut samples = Vec::with_capacity(20_000);
        for i in 0..20_000 {
            let t = Instant::now();
            must(session.run_step(noop_step(&format!("c{i}"))).await, "step");
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
        // The floor: the same body, run by a bare tokio::spawn.
        let mut floor = Vec::with_capacity(20_000);
        for _ in 0..20_000 {
            let t = Instant::now();
            let body =
                tokio::spawn(async { Noop.execute(json!({}), ToolContext::detached("f")).await });
            let _ = body.await;
            floor.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let p50 = quantile(&mut samples, 0.5);
        let p99 = quantile(&mut samples, 0.99);
        let floor_p50 = quantile(&mut floor, 0.5);
        emit("pipeline/overhead", "p50_us", p50, "us");
        emit("pipeline/overhead", "p99_us", p99, "us");
        emit("pipeline/overhead", "floor_p50_us", floor_p50, "us");
        emit(
            "pipeline/overhead",
            "ratio_to_floor",
            p50 / floor_p50,
            "ratio",
        );
        session.shutdown().await;
        harness.shutdown().await;
    });
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

/// One session, 1,000,000 calls of mixed outcomes: does memory or the actor count creep?
fn soak() {
    let rt = runtime();
    rt.block_on(async {
        let start_actors = dsh_core::live::live_actors();
        let harness = full_harness().await;
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
        let per_step = 10;
        let warm_up = total / 10;
        let mut after_warm_up = 0.0;
        let started = Instant::now();
        let mut done = 0usize;
        let mut step = 0usize;
        while done < total {
            step += 1;
            let calls = (0..per_step)
                .map(|i| {
                    let args = match (step + i) % 7 {
                        0 => json!({"sleep_ms": 1}),
                        1 => json!("not an object"),
                        _ => json!({}),
                    };
                    let name = if (step + i).is_multiple_of(13) {
                        "missing"
                    } else {
                        "noop"
                    };
                    ToolCall::new(format!("c{i}"), name, args)
                })
                .collect();
            must(session.run_step(StepRequest::new(calls)).await, "step");
            done += per_step;
            if after_warm_up == 0.0 && done >= warm_up {
                after_warm_up = rss_bytes();
            }
        }
        let end = rss_bytes();
        session.shutdown().await;
        harness.shutdown().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        emit("soak", "calls", done as f64, "calls");
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
        emit(
            "soak",
            "live_actors_end",
            (dsh_core::live::live_actors() - start_actors) as f64,
            "actors",
        );
    });
}
