//! The streaming helper fed into an open step: each call is pushed the moment its block is
//! complete, so it starts while the model still writes later ones; any split of the bytes gives
//! the same calls; a malformed block is that call's `TOOL_INPUT_ERROR`, and the others run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    EventBody, HookError, Hooks, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome,
    SessionEvent, event::ToolCallData,
};
use dsh::formats::{Format, StreamFeeder};
use dsh::scheduler::{SchedulerConfig, StepOutcome};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Reports each call the moment its pre-execute stage runs (before its body).
struct Started(mpsc::UnboundedSender<(String, Instant)>);

#[async_trait]
impl PreExecuteHandler for Started {
    fn name(&self) -> &str {
        "started"
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        let _ = self.0.send((call.call_id.to_string(), Instant::now()));
        Ok(PreExecuteOutcome::abstain())
    }
}

fn sse(value: Value) -> String {
    format!("data: {value}\n\n")
}

/// One OpenAI chunk per piece: `(index, id, name, arguments piece)`; id and name only on a
/// call's first piece, as OpenAI sends them.
fn openai_chunks(calls: &[(&str, &str, &[&str])]) -> Vec<String> {
    let mut out = vec![sse(
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}),
    )];
    for (index, (id, name, pieces)) in calls.iter().enumerate() {
        for (i, piece) in pieces.iter().enumerate() {
            let mut delta = json!({"index": index, "function": {"arguments": piece}});
            if i == 0 {
                delta["id"] = json!(id);
                delta["type"] = json!("function");
                delta["function"]["name"] = json!(name);
            }
            out.push(sse(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]}),
            ));
        }
    }
    out.push(sse(
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ));
    out.push("data: [DONE]\n\n".into());
    out
}

/// Anthropic events, one string per call block (start, deltas, stop), then the message's end.
fn anthropic_blocks(calls: &[(&str, &str, &[&str])]) -> Vec<String> {
    let event = |name: &str, v: Value| format!("event: {name}\ndata: {v}\n\n");
    let mut out = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {"role": "assistant", "content": []}}),
    )];
    for (index, (id, name, pieces)) in calls.iter().enumerate() {
        let mut block = event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        );
        for piece in *pieces {
            block += &event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
            );
        }
        block += &event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
        out.push(block);
    }
    out.push(event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
    ));
    out.push(event("message_stop", json!({"type": "message_stop"})));
    out
}

