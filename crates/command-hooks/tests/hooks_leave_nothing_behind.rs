//! A hook's answer is its exit status and what it printed before it exited: what it started
//! in the background neither delays nor cancels that answer, and nothing it started outlives
//! it (not when it exits, not when it times out, not when its call is cancelled or dropped).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Marker, Recorder, Rig, code, command, post, pre, request, survivors};
use dsh_core::{PreExecuteContext, PreExecuteHandler, PreToolDecision};
use dsh_scheduler::CancelTarget;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Well before the 60 s default timeout a hook used to be waited on.
const PROMPT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn exit_2_with_a_child_left_behind_denies_at_once_and_the_child_is_killed() {
    let rig = Rig::new();
    let m = Marker::new();
    // The issue's hook: prints its reason, starts a child that keeps stderr open, exits 2.
    let hook = command(&rig.script(
        "no.sh",
        &format!("cat > /dev/null\necho 'no writes today' >&2\n(sleep {m} &)\nexit 2"),
    ));
    let started = Instant::now();
    let r = rig.one(pre(vec![hook])).await;
    let took = started.elapsed();
    assert_eq!(code(&r), "DENIED", "{}", r.text());
    assert!(r.text().contains("no writes today"), "{}", r.text());
    assert!(rig.ran().is_empty(), "the tool did not run");
    assert!(
        took < PROMPT,
        "the exit status decided, not the child: {took:?}"
    );
    assert_eq!(
        survivors(m.as_str()),
        Vec::<String>::new(),
        "the child was killed"
    );
}

#[tokio::test]
async fn exit_2_after_the_tool_with_a_child_left_behind_blocks_at_once() {
    let rig = Rig::new();
    let m = Marker::new();
    let hook = command(&rig.script(
        "redact.sh",
        &format!("cat > /dev/null\necho 'contains a key' >&2\n(sleep {m} &)\nexit 2"),
    ));
    let started = Instant::now();
    let r = rig.one(post(vec![hook])).await;
    assert_eq!(code(&r), "BLOCKED", "{}", r.text());
    assert!(r.text().contains("contains a key"), "{}", r.text());
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert_eq!(survivors(m.as_str()), Vec::<String>::new());
}

#[tokio::test]
async fn a_json_deny_with_a_child_left_behind_is_read_at_once() {
    let rig = Rig::new();
    let m = Marker::new();
    let deny = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "alpha is retired"}}"#;
    let hook = command(&rig.script(
        "deny.sh",
        &format!("cat > /dev/null\necho '{deny}'\n(sleep {m} &)\nexit 0"),
    ));
    let started = Instant::now();
    let r = rig.one(pre(vec![hook])).await;
    assert_eq!(code(&r), "DENIED", "{}", r.text());
    assert!(r.text().contains("alpha is retired"), "{}", r.text());
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert!(rig.ran().is_empty());
    assert_eq!(survivors(m.as_str()), Vec::<String>::new());
}

#[tokio::test]
async fn a_hook_that_never_reads_a_large_input_and_leaves_a_child_holding_it_still_denies() {
    let rig = Rig::new();
    let m = Marker::new();
    // The child inherits stdin and never reads it: writing a large input would block forever.
    let hook = command(&rig.script(
        "early.sh",
        &format!("echo 'decided without reading' >&2\n(sleep {m} &)\nexit 2"),
    ));
    let hooks = rig.hooks(&pre(vec![hook]));
    let started = Instant::now();
    let r = rig
        .call_with(&hooks, json!({"text": "x".repeat(1024 * 1024)}))
        .await;
    assert_eq!(code(&r), "DENIED", "{}", r.text());
    assert!(r.text().contains("decided without reading"), "{}", r.text());
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert_eq!(survivors(m.as_str()), Vec::<String>::new());
}

#[tokio::test]
async fn a_child_with_its_own_output_is_killed_when_the_hook_exits() {
    let rig = Rig::new();
    let m = Marker::new();
    // Nothing holds the pipes, so the hook is over at once; its child must not live on.
    let hook = command(&rig.script(
        "spawner.sh",
        &format!("cat > /dev/null\nsleep {m} < /dev/null > /dev/null 2>&1 &\nexit 0"),
    ));
    let r = rig.one(pre(vec![hook])).await;
    assert_eq!(code(&r), "ok", "{}", r.text());
    assert_eq!(rig.ran().len(), 1);
    assert_eq!(
        survivors(m.as_str()),
        Vec::<String>::new(),
        "what the hook started did not outlive it"
    );
}

