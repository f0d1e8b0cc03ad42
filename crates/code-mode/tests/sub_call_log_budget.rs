//! What one call may add to the log is bounded, its sub-calls included: a small script
//! looping over sub-calls with big (even invalid) arguments, or making hundreds at once,
//! gets a clear refusal past the budget instead of writing hundreds of megabytes, and the
//! log keeps its invariants.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_code_mode::CodeLimits;
use dsh_core::{EventBody, Hooks};
use dsh_scheduler::SchedulerConfig;
use dsh_session::SessionLog;
use std::sync::Arc;
use std::time::Duration;

/// The default budget of one call's sub-call records.
const BUDGET: usize = 8 << 20;

/// Bytes the log holds, and of those, the `tool/code-dispatch` lines.
async fn log_bytes(log: &SessionLog) -> (usize, usize, Vec<dsh_core::SessionEvent>) {
    let events = log.snapshot().await.unwrap();
    dsh_session::check::check(&events).unwrap();
    let mut all = 0;
    let mut dispatches = 0;
    for e in &events {
        let n = e.to_json_line().len() + 1;
        all += n;
        if matches!(e.body, EventBody::CodeDispatch(_)) {
            dispatches += n;
        }
    }
    (all, dispatches, events)
}

fn limits() -> CodeLimits {
    CodeLimits {
        timeout: Duration::from_secs(60),
        memory_bytes: 64 << 20,
        ..CodeLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_of_sub_calls_with_big_invalid_arguments_is_refused_past_the_budget() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        registry(&probe, limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    // 3 MB of arguments a call, each refused by the tool's schema (`nope` is not allowed):
    // 12 of them would log 36 MB.
    let r = run_code(
        &session,
        "c1",
        r#"
        const big = "x".repeat(3000000);
        const seen = [];
        for (let i = 0; i < 12; i++) {
            try { await tools.nap({ text: big, nope: i }); }
            catch (e) { if (!seen.includes(e.code)) { seen.push(e.code); console.log(e.code + ": " + e.message); } }
        }
        return seen;
        "#,
    )
    .await;
    let (all, dispatches, _) = log_bytes(&log).await;
    assert!(
        dispatches <= BUDGET + (1 << 20),
        "the sub-calls added {dispatches} bytes, past the budget of {BUDGET}"
    );
    assert!(all < 2 * BUDGET, "the log is {all} bytes");
    let text = r.text();
    assert!(
        text.contains("log budget"),
        "the script and the model are told why: {text}"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_parallel_sub_calls_stay_within_the_budget() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        registry(&probe, limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    // 200 × 200 KB at once: 40 MB of arguments.
    let r = run_code(
        &session,
        "c1",
        r#"
        const big = "y".repeat(200000);
        const all = await Promise.allSettled(
            Array.from({ length: 200 }, (_, i) => tools.nap({ text: big + i })));
        return all.filter((s) => s.status === "fulfilled").length;
        "#,
    )
    .await;
    let (all, dispatches, events) = log_bytes(&log).await;
    assert!(
        dispatches <= BUDGET + (4 << 20),
        "the sub-calls added {dispatches} bytes, past the budget of {BUDGET}"
    );
    assert!(all < 3 * BUDGET, "the log is {all} bytes");
    assert!(r.text().contains("log budget"), "{}", r.text());
    // Every sub-call the result lists is on record, and the log's pairing holds (checked
    // above).
    let recorded = events
        .iter()
        .filter(|e| matches!(e.body, EventBody::CodeDispatch(_)))
        .count();
    assert_eq!(recorded, 200, "each sub-call has its one record");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_and_the_number_of_sub_calls_are_the_harnesss_to_set() {
    use dsh_scheduler::{HarnessBuilder, PipelineConfig, SubCallLimits};
    let probe = Arc::new(Probe::default());
    let config = PipelineConfig {
        subcalls: SubCallLimits {
            max_log_bytes: 64 << 10,
            max_subcalls: 20,
        },
        ..PipelineConfig::default()
    };
    let harness = HarnessBuilder::new(registry(&probe, limits()))
        .config(config)
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let r = run_code(
        &session,
        "c1",
        r#"
        const out = [];
        for (let i = 0; i < 30; i++) {
            try { await tools.nap({ text: "z".repeat(10000) }); out.push("ok"); }
            catch (e) { out.push(e.code + ": " + e.message); }
        }
        console.log(JSON.stringify(out));
        return out.length;
        "#,
    )
    .await;
    let text = r.text();
    let out: Vec<String> = serde_json::from_str(
        text.lines()
            .skip_while(|l| *l != "console:")
            .nth(1)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(out.len(), 30, "{text}");
    let ok = out.iter().take_while(|o| *o == "ok").count();
    assert!((1..20).contains(&ok), "some ran before the budget: {out:?}");
    assert!(
        out[ok..20]
            .iter()
            .all(|o| o.starts_with("DENIED: ") && o.contains("log budget of 65536 bytes")),
        "{out:?}"
    );
    assert!(
        out[20..]
            .iter()
            .all(|o| o.starts_with("DENIED: ") && o.contains("already made 20 sub-calls")),
        "{out:?}"
    );
    assert_eq!(code(&r), "DENIED", "a refusal binds: {text}");
    let (_, dispatches, events) = log_bytes(&log).await;
    assert!(dispatches <= (64 << 10) + 20 * 1024, "{dispatches} bytes");
    let records: Vec<&dsh_core::event::CodeDispatchData> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::CodeDispatch(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(
        records.len(),
        20,
        "refusals past the count are not recorded"
    );
    let refused = &records[ok];
    assert_eq!(refused.arguments["$dsh"], "omitted", "{refused:?}");
    assert_eq!(refused.error.as_ref().unwrap().code.as_str(), "DENIED");
    session.shutdown().await;
    harness.shutdown().await;
}
