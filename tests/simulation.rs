//! The actor simulation: seeded random sessions on a paused-time runtime.
//!
//! Each seed builds a harness with random hooks (deny, ask, panic, rewrite, block, context),
//! a random approver and guards, and runs random steps of random calls (latency, success,
//! error, panic, ignoring cancellation, timeouts, schema violations, unknown tools, malformed
//! arguments) while cancelling calls, steps and the session at random moments. One seed in
//! forty also misbehaves in the user code the pipeline calls synchronously: `present`,
//! `finalize_content`, `tools/result` observers and guards that are slow (within their
//! deadline), stuck (past it, in real time) or panic. After each seed the log and the results
//! must hold every invariant; a failing seed prints itself. Half the steps are open steps whose
//! calls arrive at random moments (some cancelled on their own, some steps' handles dropped
//! unfinished).
//!
//! `DSH_SIM_SEEDS=N` runs N seeds (default 10,000); `DSH_SIM_SEED=S` runs only seed S.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::around::RetryLayer;
use dsh::core::{
    ApprovalAnswer, ApprovalRequest, ApprovalResponder, Arguments, EventBody, FrozenResult,
    HookError, Hooks, PostExecuteContext, PostExecuteHandler, PostExecuteOutcome,
    PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, ResultObserver, RetryPolicy,
    SessionEvent, ToolCall, ToolRegistry,
};
use dsh::guards::{FnGuard, GuardCall, GuardSet, GuardVerdict};
use dsh::scheduler::{
    CancelTarget, HarnessBuilder, PipelineConfig, SchedulerConfig, Session, SiblingPolicy,
    StepOutcome, StepRequest,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long stuck user code blocks its thread (real time), past every deadline of the sim.
const STUCK: Duration = Duration::from_millis(300);
/// The deadline of user code and guards in a misbehaving seed (real time): short, to keep
/// the run quick, yet long enough that healthy code on a loaded machine stays within it.
const DEADLINE: Duration = Duration::from_millis(120);

/// What the sim's odd user code does, chosen by the text a call's result shows.
fn odd(text: &str, what: &str) -> bool {
    text.contains(what)
}

/// Blocks or panics as `text` says for `part` (`finalize`, `present`, `observer`, `guard`).
fn misbehave(text: &str, part: &str) {
    if odd(text, &format!("{part}:slow")) {
        std::thread::sleep(Duration::from_millis(2));
    }
    if odd(text, &format!("{part}:stuck")) {
        std::thread::sleep(STUCK);
    }
    if odd(text, &format!("{part}:panic")) {
        panic!("sim {part} exploded");
    }
}

/// A parallel probe whose `present` and `finalize_content` misbehave as its text says.
struct Odd {
    inner: ProbeTool,
    /// `finalize_content` calls that went wrong (stuck or panicked).
    finalize_misbehaved: Arc<AtomicUsize>,
}

#[async_trait]
impl dsh::core::ToolDefinition for Odd {
    fn name(&self) -> &str {
        "odd"
    }
    fn description(&self) -> &str {
        "a probe whose synchronous parts misbehave"
    }
    fn input_schema(&self) -> Value {
        self.inner.input_schema()
    }
    fn output_schema(&self) -> Option<Value> {
        self.inner.output_schema()
    }
    fn execution_mode(&self) -> dsh::core::ExecutionMode {
        self.inner.execution_mode()
    }
    fn is_concurrency_safe(&self, input: &Value) -> bool {
        self.inner.is_concurrency_safe(input)
    }
    async fn execute(
        &self,
        input: Value,
        ctx: dsh::core::ToolContext,
    ) -> Result<Value, dsh::core::ToolFailure> {
        self.inner.execute(input, ctx).await
    }
    fn present(&self, value: &Value) -> Vec<dsh::core::ContentBlock> {
        misbehave(value["shown"].as_str().unwrap_or_default(), "present");
        self.inner.present(value)
    }
    fn finalize_content(
        &self,
        content: Vec<dsh::core::ContentBlock>,
    ) -> Vec<dsh::core::ContentBlock> {
        let text = dsh::core::content::joined_text(&content);
        if odd(&text, "finalize:stuck") || odd(&text, "finalize:panic") {
            self.finalize_misbehaved.fetch_add(1, Ordering::SeqCst);
            self.inner.probe.finalized.fetch_add(1, Ordering::SeqCst);
            misbehave(&text, "finalize");
            return content;
        }
        misbehave(&text, "finalize");
        self.inner.finalize_content(content)
    }
}

#[derive(Clone, Copy, Debug)]
enum PreBehaviour {
    Pass,
    Deny,
    Ask,
    Panic,
    Rewrite,
}

#[derive(Clone, Copy, Debug)]
enum PostBehaviour {
    Pass,
    Block,
    Context,
    Replace,
    Panic,
}

/// What the simulation decided for each call, and what the pipeline did with it.
#[derive(Default)]
struct World {
    pre: Mutex<HashMap<String, PreBehaviour>>,
    post: Mutex<HashMap<String, PostBehaviour>>,
    guard_denies: Mutex<HashSet<String>>,
    exclusive_tools: HashSet<String>,
    /// Calls between their pre-execute and their frozen result.
    in_flight: Mutex<HashSet<String>>,
    exclusive_in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    overlap: AtomicBool,
    observed: Mutex<Vec<FrozenResult>>,
    /// Calls whose guard check blocks past its deadline, or panics.
    guard_stuck: Mutex<HashSet<String>>,
    guard_panics: Mutex<HashSet<String>>,
    /// Calls whose user code was told to misbehave.
    odd_calls: Mutex<HashSet<String>>,
    /// This seed misbehaves.
    misbehaving: bool,
}

struct SimPre(Arc<World>);

#[async_trait]
impl PreExecuteHandler for SimPre {
    fn name(&self) -> &str {
        "sim-pre"
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        let w = &self.0;
        {
            let mut in_flight = w.in_flight.lock().unwrap();
            let exclusive = w.exclusive_tools.contains(call.tool.name());
            // A handler may be asked twice about one call (after a rewrite, the verification
            // pass): count the call in flight once.
            let again = in_flight.contains(call.call_id);
            let exclusive_now = w.exclusive_in_flight.load(Ordering::SeqCst);
            if !again {
                if exclusive_now > 0 || (exclusive && !in_flight.is_empty()) {
                    w.overlap.store(true, Ordering::SeqCst);
                }
                in_flight.insert(call.call_id.to_string());
                if exclusive {
                    w.exclusive_in_flight.fetch_add(1, Ordering::SeqCst);
                }
                w.max_in_flight.fetch_max(in_flight.len(), Ordering::SeqCst);
            }
        }
        let behaviour = w
            .pre
            .lock()
            .unwrap()
            .get(call.call_id)
            .copied()
            .unwrap_or(PreBehaviour::Pass);
        match behaviour {
            PreBehaviour::Pass => Ok(PreExecuteOutcome::abstain()),
            PreBehaviour::Deny => Ok(PreExecuteOutcome::deny("sim says no")),
            PreBehaviour::Ask => Ok(PreExecuteOutcome::ask("sim asks")),
            PreBehaviour::Panic => panic!("sim pre-execute exploded"),
            PreBehaviour::Rewrite => {
                let mut args = call.arguments.clone();
                args["text"] = json!("rewritten");
                Ok(PreExecuteOutcome::abstain().with_input(args))
            }
        }
    }
}

struct SimPost(Arc<World>);

#[async_trait]
impl PostExecuteHandler for SimPost {
    fn name(&self) -> &str {
        "sim-post"
    }
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        let behaviour = self
            .0
            .post
            .lock()
            .unwrap()
            .get(call.call_id)
            .copied()
            .unwrap_or(PostBehaviour::Pass);
        match behaviour {
            PostBehaviour::Pass => Ok(PostExecuteOutcome::accept()),
            PostBehaviour::Block => Ok(PostExecuteOutcome::block("sim blocks")),
            PostBehaviour::Context => {
                Ok(PostExecuteOutcome::accept().with_context(format!("ctx from {}", call.call_id)))
            }
            PostBehaviour::Replace => Ok(PostExecuteOutcome::replace_content(vec![
                dsh::core::ContentBlock::text("replaced"),
            ])),
            PostBehaviour::Panic => panic!("sim post-execute exploded"),
        }
    }
}

