//! The engine's own limits are told by what really happened, not by what a script threw: a
//! forged limit error is the script's exception, and running out of memory says so even
//! when QuickJS had no memory left to describe it (it then throws `null`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::Hooks;
use dsh_scheduler::SchedulerConfig;
use std::sync::Arc;

async fn outcomes(scripts: &[&str]) -> Vec<(String, String)> {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let mut out = Vec::new();
    for (n, script) in scripts.iter().enumerate() {
        let r = run_code(&session, &format!("c{n}"), script).await;
        out.push((code(&r).to_string(), r.text()));
    }
    session.shutdown().await;
    harness.shutdown().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thrown_object_that_looks_like_a_limit_error_is_the_scripts_exception() {
    let forged = [
        "throw { name: 'RangeError', message: 'Maximum call stack size exceeded' };",
        "throw { name: 'InternalError', message: 'out of memory' };",
        "throw { name: 'InternalError', message: 'stack overflow' };",
        "const e = new Error('Maximum call stack size exceeded'); e.name = 'RangeError'; throw e;",
    ];
    for (script, (code, text)) in forged.iter().zip(outcomes(&forged).await) {
        assert_eq!(code, "TOOL_ERROR", "{script}: {text}");
        assert!(
            text.contains("threw an uncaught exception"),
            "{script}: reported as an engine limit: {text}"
        );
        assert!(
            !text.contains("stack limit") && !text.contains("ran out of memory"),
            "{script}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_memory_says_so_even_when_the_engine_throws_null() {
    let _serial = serial().await;
    let bombs = [
        "const keep = []; while (true) keep.push({ a: keep.length });",
        "const keep = []; while (true) keep.push([keep.length, 'x' + keep.length]);",
        "const m = new Map(); for (let i = 0; ; i++) m.set(i, { i });",
        "const o = {}; for (let i = 0; ; i++) o['k' + i] = i;",
    ];
    for (script, (code, text)) in bombs.iter().zip(outcomes(&bombs).await) {
        assert_eq!(code, "TOOL_ERROR", "{script}: {text}");
        assert!(
            text.contains("ran out of memory (it may use at most 16 MiB)"),
            "{script}: {text}"
        );
    }
    // A script that throws null itself is still told as such.
    let own = ["throw null;", "await Promise.reject(null);"];
    for (script, (code, text)) in own.iter().zip(outcomes(&own).await) {
        assert_eq!(code, "TOOL_ERROR", "{script}: {text}");
        assert!(
            text.contains("threw an uncaught exception: null"),
            "{script}: {text}"
        );
    }
    // The real limits are still told.
    let real = [
        "function down(n) { return down(n + 1) + 1; }\nreturn down(0);",
        "const keep = []; while (true) keep.push('x'.repeat(1 << 20) + keep.length);",
    ];
    let got = outcomes(&real).await;
    assert!(
        got[0].1.contains("exceeded its stack limit"),
        "{}",
        got[0].1
    );
    assert!(got[1].1.contains("ran out of memory"), "{}", got[1].1);
}
