//! The streaming helper against running the calls after the stream ends.
//!
//! - `stream/first_start`: a model response streams 5 tool calls, one every 50 ms, each call's
//!   block written over its 50 ms (a start with half its arguments, the rest 25 ms later); the
//!   first is a 200 ms parallel-safe call, the other four 10 ms ones. Measured from the first
//!   byte to the moment the last result is ready (recorded): fed through `StreamFeeder` into an
//!   open step (each call starts when its block is complete) and, as the baseline, assembled
//!   with `ToolCallStream` and pushed once the stream has ended. `saved_ms` (OpenAI
//!   chat-completions chunks; goal ≥ 150) and `saved_ms_anthropic` are the difference, median
//!   of 7 runs each; `streamed_ms` and `after_stream_ms` are the OpenAI runs' medians.
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use async_trait::async_trait;
use dsh_core::{ExecutionMode, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh_formats::{Format, StreamFeeder, ToolCallStream};
use dsh_scheduler::{HarnessBuilder, OpenStep, SchedulerConfig, Session};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

pub const BENCHES: &[Bench] = &[Bench {
    name: "stream/first_start",
    in_all: true,
    run: first_start,
}];

const CALLS: usize = 5;
const APART_MS: u64 = 50;
const FIRST_MS: u64 = 200;
const OTHERS_MS: u64 = 10;
const RUNS: usize = 7;

/// Sleeps `ms`; parallel-safe.
struct Sleep;

#[async_trait]
impl ToolDefinition for Sleep {
    fn name(&self) -> &str {
        "sleep"
    }
    fn description(&self) -> &str {
        "sleeps ms milliseconds"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _: &Value) -> bool {
        true
    }
    async fn execute(&self, input: Value, _: ToolContext) -> Result<Value, ToolFailure> {
        tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
        Ok(json!("ok"))
    }
}

/// The response as (offset from its start, bytes) pieces, in `format`'s server-sent events.
fn response(format: Format) -> Vec<(Duration, String)> {
    let sse = |v: Value| format!("data: {v}\n\n");
    let mut pieces = Vec::new();
    for i in 0..CALLS {
        let ms = if i == 0 { FIRST_MS } else { OTHERS_MS };
        let at = Duration::from_millis(APART_MS * i as u64);
        let half = Duration::from_millis(APART_MS / 2);
        let id = format!("call_{i}");
        let (start, rest) = match format {
            Format::OpenAi => (
                sse(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "id": id, "type": "function", "function": {"name": "sleep", "arguments": "{\"ms\": "}}
                ]}}]})),
                sse(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": format!("{ms}}}")}}
                ]}}]})),
            ),
            Format::Anthropic => (
                sse(json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": id, "name": "sleep", "input": {}}}))
                    + &sse(json!({"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": "{\"ms\": "}})),
                sse(json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": format!("{ms}}}")}}))
                    + &sse(json!({"type": "content_block_stop", "index": i})),
            ),
        };
        pieces.push((at, start));
        pieces.push((at + half, rest));
    }
    let end = Duration::from_millis(APART_MS * CALLS as u64);
    pieces.push((
        end,
        match format {
            Format::OpenAi => {
                sse(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
                    + "data: [DONE]\n\n"
            }
            Format::Anthropic => sse(json!({"type": "message_stop"})),
        },
    ));
    pieces
}

/// Pushes `call` into `step` and answers a task that ends when its result is recorded, with
/// that moment.
fn push(step: &OpenStep, call: ToolCall) -> JoinHandle<Instant> {
    let pending = step.push(call).expect("push");
    tokio::spawn(async move {
        let result = pending.result().await.expect("a recorded result");
        assert!(!result.is_error(), "{}", result.text());
        Instant::now()
    })
}

/// From the first byte to the last result: fed mid-stream (`streamed`) or after the end.
async fn run_once(session: &Session, format: Format, streamed: bool) -> f64 {
    let pieces = response(format);
    let step = session.open_step().expect("open step");
    let t0 = tokio::time::Instant::now();
    let started = Instant::now();
    let tasks = if streamed {
        let mut feeder = StreamFeeder::new(format, |call| push(&step, call));
        for (at, bytes) in &pieces {
            tokio::time::sleep_until(t0 + *at).await;
            feeder.push_bytes(bytes.as_bytes());
        }
        feeder.finish()
    } else {
        let mut stream = ToolCallStream::new(format);
        let mut calls = Vec::new();
        for (at, bytes) in &pieces {
            tokio::time::sleep_until(t0 + *at).await;
            calls.extend(stream.push_bytes(bytes.as_bytes()));
        }
        calls.extend(stream.finish());
        calls.into_iter().map(|call| push(&step, call)).collect()
    };
    assert_eq!(tasks.len(), CALLS);
    let mut last = started;
    for task in tasks {
        last = last.max(task.await.expect("result task"));
    }
    step.finish().await.expect("step");
    last.duration_since(started).as_secs_f64() * 1e3
}

fn first_start() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let registry = Arc::new(ToolRegistry::new());
        registry.register(Sleep).expect("register");
        let harness = HarnessBuilder::new(registry)
            .build()
            .await
            .expect("harness");
        let session = harness
            .open(
                SessionLog::memory().await.expect("log"),
                SchedulerConfig::default(),
                None,
            )
            .await
            .expect("session");
        // One warm-up of each.
        run_once(&session, Format::OpenAi, true).await;
        run_once(&session, Format::OpenAi, false).await;
        for (format, metric) in [
            (Format::OpenAi, "saved_ms"),
            (Format::Anthropic, "saved_ms_anthropic"),
        ] {
            let (mut streamed, mut after, mut saved) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..RUNS {
                let s = run_once(&session, format, true).await;
                let a = run_once(&session, format, false).await;
                streamed.push(s);
                after.push(a);
                saved.push(a - s);
            }
            emit(
                "stream/first_start",
                metric,
                quantile(&mut saved, 0.5),
                "ms",
            );
            if format == Format::OpenAi {
                emit(
                    "stream/first_start",
                    "streamed_ms",
                    quantile(&mut streamed, 0.5),
                    "ms",
                );
                emit(
                    "stream/first_start",
                    "after_stream_ms",
                    quantile(&mut after, 0.5),
                    "ms",
                );
            }
        }
        session.shutdown().await;
        harness.shutdown().await;
    });
}
