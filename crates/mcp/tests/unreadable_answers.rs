//! An answer dsh cannot read (a lone surrogate, a line over the limit) ends its call at
//! once with `TOOL_ERROR` saying why, instead of leaving it to wait out its timeout; the
//! server stays in use.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Rig, code, quick, servers};
use dsh_core::Hooks;
use dsh_mcp::McpOptions;
use serde_json::json;
use std::time::{Duration, Instant};

/// Calls would wait a minute for an answer that never comes.
fn options() -> McpOptions {
    McpOptions {
        default_timeout: Duration::from_secs(60),
        max_message_bytes: 64 * 1024,
        ..quick()
    }
}

async fn rig() -> Rig {
    Rig::start(
        servers(&[("raw", vec!["raw", "--long-bytes", "200000"])]),
        options(),
        Hooks::new(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_answers_fail_their_call_at_once() {
    let rig = rig().await;
    let cases = [
        ("surrogate", "not a JSON-RPC message"),
        ("surrogate_late", "not a JSON-RPC message"),
        ("long", "65536 byte limit"),
        ("long_late", "65536 byte limit"),
    ];
    for (tool, why) in cases {
        let started = Instant::now();
        let r = rig.one(&format!("mcp__raw__{tool}"), json!({})).await;
        let took = started.elapsed();
        assert_eq!(code(&r), "TOOL_ERROR", "{tool}: {}", r.text());
        assert!(
            r.text().contains("cannot read the answer") && r.text().contains(why),
            "{tool}: {}",
            r.text()
        );
        assert!(took < Duration::from_secs(20), "{tool} took {took:?}");
        // The connection is still good.
        let r = rig
            .one("mcp__raw__echo", json!({"text": "still here"}))
            .await;
        assert_eq!(r.text(), "still here", "after {tool}");
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_are_not_answers_do_not_fail_a_call() {
    // Servers that log on stdout: not every unreadable line is an answer.
    let rig = rig().await;
    let r = rig.one("mcp__raw__noisy", json!({})).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    assert_eq!(r.text(), "quiet now");
    rig.stop().await;
}
