//! Sub-calls awaited together run in parallel when their tools are concurrency-safe, within
//! the session's pool cap; exclusive ones run one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::Hooks;
use dsh_scheduler::SchedulerConfig;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sleeping_parallel_safe_sub_calls_awaited_with_promise_all_overlap() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(
        &session,
        "c1",
        r#"
        const t0 = Date.now();
        const [a, b] = await Promise.all([tools.nap({ ms: 400, text: "a" }), tools.nap({ ms: 400, text: "b" })]);
        return { took: Date.now() - t0, texts: [a.text, b.text] };
        "#,
    )
    .await;
    let v = returned(&r);
    assert_eq!(v["texts"], serde_json::json!(["a", "b"]));
    assert_eq!(
        probe.max_active.load(Ordering::SeqCst),
        2,
        "both slept at once"
    );
    let took = v["took"].as_u64().unwrap();
    assert!(
        (400..750).contains(&took),
        "two 400 ms naps overlapped: {took} ms"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_sub_calls_run_one_at_a_time_even_when_awaited_together() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(
        &session,
        "c1",
        r#"
        const t0 = Date.now();
        await Promise.all([tools.solo({ ms: 150 }), tools.nap({ ms: 150 }), tools.solo({ ms: 150 })]);
        return Date.now() - t0;
        "#,
    )
    .await;
    let took = returned(&r).as_u64().unwrap();
    assert_eq!(
        probe.max_active.load(Ordering::SeqCst),
        1,
        "nothing ran beside an exclusive call"
    );
    assert!(took >= 450, "three 150 ms calls in a row: {took} ms");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_sub_calls_stay_within_the_sessions_pool_cap() {
    let probe = Arc::new(Probe::default());
    let config = SchedulerConfig {
        max_parallel_tool_calls: 2,
        ..SchedulerConfig::default()
    };
    let (harness, session, _log) =
        open(registry(&probe, test_limits()), Hooks::new(), config).await;
    let r = run_code(
        &session,
        "c1",
        r#"
        const all = await Promise.all([1, 2, 3, 4, 5].map((i) => tools.nap({ ms: 60, text: String(i) })));
        return all.map((r) => r.text).join("");
        "#,
    )
    .await;
    assert_eq!(returned(&r), serde_json::json!("12345"));
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 2);
    session.shutdown().await;
    harness.shutdown().await;
}
