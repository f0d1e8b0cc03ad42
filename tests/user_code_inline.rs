//! dsh's own defaults of a tool's synchronous methods (`present`, `result_meta`,
//! `finalize_content`) never block, so once the pipeline has seen that a tool keeps them it
//! calls them inline instead of on the user-code pool: such a tool's calls still answer when
//! every user-code thread is stuck. A tool whose own `present` may block (also one that
//! delegates to another tool's default) stays on the pool and still ends at the deadline; and
//! observers that say they never block run inline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::user_code::{Blocking, BlocksIn, Plain, user_code_harness};
use common::*;
use dsh::core::{
    ContentBlock, FrozenResult, Hooks, ResultObserver, ToolContext, ToolDefinition, ToolFailure,
    ToolRegistry,
};
use dsh::scheduler::{Session, StepRequest};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Presents through `Plain`'s default, but blocks first once `block` is set: its own code,
/// which must never be taken for dsh's default.
struct Delegating {
    inner: Plain,
    block: Arc<AtomicBool>,
}

#[async_trait]
impl ToolDefinition for Delegating {
    fn name(&self) -> &str {
        "delegating"
    }
    fn description(&self) -> &str {
        "presents through another tool's default"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(json!("delegated value"))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        if self.block.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_secs(20));
        }
        self.inner.present(value)
    }
}

async fn one(session: &Session, id: &str, tool: &str) -> FrozenResult {
    let out = session
        .run_step(StepRequest::new(vec![call(id, tool, json!({}))]))
        .await
        .unwrap();
    out.results[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_dsh_defaults_answers_while_every_user_code_thread_is_stuck() {
    quiet_intentional_panics();
    let block = Arc::new(AtomicBool::new(false));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Plain).unwrap();
    registry
        .register(Blocking::once_set("stuck", BlocksIn::Finalize, &block))
        .unwrap();
    let (harness, session) = user_code_harness(registry, Hooks::new(), Some(1)).await;
    // The first call of each tool: the pipeline sees which methods are dsh's defaults.
    assert_eq!(code(&one(&session, "p1", "plain").await), "ok");
    assert_eq!(code(&one(&session, "s1", "stuck").await), "ok");
    // Now the user-code pool's one thread gets stuck in `stuck`'s own finalize_content.
    block.store(true, Ordering::SeqCst);
    let stuck = one(&session, "s2", "stuck").await;
    assert_eq!(code(&stuck), "PIPELINE_ERROR", "{}", stuck.text());
    let refused = one(&session, "s3", "stuck").await;
    assert_eq!(code(&refused), "PIPELINE_ERROR", "{}", refused.text());
    assert!(refused.text().contains("stuck"), "{}", refused.text());
    // dsh's defaults need no thread of the pool: the plain tool still answers, fully.
    let started = Instant::now();
    let plain = one(&session, "p2", "plain").await;
    assert_eq!(code(&plain), "ok", "{}", plain.text());
    assert_eq!(plain.text(), "plain value");
    assert!(started.elapsed() < Duration::from_secs(5));
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_present_that_delegates_to_a_default_still_ends_at_the_deadline() {
    quiet_intentional_panics();
    let block = Arc::new(AtomicBool::new(false));
    let registry = Arc::new(ToolRegistry::new());
    registry
        .register(Delegating {
            inner: Plain,
            block: block.clone(),
        })
        .unwrap();
    let (harness, session) = user_code_harness(registry, Hooks::new(), None).await;
    for i in 0..3 {
        let r = one(&session, &format!("d{i}"), "delegating").await;
        assert_eq!(code(&r), "ok", "{}", r.text());
        assert_eq!(r.text(), "delegated value");
    }
    block.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let late = one(&session, "late", "delegating").await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "waited {took:?} on a 20 s present"
    );
    assert_eq!(code(&late), "PIPELINE_ERROR", "{}", late.text());
    assert!(late.text().contains("present"), "{}", late.text());
    session.shutdown().await;
    harness.shutdown().await;
}

/// Counts the results of `plain` it sees; says whether it may block.
struct CountPlain {
    seen: Arc<AtomicUsize>,
    may_block: bool,
}

impl ResultObserver for CountPlain {
    fn name(&self) -> &str {
        "count-plain"
    }
    fn observe(&self, result: &FrozenResult) {
        if result.call_id().starts_with('p') {
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn may_block(&self) -> bool {
        self.may_block
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_that_say_they_never_block_run_inline_and_the_others_on_the_pool() {
    quiet_intentional_panics();
    for may_block in [false, true] {
        let block = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicUsize::new(0));
        let registry = Arc::new(ToolRegistry::new());
        registry.register(Plain).unwrap();
        registry
            .register(Blocking::once_set("stuck", BlocksIn::Finalize, &block))
            .unwrap();
        let mut hooks = Hooks::new();
        hooks.observe(CountPlain {
            seen: seen.clone(),
            may_block,
        });
        let (harness, session) = user_code_harness(registry, hooks, Some(1)).await;
        assert_eq!(code(&one(&session, "p1", "plain").await), "ok");
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        block.store(true, Ordering::SeqCst);
        let stuck = one(&session, "s1", "stuck").await;
        assert_eq!(code(&stuck), "PIPELINE_ERROR", "{}", stuck.text());
        // The pool's one thread is stuck: an observer that may block is not run (given up on,
        // the result recorded as it is); one that never blocks needs no thread.
        assert_eq!(code(&one(&session, "p2", "plain").await), "ok");
        let expected = if may_block { 1 } else { 2 };
        assert_eq!(
            seen.load(Ordering::SeqCst),
            expected,
            "may_block: {may_block}"
        );
        session.shutdown().await;
        harness.shutdown().await;
    }
}