#[tokio::test]
async fn a_cancelled_call_leaves_no_hook_process_behind() {
    let rig = Rig::new();
    let m = Marker::new();
    let hook = command(&rig.script(
        "slow.sh",
        &format!("cat > /dev/null\n(sleep {m} &)\nsleep {m}\nexit 0"),
    ));
    let hooks = rig.hooks(&pre(vec![hook]));
    let (harness, session) = rig.open(&hooks).await;
    let step = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .run_step(request(vec![("c1", "alpha", json!({"text": "hi"}))]))
                .await
        }
    });
    assert!(
        tokio::task::spawn_blocking({
            let m = m.to_string();
            move || common::wait_for_process(&m)
        })
        .await
        .unwrap(),
        "the hook started"
    );
    session.cancel(CancelTarget::Step).unwrap();
    let outcome = tokio::time::timeout(PROMPT, step)
        .await
        .expect("the cancel answered at once")
        .unwrap()
        .unwrap();
    assert_eq!(code(&outcome.results[0]), "ABORTED_BEFORE_DISPATCH");
    assert!(rig.ran().is_empty());
    assert_eq!(survivors(m.as_str()), Vec::<String>::new());
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_dropped_pre_execute_leaves_no_hook_process_behind() {
    let rig = Rig::new();
    let m = Marker::new();
    let hook = command(&rig.script(
        "slow.sh",
        &format!("cat > /dev/null\n(sleep {m} &)\nsleep {m}\nexit 0"),
    ));
    let handler = rig.hooks(&pre(vec![hook])).pre_tool_use();
    let tool = Arc::new(Recorder {
        name: "alpha".into(),
        ran: rig.ran.clone(),
    });
    let task = tokio::spawn(async move {
        let arguments = json!({"text": "hi"});
        let ctx = PreExecuteContext {
            call_id: "c1",
            agent: "main",
            parent: None,
            arguments: &arguments,
            decision: &PreToolDecision::Allow,
            tool: tool.as_ref(),
        };
        handler.pre_execute(&ctx).await
    });
    let started = tokio::task::spawn_blocking({
        let m = m.to_string();
        move || common::wait_for_process(&m)
    })
    .await
    .unwrap();
    assert!(started, "the hook started");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(survivors(m.as_str()), Vec::<String>::new());
}

#[tokio::test]
async fn kill_all_stops_running_hooks_at_once_and_starts_no_more() {
    let rig = Rig::new();
    let m = Marker::new();
    let hook = command(&rig.script(
        "slow.sh",
        &format!("cat > /dev/null\necho run >> runs.txt\n(sleep {m} &)\nsleep {m}\nexit 0"),
    ));
    let hooks = rig.hooks(&pre(vec![hook]));
    let (harness, session) = rig.open(&hooks).await;
    let step = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .run_step(request(vec![("c1", "alpha", json!({"text": "hi"}))]))
                .await
        }
    });
    let started = tokio::task::spawn_blocking({
        let m = m.to_string();
        move || common::wait_for_process(&m)
    })
    .await
    .unwrap();
    assert!(started, "the hook started");

    // What a host does on SIGINT before it exits.
    assert_eq!(hooks.kill_all(), 1);
    let outcome = tokio::time::timeout(PROMPT, step)
        .await
        .expect("the call was answered at once")
        .unwrap()
        .unwrap();
    let r = &outcome.results[0];
    assert_eq!(
        code(r),
        "DENIED",
        "a hook that never answered: {}",
        r.text()
    );
    assert!(
        r.text().contains("PreToolUse hook #1") && r.text().contains("shut down"),
        "{}",
        r.text()
    );
    assert_eq!(survivors(m.as_str()), Vec::<String>::new());

    // From then on no hook starts, and what it guards does not run either.
    let outcome = session
        .run_step(request(vec![("c2", "alpha", json!({"text": "again"}))]))
        .await
        .unwrap();
    assert_eq!(code(&outcome.results[0]), "DENIED");
    assert_eq!(rig.read("runs.txt").lines().count(), 1, "the hook ran once");
    assert!(rig.ran().is_empty());
    assert_eq!(hooks.kill_all(), 0, "nothing left to kill");
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn output_a_child_writes_after_the_hook_exits_counts_only_within_the_grace() {
    let rig = Rig::new();
    // The hook exits at once; its child answers a second later, then ends.
    let hook = command(&rig.script(
        "late.sh",
        "cat > /dev/null\n(sleep 1; echo '{\"decision\": \"block\", \"reason\": \"late answer\"}') &\nexit 0",
    ));
    let settings = pre(vec![hook]);
    let generous = rig
        .hooks(&settings)
        .with_output_grace(Duration::from_secs(20));
    let r = rig.call_with(&generous, json!({"text": "hi"})).await;
    assert_eq!(code(&r), "DENIED", "{}", r.text());
    assert!(r.text().contains("late answer"), "{}", r.text());

    let none = rig.hooks(&settings).with_output_grace(Duration::ZERO);
    let r = rig.call_with(&none, json!({"text": "hi"})).await;
    assert_eq!(
        code(&r),
        "ok",
        "the child was killed before it spoke: {}",
        r.text()
    );
}