struct SimObserver(Arc<World>);

impl ResultObserver for SimObserver {
    fn name(&self) -> &str {
        "sim-observer"
    }
    fn observe(&self, result: &FrozenResult) {
        let w = &self.0;
        if w.in_flight.lock().unwrap().remove(result.call_id())
            && w.exclusive_tools.contains(result.tool())
        {
            w.exclusive_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if std::env::var("SIM_DEBUG").is_ok() {
            eprintln!(
                "observed {} {:?} {}",
                result.call_id(),
                result.code(),
                result.text()
            );
        }
        w.observed.lock().unwrap().push(result.clone());
        misbehave(&result.text(), "observer");
    }
}

struct SimApprover {
    yes: bool,
    delay_ms: u64,
}

#[async_trait]
impl ApprovalResponder for SimApprover {
    async fn respond(&self, _r: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        tokio::time::sleep(Duration::from_millis(self.delay_ms)).await;
        Ok(if self.yes {
            ApprovalAnswer::Approve
        } else {
            ApprovalAnswer::Reject(None)
        })
    }
}

fn random_call(rng: &mut StdRng, id: String, world: &World) -> ToolCall {
    if world.misbehaving && rng.random_range(0..100) < 15 {
        let what = [
            "finalize:slow",
            "finalize:stuck",
            "finalize:panic",
            "present:slow",
            "present:stuck",
            "present:panic",
            "observer:slow",
            "observer:stuck",
            "observer:panic",
            "guard:stuck",
            "guard:panic",
        ][rng.random_range(0..11)];
        match what {
            "guard:stuck" => {
                world.guard_stuck.lock().unwrap().insert(id.clone());
            }
            "guard:panic" => {
                world.guard_panics.lock().unwrap().insert(id.clone());
            }
            _ => {}
        }
        world.odd_calls.lock().unwrap().insert(id.clone());
        let mut args = json!({"text": what});
        if rng.random_bool(0.5) {
            args["sleep_ms"] = json!(rng.random_range(0..100));
        }
        return ToolCall::new(id, "odd", args);
    }
    let kind = rng.random_range(0..100);
    let tool = match rng.random_range(0..10) {
        0..=4 => "par",
        5..=7 => "ex",
        8 => "timed",
        _ => "flaky",
    };
    if kind < 3 {
        return ToolCall::new(id, "no_such_tool", json!({}));
    }
    if kind < 6 {
        return ToolCall {
            call_id: id,
            name: tool.into(),
            arguments: Arguments::parse("{\"sleep_ms\":"),
        };
    }
    let mut args = serde_json::Map::new();
    if rng.random_bool(0.7) {
        args.insert("sleep_ms".into(), json!(rng.random_range(0..200)));
    }
    match rng.random_range(0..100) {
        0..=7 => {
            args.insert("fail".into(), json!("sim failure"));
            if rng.random_bool(0.5) {
                args.insert("retryable".into(), json!(true));
                args.insert("fail_times".into(), json!(rng.random_range(0..3)));
            }
        }
        8..=11 => {
            args.insert("panic".into(), json!(true));
        }
        12..=15 => {
            args.insert("bad_output".into(), json!(true));
        }
        16..=20 => {
            args.insert("ignore_cancel".into(), json!(true));
        }
        21..=23 => {
            args.insert("unsafe".into(), json!(true));
        }
        24..=26 => {
            args.insert("surprise".into(), json!(1)); // breaks the input schema
        }
        _ => {}
    }
    let pre = match rng.random_range(0..100) {
        0..=5 => PreBehaviour::Deny,
        6..=11 => PreBehaviour::Ask,
        12..=13 => PreBehaviour::Panic,
        14..=18 => PreBehaviour::Rewrite,
        _ => PreBehaviour::Pass,
    };
    let post = match rng.random_range(0..100) {
        0..=4 => PostBehaviour::Block,
        5..=14 => PostBehaviour::Context,
        15..=19 => PostBehaviour::Replace,
        20..=21 => PostBehaviour::Panic,
        _ => PostBehaviour::Pass,
    };
    world.pre.lock().unwrap().insert(id.clone(), pre);
    world.post.lock().unwrap().insert(id.clone(), post);
    if rng.random_range(0..100) < 5 {
        world.guard_denies.lock().unwrap().insert(id.clone());
    }
    ToolCall::new(id, tool, Value::Object(args))
}

fn check_seed(
    events: &[SessionEvent],
    outcomes: &[(Vec<ToolCall>, StepOutcome)],
    world: &World,
    probe: &Probe,
    finalize_misbehaved: &AtomicUsize,
    cap: usize,
    known: &HashSet<String>,
) -> Result<(), String> {
    // seq contiguous from 1.
    for (i, e) in events.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            return Err(format!("seq {} at position {}", e.seq, i));
        }
    }
    // Pairing: each call exactly one result, same step, after it; each result names a call.
    let mut calls: HashMap<u64, &SessionEvent> = HashMap::new();
    let mut paired: HashMap<u64, usize> = HashMap::new();
    let mut last_result_of_step: HashMap<u64, u64> = HashMap::new();
    let mut first_user_of_step: HashMap<u64, u64> = HashMap::new();
    let mut total_marks = 0;
    for e in events {
        match &e.body {
            EventBody::ToolCall(_) => {
                calls.insert(e.seq, e);
            }
            EventBody::ToolResult {
                source_event_seqs,
                surface_op,
                data,
            } => {
                if surface_op != "append" || source_event_seqs.len() != 1 {
                    return Err(format!("result {} has a bad envelope", e.seq));
                }
                let call = calls
                    .get(&source_event_seqs[0])
                    .ok_or_else(|| format!("result {} points at no earlier call", e.seq))?;
                if call.step != e.step {
                    return Err(format!(
                        "result {} is in step {} but its call in {}",
                        e.seq, e.step, call.step
                    ));
                }
                if call.call_id() != Some(data.call_id.as_str()) {
                    return Err(format!("result {} names another call id", e.seq));
                }
                *paired.entry(source_event_seqs[0]).or_default() += 1;
                last_result_of_step.insert(e.step, e.seq);
                if let Some(first_user) = first_user_of_step.get(&e.step) {
                    return Err(format!(
                        "user/message {first_user} comes before result {}",
                        e.seq
                    ));
                }
                // finalize_content exactly once per result of a known tool.
                let name = match &call.body {
                    EventBody::ToolCall(c) => c.name.clone(),
                    _ => String::new(),
                };
                let text = dsh::core::content::joined_text(&data.message);
                let marks = text.matches(FINALIZED).count();
                let want = usize::from(known.contains(&name));
                // Odd user code may leave a result unfinalized (its finalize_content stuck or
                // panicked, and never called twice), but never a success.
                let odd_miss = marks == 0
                    && want == 1
                    && data.error.is_some()
                    && world.odd_calls.lock().unwrap().contains(&data.call_id);
                if marks != want && !odd_miss {
                    return Err(format!(
                        "result {} of {name} was finalized {marks} times: {text}",
                        e.seq
                    ));
                }
                total_marks += marks;
            }
            EventBody::UserMessage(_) => {
                first_user_of_step.entry(e.step).or_insert(e.seq);
            }
            EventBody::CodeDispatch(_) => {}
        }
    }
    for (seq, call) in &calls {
        if paired.get(seq).copied().unwrap_or(0) != 1 {
            return Err(format!(
                "call {:?} (seq {seq}) has {} results",
                call.call_id(),
                paired.get(seq).copied().unwrap_or(0)
            ));
        }
    }
    // Step answers: one result per block, in block order.
    for (calls, outcome) in outcomes {
        if outcome.results.len() != calls.len() {
            return Err(format!(
                "step {} answered {} results for {} calls",
                outcome.step,
                outcome.results.len(),
                calls.len()
            ));
        }
        for (i, r) in outcome.results.iter().enumerate() {
            let expected = outcome
                .renamed
                .iter()
                .find(|n| n.index == i)
                .map(|n| n.assigned.clone())
                .unwrap_or_else(|| calls[i].call_id.clone());
            if r.call_id() != expected {
                return Err(format!(
                    "step {} result {i} is {} not {expected}",
                    outcome.step,
                    r.call_id()
                ));
            }
        }
    }
    if world.overlap.load(Ordering::SeqCst) {
        return Err("an exclusive call overlapped another call".into());
    }
    let max = world.max_in_flight.load(Ordering::SeqCst);
    if max > cap {
        return Err(format!("{max} calls in flight with a cap of {cap}"));
    }
    // Every frozen result was observed exactly once.
    let observed = world.observed.lock().unwrap();
    let results: usize = outcomes.iter().map(|(_, o)| o.results.len()).sum();
    if observed.len() != results {
        return Err(format!(
            "{} results observed, {results} answered",
            observed.len()
        ));
    }
    // finalize_content was called once per finalized result, plus once per call whose odd
    // finalize_content went wrong: never twice for one call.
    let called = probe.finalized.load(Ordering::SeqCst);
    let went_wrong = finalize_misbehaved.load(Ordering::SeqCst);
    if called != total_marks + went_wrong {
        return Err(format!(
            "finalize_content was called {called} times for {total_marks} finalized results and {went_wrong} that went wrong"
        ));
    }
    Ok(())
}

