//! Code-mode benchmarks, through the full pipeline (scheduler, call actor, hooks, log).
//!
//! - `code/startup`: a step with one `run_code` whose script is `return 1` (the worker
//!   process forked ahead of time by the fork server, which is this program started again,
//!   see `main`; a fresh QuickJS runtime, prelude, script, result, the process reaped in the
//!   background), back to back, so the next worker's fork competes with the step.
//!   `p50_ms`, goal ≤ 1; also `p99_ms`.
//! - `code/subcall_overhead`: a script making 100 sequential no-op sub-calls; the cost of one
//!   sub-call (the run's time less an empty script's, over 100) against a direct pipeline
//!   call (a step with one no-op call). `ratio`, goal ≤ 2; also `subcall_us` and
//!   `direct_step_us`. Medians of alternating rounds.
// A bench whose setup fails should stop loudly.
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use async_trait::async_trait;
use dsh_code_mode::{CodeLimits, RunCode};
use dsh_core::{ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

pub const BENCHES: &[Bench] = &[
    Bench {
        name: "code/startup",
        in_all: true,
        run: startup,
    },
    Bench {
        name: "code/subcall_overhead",
        in_all: true,
        run: subcall_overhead,
    },
];

const SUBCALLS: usize = 100;

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
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!({}))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

async fn open() -> (Harness, Session) {
    let registry = Arc::new(ToolRegistry::new());
    registry
        .register(RunCode::new(CodeLimits {
            max_subcalls: SUBCALLS * 2,
            ..CodeLimits::default()
        }))
        .expect("register run_code");
    registry.register(Noop).expect("register noop");
    let harness = HarnessBuilder::new(registry)
        .build()
        .await
        .expect("a harness");
    let log = SessionLog::memory().await.expect("a log");
    let session = harness
        .open(log, SchedulerConfig::default(), None)
        .await
        .expect("a session");
    (harness, session)
}

/// Seconds one step with `call` takes; the call must succeed.
async fn step(session: &Session, call: ToolCall) -> f64 {
    let start = Instant::now();
    let out = session
        .run_step(StepRequest::new(vec![call]))
        .await
        .expect("a step");
    let took = start.elapsed().as_secs_f64();
    assert!(
        !out.results[0].is_error(),
        "the call failed: {}",
        out.results[0].text()
    );
    took
}

fn code_call(n: usize, code: &str) -> ToolCall {
    ToolCall::new(format!("code{n}"), "run_code", json!({ "code": code }))
}

fn startup() {
    runtime().block_on(async {
        let (harness, session) = open().await;
        for n in 0..30 {
            step(&session, code_call(n, "return 1")).await;
        }
        let mut samples = Vec::new();
        for n in 0..300 {
            samples.push(step(&session, code_call(1000 + n, "return 1")).await * 1e3);
        }
        emit("code/startup", "p50_ms", quantile(&mut samples, 0.5), "ms");
        emit("code/startup", "p99_ms", quantile(&mut samples, 0.99), "ms");
        session.shutdown().await;
        harness.shutdown().await;
    });
}

fn subcall_overhead() {
    let loop_code =
        format!("for (let i = 0; i < {SUBCALLS}; i++) {{ await tools.noop({{}}); }}\nreturn 1;");
    runtime().block_on(async {
        let (harness, session) = open().await;
        let mut n = 0;
        let mut next = || {
            n += 1;
            n
        };
        for _ in 0..10 {
            step(&session, code_call(next(), &loop_code)).await;
            step(&session, code_call(next(), "return 1")).await;
            step(
                &session,
                ToolCall::new(format!("d{}", next()), "noop", json!({})),
            )
            .await;
        }
        let (mut loops, mut empties, mut directs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..40 {
            loops.push(step(&session, code_call(next(), &loop_code)).await);
            empties.push(step(&session, code_call(next(), "return 1")).await);
            for _ in 0..10 {
                directs.push(
                    step(
                        &session,
                        ToolCall::new(format!("d{}", next()), "noop", json!({})),
                    )
                    .await,
                );
            }
        }
        let per_subcall =
            (quantile(&mut loops, 0.5) - quantile(&mut empties, 0.5)) / SUBCALLS as f64;
        let direct = quantile(&mut directs, 0.5);
        emit("code/subcall_overhead", "ratio", per_subcall / direct, "x");
        emit(
            "code/subcall_overhead",
            "subcall_us",
            per_subcall * 1e6,
            "us",
        );
        emit(
            "code/subcall_overhead",
            "direct_step_us",
            direct * 1e6,
            "us",
        );
        session.shutdown().await;
        harness.shutdown().await;
    });
}
