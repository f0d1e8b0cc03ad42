//! Test 1 and 2: after a timeout, after a cancel, and after the command exits, no descendant
//! survives (background jobs, `setsid`, double forks, `nohup`, found by scanning /proc for a
//! marker); and a grandchild holding stdout open does not hold the call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::signal::{CancelHandle, CancelReason};
use dsh_core::{ErrorCode, ToolContext, ToolDefinition};
use dsh_tool_shell::SandboxConfig;
use serde_json::json;
use std::time::{Duration, Instant};

/// Starts every kind of escapee, each a `sleep` whose command line is the marker, then waits.
fn escapees(m: &str) -> String {
    format!(
        "(exec -a {m}1 sleep 1000) & \
         setsid bash -c 'exec -a {m}2 sleep 1000' & \
         ( ( (exec -a {m}3 sleep 1000) & ) & ) ; \
         nohup bash -c 'exec -a {m}4 sleep 1000' >/dev/null 2>&1 & \
         setsid bash -c 'trap \"\" TERM; exec -a {m}5 sleep 1000' & \
         sleep 0.5; echo started; sleep 1000"
    )
}

/// Waits for the five escapees to be running.
async fn all_started(m: &str) {
    let start = Instant::now();
    while processes_with(m).len() < 5 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "escapees did not start: {:?}",
            processes_with(m)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn modes() -> Vec<(&'static str, SandboxConfig)> {
    vec![
        ("sandboxed", SandboxConfig::workspace_write()),
        // No namespaces: the child-subreaper fallback.
        ("full", SandboxConfig::full()),
    ]
}

#[tokio::test]
async fn after_a_timeout_no_descendant_survives() {
    for (name, sandbox) in modes() {
        let env = Env::new(sandbox);
        let m = marker(&format!("timeout{name}"));
        let failure = env
            .run_with(json!({"command": escapees(&m), "timeout_ms": 3000}))
            .await
            .unwrap_err();
        assert_eq!(failure.code, ErrorCode::ToolTimeout, "{name}");
        let text = failure.content.unwrap()[0].as_text().unwrap().to_string();
        assert!(
            text.contains("started"),
            "{name}: all escapees were running: {text}"
        );
        let left = processes_with(&m);
        assert!(left.is_empty(), "{name}: survivors {left:?}");
    }
}

#[tokio::test]
async fn after_a_cancel_no_descendant_survives() {
    for (name, sandbox) in modes() {
        let env = Env::new(sandbox);
        let m = marker(&format!("cancel{name}"));
        let (handle, signal) = CancelHandle::new();
        let ctx = ToolContext {
            signal,
            ..ToolContext::detached("cancelled")
        };
        let input = json!({"command": escapees(&m)});
        let tool = &env.tool;
        let body = tool.execute(input, ctx);
        tokio::pin!(body);
        // Let everything start.
        tokio::select! {
            _ = &mut body => panic!("{name}: the command ended by itself"),
            _ = all_started(&m) => {}
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        handle.cancel(CancelReason::Caller("test".into()));
        let failure = tokio::time::timeout(Duration::from_secs(15), body)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{name}: the cancelled call did not return; left: {:?}",
                    processes_with(&m)
                )
            })
            .unwrap_err();
        assert_eq!(failure.code, ErrorCode::Aborted, "{name}");
        let text = failure.content.unwrap()[1].as_text().unwrap().to_string();
        assert!(
            text.contains("started"),
            "{name}: the output so far: {text}"
        );
        let left = processes_with(&m);
        assert!(left.is_empty(), "{name}: survivors {left:?}");
    }
}

#[tokio::test]
async fn a_cancelled_call_whose_body_is_dropped_still_ends_its_tree() {
    let env = Env::new(SandboxConfig::workspace_write());
    let m = marker("dropped");
    let command = escapees(&m);
    let body = env.run(&command);
    // The pipeline abandons a cancelled body: its future is dropped mid-run.
    tokio::select! {
        _ = body => panic!("the command ended by itself"),
        _ = all_started(&m) => {}
    }
    let left = gone_within(&m, Duration::from_secs(10)).await;
    assert!(left.is_empty(), "survivors {left:?}");
}

#[tokio::test]
async fn what_the_command_leaves_running_is_killed_when_it_exits() {
    for (name, sandbox) in modes() {
        let env = Env::new(sandbox);
        let m = marker(&format!("exit{name}"));
        let command = format!(
            "(exec -a {m}a sleep 1000) & setsid bash -c 'exec -a {m}b sleep 1000' & \
             ( ( (exec -a {m}c sleep 1000) & ) & ); \
             setsid bash -c 'trap \"\" TERM; exec -a {m}d sleep 1000' & \
             while [ $(ps -e -o args | grep -c '^{m}') -lt 4 ]; do sleep 0.05; done; echo done"
        );
        let start = Instant::now();
        let v = env.ok(&command).await;
        assert_eq!(code(&v), 0, "{name}");
        assert!(start.elapsed() < Duration::from_secs(15), "{name}");
        let left = processes_with(&m);
        assert!(left.is_empty(), "{name}: survivors {left:?}");
        assert_eq!(v["meta"]["killedLeftovers"], true, "{name}: {v}");
    }
}

#[tokio::test]
async fn a_grandchild_holding_stdout_does_not_hold_the_call() {
    let env = Env::new(SandboxConfig::workspace_write());
    let m = marker("holder");
    // Each holds stdout open; one ignores SIGTERM; one is a fifo writer.
    let command = format!(
        "(trap '' TERM; exec -a {m}1 sleep 1000) & \
         nohup bash -c 'exec -a {m}2 sleep 1000' & \
         mkfifo $TMPDIR/f; (cat $TMPDIR/f; exec -a {m}3 sleep 1000) & \
         sleep 0.3; echo parent done"
    );
    let start = Instant::now();
    let v = env.ok(&command).await;
    // The bound is 2 s after exit; a loaded CI machine gets slack.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    assert!(stdout(&v).contains("parent done"));
    assert!(processes_with(&m).is_empty());
    let failure = env
        .run_with(json!({"command": format!("(trap '' TERM; exec -a {m}4 sleep 1000) & sleep 1000"), "timeout_ms": 1000}))
        .await
        .unwrap_err();
    assert_eq!(failure.code, ErrorCode::ToolTimeout);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "a timeout plus its grace, not the grandchild's lifetime"
    );
    assert!(processes_with(&m).is_empty());
}