/// The step's calls arrive one by one at random moments through an open step; some are
/// cancelled through their own handle. The step is finished, or its handle dropped (then the
/// outcome is made of the calls' own results). Each call's own result must be the one the
/// outcome holds.
async fn open_step(
    session: &Session,
    calls: &[ToolCall],
    rng: &mut StdRng,
) -> Result<StepOutcome, String> {
    let step = session
        .open_step()
        .map_err(|e| format!("open failed: {e}"))?;
    let mut pending = Vec::new();
    let mut cancels = Vec::new();
    for call in calls {
        if rng.random_bool(0.7) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..80))).await;
        }
        let p = step
            .push(call.clone())
            .map_err(|e| format!("push failed: {e}"))?;
        if rng.random_bool(0.1) {
            let at = Duration::from_millis(rng.random_range(0..150));
            let canceller = p.canceller();
            cancels.push(tokio::spawn(async move {
                tokio::time::sleep(at).await;
                let _ = canceller.cancel();
            }));
        }
        pending.push(p);
    }
    let mut own = Vec::new();
    let outcome = if rng.random_bool(0.8) {
        let outcome = step
            .finish()
            .await
            .map_err(|e| format!("step failed: {e}"))?;
        for p in pending {
            own.push(
                p.result()
                    .await
                    .map_err(|e| format!("a call failed: {e}"))?,
            );
        }
        outcome
    } else {
        drop(step);
        for p in pending {
            own.push(
                p.result()
                    .await
                    .map_err(|e| format!("a call failed: {e}"))?,
            );
        }
        StepOutcome {
            step: 0,
            results: own.clone(),
            deferred: Vec::new(),
            renamed: Vec::new(),
        }
    };
    for c in cancels {
        c.abort();
    }
    if outcome.results != own {
        return Err(format!(
            "step {}: the calls' own results differ from the outcome's",
            outcome.step
        ));
    }
    Ok(outcome)
}