fn logged_calls(events: &[SessionEvent]) -> Vec<ToolCallData> {
    events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ToolCall(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

async fn wait_started(rx: &mut mpsc::UnboundedReceiver<(String, Instant)>) -> (String, Instant) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a call whose block is complete starts before the stream goes on")
        .expect("the hook is alive")
}

const CALLS: &[(&str, &str, &[&str])] = &[
    (
        "c1",
        "par",
        &["{\"sleep_ms\":", " 300, \"text\": \"first\"}"],
    ),
    ("c2", "par", &["{\"text\"", ": \"second\"}"]),
    ("c3", "par", &["{\"text\": \"third\"", "}"]),
];

/// Feeds `parts` one by one; after `parts[wait_after]` waits until the first call has started
/// (its pre-execute hook ran), so the rest of the stream has not been fed yet when it starts.
async fn first_starts_mid_stream(format: Format, parts: Vec<String>, wait_after: usize) {
    let probe = Arc::new(Probe::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut hooks = Hooks::new();
    hooks.pre_execute(Started(tx));
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let step = session.open_step().unwrap();
    let mut feeder = StreamFeeder::new(format, |call| step.push(call));
    let mut first_started = None;
    let mut last_fed = None;
    for (i, part) in parts.iter().enumerate() {
        feeder.push_bytes(part.as_bytes());
        if i == wait_after {
            let (id, at) = wait_started(&mut rx).await;
            assert_eq!(id, "c1");
            assert_eq!(feeder.pushed().len(), 1, "only the first block is complete");
            first_started = Some(at);
            // Its `tool/call` is in the log while the model is still writing.
            let logged = logged_calls(&log.snapshot().await.unwrap());
            assert_eq!(logged.len(), 1);
            assert_eq!(logged[0].call_id, "c1");
        }
        last_fed = Some(Instant::now());
    }
    let pending = feeder.finish();
    assert_eq!(pending.len(), 3);
    let results: Vec<_> = futures::future::join_all(
        pending
            .into_iter()
            .map(|p| async { p.unwrap().result().await.unwrap() }),
    )
    .await;
    assert_eq!(
        results.iter().map(|r| r.text()).collect::<Vec<_>>(),
        [
            format!("first\n{FINALIZED}"),
            format!("second\n{FINALIZED}"),
            format!("third\n{FINALIZED}"),
        ]
    );
    let StepOutcome { results, .. } = step.finish().await.unwrap();
    assert_eq!(results.len(), 3);
    assert!(
        first_started.unwrap() < last_fed.unwrap(),
        "the first call started only after the whole stream was fed"
    );
    // The first call (300 ms) was still running when the others ran beside it: their results
    // are recorded before its own.
    assert!(probe.max_active.load(Ordering::SeqCst) >= 2);
    let results: Vec<String> = log
        .snapshot()
        .await
        .unwrap()
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ToolResult { data, .. } => Some(data.call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        results.last().map(String::as_str),
        Some("c1"),
        "{results:?}"
    );
    harness.shutdown().await;
}

#[tokio::test]
async fn anthropic_a_call_starts_at_its_block_stop_before_the_stream_ends() {
    // parts: [message_start, block c1, block c2, block c3, message_delta, message_stop]
    first_starts_mid_stream(Format::Anthropic, anthropic_blocks(CALLS), 1).await;
}

#[tokio::test]
async fn openai_a_call_starts_when_the_next_index_starts_before_the_stream_ends() {
    // parts: [role, c1 piece 1, c1 piece 2, c2 piece 1 (completes c1), ...]
    first_starts_mid_stream(Format::OpenAi, openai_chunks(CALLS), 3).await;
}

/// What the model is shown of a step: each result's code and text.
fn shown(outcome: &StepOutcome) -> Vec<(&'static str, String)> {
    outcome
        .results
        .iter()
        .map(|r| (code(r), r.text()))
        .collect()
}

/// Runs one stream, fed in the given pieces, as a step; answers its outcome.
async fn run_fed(
    session: &dsh::scheduler::Session,
    format: Format,
    pieces: &[&[u8]],
) -> StepOutcome {
    let step = session.open_step().unwrap();
    let mut feeder = StreamFeeder::new(format, |call| step.push(call));
    for piece in pieces {
        feeder.push_bytes(piece);
    }
    assert_eq!(feeder.stream().malformed_events(), 0);
    for pushed in feeder.finish() {
        pushed.unwrap();
    }
    step.finish().await.unwrap()
}

#[tokio::test]
async fn deltas_split_at_every_byte_boundary_give_the_same_calls() {
    const EXACT: &[(&str, &str, &[&str])] = &[
        ("c1", "par", &["{\"text\": \"é\" ,", "\"sleep_ms\":0}"]),
        ("c2", "par", &["{\"text\":\"ok\"}"]),
    ];
    for (format, parts) in [
        (Format::OpenAi, openai_chunks(EXACT)),
        (Format::Anthropic, anthropic_blocks(EXACT)),
    ] {
        let probe = Arc::new(Probe::default());
        let (harness, session, log) = open(
            probe_registry(&probe),
            Hooks::new(),
            SchedulerConfig::default(),
        )
        .await;
        let bytes = parts.concat().into_bytes();
        let whole = run_fed(&session, format, &[&bytes]).await;
        for cut in 1..bytes.len() {
            let outcome = run_fed(&session, format, &[&bytes[..cut], &bytes[cut..]]).await;
            assert_eq!(shown(&outcome), shown(&whole), "{format}: split at {cut}");
        }
        // And one byte at a time.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        let outcome = run_fed(&session, format, &singles).await;
        assert_eq!(shown(&outcome), shown(&whole), "{format}: byte by byte");
        // Every step logged the same calls, arguments exactly as the model wrote them.
        let events = log.snapshot().await.unwrap();
        let mut steps: std::collections::BTreeMap<u64, Vec<SessionEvent>> = Default::default();
        for e in events {
            steps.entry(e.step).or_default().push(e);
        }
        assert_eq!(steps.len(), bytes.len() + 1, "{format}");
        let expected = logged_calls(&steps.values().next().unwrap()[..]);
        assert_eq!(expected.len(), 2, "{format}");
        assert_eq!(
            expected[0].arguments_text.as_deref(),
            Some("{\"text\": \"é\" ,\"sleep_ms\":0}"),
            "{format}"
        );
        assert_eq!(expected[0].arguments, json!({"text": "é", "sleep_ms": 0}));
        assert_eq!(expected[1].arguments_text, None, "{format}: already exact");
        for (step, events) in &steps {
            assert_eq!(logged_calls(events), expected, "{format}: step {step}");
        }
        harness.shutdown().await;
    }
}

#[tokio::test]
async fn a_malformed_block_is_a_tool_input_error_and_the_other_calls_run() {
    const BAD: &[(&str, &str, &[&str])] = &[
        ("c1", "par", &["{\"text\": \"one\"}"]),
        ("c2", "par", &["{\"text\": ", "\"two\"", ",,}"]),
        ("c3", "par", &["{\"text\": \"three\"}"]),
    ];
    for (format, parts) in [
        (Format::OpenAi, openai_chunks(BAD)),
        (Format::Anthropic, anthropic_blocks(BAD)),
    ] {
        let probe = Arc::new(Probe::default());
        let (harness, session, log) = open(
            probe_registry(&probe),
            Hooks::new(),
            SchedulerConfig::default(),
        )
        .await;
        let bytes = parts.concat().into_bytes();
        let outcome = run_fed(&session, format, &[&bytes]).await;
        let codes: Vec<_> = outcome.results.iter().map(code).collect();
        assert_eq!(codes, ["ok", "TOOL_INPUT_ERROR", "ok"], "{format}");
        assert_eq!(probe.started.load(Ordering::SeqCst), 2, "{format}");
        // The bad text is logged as sent.
        let logged = logged_calls(&log.snapshot().await.unwrap());
        assert_eq!(logged[1].arguments, json!("{\"text\": \"two\",,}"));
        harness.shutdown().await;
    }
}
