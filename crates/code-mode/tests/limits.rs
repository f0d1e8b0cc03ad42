//! Each hard limit ends a script with its own clear error and leaves the process healthy:
//! the engine's thread ends and the next run_code works.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_code_mode::CodeLimits;
use dsh_core::{FrozenResult, Hooks};
use dsh_scheduler::SchedulerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs `script` under `limits`, checks the next script still works, and answers the first
/// result.
async fn run_limited(limits: CodeLimits, script: &str) -> FrozenResult {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, limits),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(&session, "c1", script).await;
    engines_gone().await;
    let next = run_code(&session, "c2", "return 'still here';").await;
    assert_eq!(
        returned(&next),
        json!("still here"),
        "the next run_code works"
    );
    session.shutdown().await;
    harness.shutdown().await;
    r
}

fn assert_says(r: &FrozenResult, code_str: &str, words: &str) {
    assert_eq!(code(r), code_str, "{}", r.text());
    assert!(
        r.text().contains(words),
        "expected {words:?} in: {}",
        r.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_ends_at_the_time_limit() {
    let _serial = serial().await;
    let limits = CodeLimits {
        timeout: Duration::from_millis(300),
        ..test_limits()
    };
    let start = Instant::now();
    let r = run_limited(limits, "let i = 0; while (true) { i++; }").await;
    assert_says(
        &r,
        "TOOL_TIMEOUT",
        "did not finish within its time limit of 300 ms",
    );
    assert!(start.elapsed() < Duration::from_secs(3));

    // Catastrophic backtracking runs inside the regex engine, which polls the same handler.
    let limits = CodeLimits {
        timeout: Duration::from_millis(300),
        ..test_limits()
    };
    let start = Instant::now();
    let r = run_limited(limits, "return /^(a+)+$/.test('a'.repeat(40) + 'b');").await;
    assert_says(&r, "TOOL_TIMEOUT", "time limit of 300 ms");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_limit_also_ends_a_script_waiting_on_a_slow_sub_call() {
    let _serial = serial().await;
    let limits = CodeLimits {
        timeout: Duration::from_millis(300),
        ..test_limits()
    };
    let r = run_limited(limits, "await tools.nap({ ms: 60000 }); return 1;").await;
    assert_says(&r, "TOOL_TIMEOUT", "time limit of 300 ms");
    assert!(r.text().contains("- c1.sub1 nap: ABORTED"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_ends_with_out_of_memory() {
    let _serial = serial().await;
    let r = run_limited(
        test_limits(),
        "const keep = []; while (true) keep.push('x'.repeat(1 << 20) + keep.length);",
    )
    .await;
    assert_says(
        &r,
        "TOOL_ERROR",
        "ran out of memory (it may use at most 16 MiB)",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_ends_at_the_stack_limit() {
    let _serial = serial().await;
    let r = run_limited(
        test_limits(),
        "function down(n) { return down(n + 1) + 1; }\nreturn down(0);",
    )
    .await;
    assert_says(&r, "TOOL_ERROR", "exceeded its stack limit of 1 MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_sub_calls_end_the_script_even_when_it_catches() {
    let _serial = serial().await;
    let limits = CodeLimits {
        max_subcalls: 3,
        ..test_limits()
    };
    let r = run_limited(
        limits,
        "for (let i = 0; i < 10; i++) { try { await tools.nap({}); } catch (e) {} }\nreturn 'done';",
    )
    .await;
    assert_says(&r, "TOOL_ERROR", "tried to make more than 3 sub-calls");
    assert!(r.text().contains("sub-calls (3):"), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_return_value_over_the_size_limit_is_refused() {
    let _serial = serial().await;
    let limits = CodeLimits {
        max_result_bytes: 1000,
        ..test_limits()
    };
    let r = run_limited(limits, "return 'x'.repeat(5000);").await;
    assert_says(
        &r,
        "TOOL_ERROR",
        "returned 5002 bytes of JSON, over the limit of 1000 bytes",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_output_is_capped_and_the_cut_is_told() {
    let _serial = serial().await;
    let limits = CodeLimits {
        max_console_bytes: 100,
        ..test_limits()
    };
    let r = run_limited(
        limits,
        "for (let i = 0; i < 50; i++) console.log('line ' + String(i).padStart(13, '0'));\nreturn 1;",
    )
    .await;
    let v = r.value().unwrap();
    assert!(v["console"].as_str().unwrap().len() <= 100);
    assert_eq!(v["consoleDroppedBytes"], json!(18 + 49 * 19 - 100));
    assert!(
        r.text()
            .contains("[console output cut here: 849 more bytes were dropped]"),
        "{}",
        r.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_can_never_finish_and_a_value_that_is_not_json_are_told_apart() {
    let _serial = serial().await;
    let r = run_limited(test_limits(), "await new Promise(() => {});").await;
    assert_says(
        &r,
        "TOOL_ERROR",
        "awaited a promise that nothing will ever settle",
    );
    let r = run_limited(test_limits(), "return 10n;").await;
    assert_says(&r, "TOOL_ERROR", "cannot be turned into JSON");
    let r = run_limited(test_limits(), "const a = {}; a.a = a; return a;").await;
    assert_says(&r, "TOOL_ERROR", "cannot be turned into JSON");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pipelines_timeout_wrapper_the_scripts_own_clear_error_still_comes_first() {
    let _serial = serial().await;
    let probe = Arc::new(Probe::default());
    let limits = CodeLimits {
        timeout: Duration::from_millis(300),
        ..test_limits()
    };
    let mut hooks = Hooks::new();
    hooks.around(dsh_core::around::TimeoutLayer::default().with_default_ms(60_000));
    let (harness, session, _log) =
        open(registry(&probe, limits), hooks, SchedulerConfig::default()).await;
    let r = run_code(&session, "c1", "while (true) {}").await;
    assert_says(
        &r,
        "TOOL_TIMEOUT",
        "did not finish within its time limit of 300 ms",
    );
    engines_gone().await;
    session.shutdown().await;
    harness.shutdown().await;
}