fn run_seed(seed: u64) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        if std::env::var("SIM_DEBUG").is_ok() {
            eprintln!("=== seed {seed}");
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let probe = Arc::new(Probe::default());
        let registry = Arc::new(ToolRegistry::new());
        registry
            .register(ProbeTool::new("par", true, &probe))
            .unwrap();
        registry
            .register(ProbeTool::new("ex", false, &probe))
            .unwrap();
        let mut timed = ProbeTool::new("timed", true, &probe);
        timed.timeout_ms = Some(rng.random_range(20..150));
        registry.register(timed).unwrap();
        let mut flaky = ProbeTool::new("flaky", false, &probe);
        flaky.retry = Some(RetryPolicy {
            max_attempts: 3,
            backoff: Duration::from_millis(5),
        });
        registry.register(flaky).unwrap();
        let finalize_misbehaved = Arc::new(AtomicUsize::new(0));
        registry
            .register(Odd {
                inner: ProbeTool::new("odd", true, &probe),
                finalize_misbehaved: finalize_misbehaved.clone(),
            })
            .unwrap();
        let known: HashSet<String> = registry.names().into_iter().collect();

        let world = Arc::new(World {
            exclusive_tools: ["ex", "flaky"].iter().map(|s| s.to_string()).collect(),
            misbehaving: rng.random_range(0..40) == 0,
            ..World::default()
        });
        let mut hooks = Hooks::new();
        hooks.pre_execute(SimPre(world.clone()));
        hooks.around(RetryLayer);
        // (The harness adds the timeout wrapper innermost.)
        hooks.post_execute(SimPost(world.clone()));
        hooks.observe(SimObserver(world.clone()));
        let cap = rng.random_range(1..=5);
        let deadline = if world.misbehaving {
            DEADLINE
        } else {
            PipelineConfig::default().user_code_deadline
        };
        let guards = GuardSet::spawn(None)
            .await
            .unwrap()
            .with_evaluation_timeout(deadline)
            .with_pool_threads(2);
        let mut builder = HarnessBuilder::new(registry)
            .hooks(hooks)
            .config(PipelineConfig {
                body_grace: Duration::from_millis(10),
                approval_timeout: Duration::from_millis(100),
                user_code_deadline: deadline,
                cancelled_deadline: deadline,
                ..PipelineConfig::default()
            })
            .guards(guards.clone());
        if rng.random_bool(0.7) {
            builder = builder.approval(Arc::new(SimApprover {
                yes: rng.random_bool(0.6),
                delay_ms: rng.random_range(0..150),
            }));
        }
        let config = SchedulerConfig {
            max_parallel_tool_calls: cap,
            sibling_policy: if rng.random_bool(0.2) {
                SiblingPolicy::CancelSiblings
            } else {
                SiblingPolicy::Continue
            },
            first_step: 1,
        };
        let (harness, session, log) = open_with(builder, config).await;
        let denies = world.clone();
        let _guard = harness
            .pipeline()
            .guards()
            .register(FnGuard::new("sim-guard", move |c: &GuardCall| {
                if denies.guard_stuck.lock().unwrap().contains(&c.call_id) {
                    std::thread::sleep(STUCK);
                }
                if denies.guard_panics.lock().unwrap().contains(&c.call_id) {
                    panic!("sim guard exploded");
                }
                if denies.guard_denies.lock().unwrap().contains(&c.call_id) {
                    GuardVerdict::Deny("sim guard".into())
                } else {
                    GuardVerdict::Abstain
                }
            }))
            .await
            .unwrap();

        let steps = rng.random_range(1..=4);
        let mut outcomes = Vec::new();
        for s in 0..steps {
            let n = rng.random_range(1..=8);
            let calls: Vec<ToolCall> = (0..n)
                .map(|i| random_call(&mut rng, format!("s{s}c{i}"), &world))
                .collect();
            // Cancel something at a random moment, sometimes.
            let canceller = if rng.random_bool(0.35) {
                let at = Duration::from_millis(rng.random_range(0..250));
                let target = match rng.random_range(0..3) {
                    0 => CancelTarget::Call(format!("s{s}c{}", rng.random_range(0..n))),
                    1 => CancelTarget::Step,
                    _ => CancelTarget::Session,
                };
                let session = session.clone();
                Some(tokio::spawn(async move {
                    tokio::time::sleep(at).await;
                    let _ = session.cancel(target);
                }))
            } else {
                None
            };
            let outcome = if rng.random_bool(0.5) {
                session
                    .run_step(StepRequest::new(calls.clone()))
                    .await
                    .map_err(|e| format!("step failed: {e}"))?
            } else {
                open_step(&session, &calls, &mut rng).await?
            };
            if let Some(c) = canceller {
                c.abort();
            }
            outcomes.push((calls, outcome));
        }
        let events = log.snapshot().await.unwrap();
        let checked = check_seed(
            &events,
            &outcomes,
            &world,
            &probe,
            &finalize_misbehaved,
            cap,
            &known,
        );
        session.shutdown().await;
        harness.shutdown().await;
        guards.shutdown().await;
        checked
    })
}

#[test]
fn random_sessions_keep_every_invariant() {
    quiet_intentional_panics();
    let only: Option<u64> = std::env::var("DSH_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let seeds: u64 = std::env::var("DSH_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let list: Vec<u64> = match only {
        Some(s) => vec![s],
        None => (0..seeds).collect(),
    };
    for seed in list {
        if let Err(why) = run_seed(seed) {
            panic!(
                "simulation seed {seed} failed: {why}\nreplay it with DSH_SIM_SEED={seed} cargo test --test simulation"
            );
        }
    }
}
