//! The prepare phase: the pre-execute waterfall, approval, the guards, and the cancel check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    ApprovalAnswer, ApprovalRequest, ApprovalResponder, HookError, Hooks, PreExecuteContext,
    PreExecuteHandler, PreExecuteOutcome, PreToolDecision,
};
use dsh::guards::{FnGuard, GuardCall, GuardVerdict, PermissionRules};
use dsh::scheduler::{HarnessBuilder, PipelineConfig, SchedulerConfig, StepRequest};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What each handler saw: its name, the decision so far, the arguments.
type Seen = Arc<Mutex<Vec<(String, PreToolDecision, Value)>>>;

/// A handler that answers a fixed outcome and records what decision it saw.
struct Fixed {
    name: &'static str,
    outcome: PreExecuteOutcome,
    saw: Seen,
}

#[async_trait]
impl PreExecuteHandler for Fixed {
    fn name(&self) -> &str {
        self.name
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        self.saw.lock().unwrap().push((
            self.name.to_string(),
            call.decision.clone(),
            call.arguments.clone(),
        ));
        Ok(self.outcome.clone())
    }
}

fn fixed(name: &'static str, outcome: PreExecuteOutcome, saw: &Seen) -> Fixed {
    Fixed {
        name,
        outcome,
        saw: saw.clone(),
    }
}

struct Approver {
    answer: Result<ApprovalAnswer, HookError>,
    delay: Duration,
    asked: Arc<AtomicUsize>,
}

#[async_trait]
impl ApprovalResponder for Approver {
    async fn respond(&self, _req: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.answer.clone()
    }
}

struct PanickingApprover;

#[async_trait]
impl ApprovalResponder for PanickingApprover {
    async fn respond(&self, _req: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        panic!("approver exploded")
    }
}

async fn run_one(builder: HarnessBuilder, args: Value) -> dsh::core::FrozenResult {
    let (harness, session, _log) = open_with(builder, SchedulerConfig::default()).await;
    let out = session
        .run_step(StepRequest::new(vec![call("c1", "ex", args)]))
        .await
        .unwrap();
    session.shutdown().await;
    harness.shutdown().await;
    out.results[0].clone()
}

#[tokio::test]
async fn allow_runs_the_body() {
    let probe = Arc::new(Probe::default());
    let saw = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = Hooks::new();
    hooks.pre_execute(fixed("allow", PreExecuteOutcome::allow(), &saw));
    let r = run_one(
        HarnessBuilder::new(probe_registry(&probe)).hooks(hooks),
        json!({}),
    )
    .await;
    assert_eq!(code(&r), "ok");
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn deny_stops_the_waterfall_and_the_body() {
    let probe = Arc::new(Probe::default());
    let saw = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = Hooks::new();
    hooks.pre_execute(fixed("first", PreExecuteOutcome::deny("not today"), &saw));
    hooks.pre_execute(fixed("second", PreExecuteOutcome::allow(), &saw));
    let r = run_one(
        HarnessBuilder::new(probe_registry(&probe)).hooks(hooks),
        json!({}),
    )
    .await;
    assert_eq!(code(&r), "DENIED");
    assert_eq!(r.error_info().unwrap().message, "not today");
    assert_eq!(
        r.text(),
        format!("not today\n{FINALIZED}"),
        "finalize_content sees errors too"
    );
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
    assert_eq!(
        saw.lock().unwrap().len(),
        1,
        "the waterfall ends at the first deny"
    );
}

#[tokio::test]
async fn handlers_run_in_order_and_the_decision_only_tightens() {
    let probe = Arc::new(Probe::default());
    let saw = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = Hooks::new();
    hooks.pre_execute(fixed("a", PreExecuteOutcome::ask("sure?"), &saw));
    hooks.pre_execute(fixed("b", PreExecuteOutcome::allow(), &saw));
    hooks.pre_execute(fixed("c", PreExecuteOutcome::abstain(), &saw));
    let r = run_one(
        HarnessBuilder::new(probe_registry(&probe)).hooks(hooks),
        json!({}),
    )
    .await;
    // b's allow could not loosen a's ask; with no approver, ask is a denial.
    assert_eq!(code(&r), "DENIED");
    let saw = saw.lock().unwrap();
    let names: Vec<_> = saw.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(saw[1].1, PreToolDecision::Ask("sure?".into()));
    assert_eq!(saw[2].1, PreToolDecision::Ask("sure?".into()));
}

#[tokio::test]
async fn a_rewrite_is_seen_by_later_handlers_and_the_body() {
    let probe = Arc::new(Probe::default());
    let saw = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = Hooks::new();
    hooks.pre_execute(fixed(
        "rewrite",
        PreExecuteOutcome::abstain().with_input(json!({"text": "rewritten"})),
        &saw,
    ));
    hooks.pre_execute(fixed("after", PreExecuteOutcome::abstain(), &saw));
    let r = run_one(
        HarnessBuilder::new(probe_registry(&probe)).hooks(hooks),
        json!({"text": "original"}),
    )
    .await;
    assert_eq!(r.text(), format!("rewritten\n{FINALIZED}"));
    assert_eq!(saw.lock().unwrap()[1].2, json!({"text": "rewritten"}));
    assert_eq!(
        probe.seen.lock().unwrap()["c1"],
        json!({"text": "rewritten"})
    );
}

#[tokio::test]
async fn a_rewrite_that_breaks_the_schema_is_an_input_error() {
    let probe = Arc::new(Probe::default());
    let saw = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = Hooks::new();
    hooks.pre_execute(fixed(
        "bad-rewrite",
        PreExecuteOutcome::allow().with_input(json!({"sleep_ms": "soon"})),
        &saw,
    ));
    let r = run_one(
        HarnessBuilder::new(probe_registry(&probe)).hooks(hooks),
        json!({}),
    )
    .await;
    assert_eq!(code(&r), "TOOL_INPUT_ERROR");
    assert!(r.text().contains("bad-rewrite"), "{}", r.text());
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn input_that_breaks_the_schema_never_reaches_handlers() {
    let probe = Arc::new(Probe::default());
    let saw = Arc::new(Mutex::new(Vec::new()));
    let mut hooks = Hooks::new();
    hooks.pre_execute(fixed("h", PreExecuteOutcome::allow(), &saw));
    let r = run_one(
        HarnessBuilder::new(probe_registry(&probe)).hooks(hooks),
        json!({"surprise": 1}),
    )
    .await;
    assert_eq!(code(&r), "TOOL_INPUT_ERROR");
    assert!(r.text().contains("surprise"), "{}", r.text());
    assert!(saw.lock().unwrap().is_empty());
}

struct Failing(bool);

#[async_trait]
impl PreExecuteHandler for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    async fn pre_execute(
        &self,
        _c: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        if self.0 {
            panic!("pre-execute exploded");
        }
        Err(HookError::new("policy service down"))
    }
}

#[tokio::test]
async fn a_failing_or_panicking_handler_is_a_pipeline_error_and_nothing_runs() {
    for panics in [false, true] {
        let probe = Arc::new(Probe::default());
        let mut hooks = Hooks::new();
        hooks.pre_execute(Failing(panics));
        let r = run_one(
            HarnessBuilder::new(probe_registry(&probe)).hooks(hooks),
            json!({}),
        )
        .await;
        assert_eq!(code(&r), "PIPELINE_ERROR");
        assert!(r.text().contains("failing"));
        assert_eq!(probe.started.load(Ordering::SeqCst), 0);
    }
}

/// Fails for calls whose `text` is "fail", and cannot even say its name then: the panic
/// escapes the waterfall's own guard (which covers the handler's answer, not its name).
struct Nameless;

#[async_trait]
impl PreExecuteHandler for Nameless {
    fn name(&self) -> &str {
        panic!("name() exploded")
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        if call.arguments.get("text").and_then(Value::as_str) == Some("fail") {
            return Err(HookError::new("policy service down"));
        }
        Ok(PreExecuteOutcome::abstain())
    }
}

#[tokio::test]
async fn a_panic_that_escapes_every_stage_still_ends_the_call_and_the_step() {
    let probe = Arc::new(Probe::default());
    let mut hooks = Hooks::new();
    hooks.pre_execute(Nameless);
    let (harness, session, log) =
        open(probe_registry(&probe), hooks, SchedulerConfig::default()).await;
    let step = session.run_step(StepRequest::new(vec![
        call("doomed", "ex", json!({"text": "fail"})),
        call("fine", "ex", json!({})),
    ]));
    let out = tokio::time::timeout(Duration::from_secs(10), step)
        .await
        .expect("the step hung: the call never answered")
        .unwrap();
    assert_eq!(code(&out.results[0]), "PIPELINE_ERROR");
    assert!(
        out.results[0].text().contains("name() exploded"),
        "{}",
        out.results[0].text()
    );
    assert!(out.results[0].text().contains(FINALIZED));
    assert_eq!(code(&out.results[1]), "ok");
    assert_eq!(probe.started.load(Ordering::SeqCst), 1, "only `fine` ran");
    assert_eq!(log.snapshot().await.unwrap().len(), 4);
    // The session goes on.
    let next = session
        .run_step(StepRequest::new(vec![call("after", "ex", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&next.results[0]), "ok");
    session.shutdown().await;
    harness.shutdown().await;
}

fn ask_hooks() -> Hooks {
    let mut hooks = Hooks::new();
    hooks.pre_execute(PermissionRules::from_toml(r#"ask = ["ex"]"#).unwrap());
    hooks
}

async fn ask_with(
    approver: Option<Arc<dyn ApprovalResponder>>,
    config: PipelineConfig,
) -> (dsh::core::FrozenResult, usize) {
    let probe = Arc::new(Probe::default());
    let mut builder = HarnessBuilder::new(probe_registry(&probe))
        .hooks(ask_hooks())
        .config(config);
    if let Some(a) = approver {
        builder = builder.approval(a);
    }
    let r = run_one(builder, json!({})).await;
    (r, probe.started.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn ask_is_answered_by_the_approver_and_fails_closed() {
    let asked = Arc::new(AtomicUsize::new(0));
    let approver = |answer, delay| -> Option<Arc<dyn ApprovalResponder>> {
        Some(Arc::new(Approver {
            answer,
            delay,
            asked: asked.clone(),
        }))
    };
    let config = PipelineConfig {
        approval_timeout: Duration::from_secs(5),
        ..PipelineConfig::default()
    };

    let (yes, ran) = ask_with(
        approver(Ok(ApprovalAnswer::Approve), Duration::ZERO),
        config.clone(),
    )
    .await;
    assert_eq!((code(&yes), ran), ("ok", 1));

    let (no, ran) = ask_with(
        approver(
            Ok(ApprovalAnswer::Reject(Some("looks risky".into()))),
            Duration::ZERO,
        ),
        config.clone(),
    )
    .await;
    assert_eq!((code(&no), ran), ("DENIED", 0));
    assert!(no.text().contains("looks risky"));

    let (none, ran) = ask_with(None, config.clone()).await;
    assert_eq!((code(&none), ran), ("DENIED", 0));
    assert!(none.text().contains("no approver"));

    let (late, ran) = ask_with(
        approver(Ok(ApprovalAnswer::Approve), Duration::from_secs(60)),
        config.clone(),
    )
    .await;
    assert_eq!(
        (code(&late), ran),
        ("DENIED", 0),
        "a yes after the timeout does not count"
    );
    assert!(late.text().contains("did not answer"));

    let (err, ran) = ask_with(
        approver(Err(HookError::new("terminal closed")), Duration::ZERO),
        config.clone(),
    )
    .await;
    assert_eq!((code(&err), ran), ("DENIED", 0));
    assert!(err.text().contains("terminal closed"));

    let (boom, ran) = ask_with(Some(Arc::new(PanickingApprover)), config).await;
    assert_eq!((code(&boom), ran), ("DENIED", 0));
    assert_eq!(asked.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_guard_denies_even_what_the_approver_allowed() {
    let probe = Arc::new(Probe::default());
    let asked = Arc::new(AtomicUsize::new(0));
    let harness_builder = HarnessBuilder::new(probe_registry(&probe))
        .hooks(ask_hooks())
        .approval(Arc::new(Approver {
            answer: Ok(ApprovalAnswer::Approve),
            delay: Duration::ZERO,
            asked: asked.clone(),
        }));
    let (harness, session, _log) = open_with(harness_builder, SchedulerConfig::default()).await;
    let _owner = harness
        .pipeline()
        .guards()
        .register(FnGuard::new("never-ex", |c: &GuardCall| {
            if c.tool == "ex" {
                GuardVerdict::Deny("ex is fenced off".into())
            } else {
                GuardVerdict::Abstain
            }
        }))
        .await
        .unwrap();
    let out = session
        .run_step(StepRequest::new(vec![
            call("c1", "ex", json!({})),
            call("c2", "par", json!({})),
        ]))
        .await
        .unwrap();
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "approval comes before the guards"
    );
    assert_eq!(code(&out.results[0]), "DENIED");
    assert!(out.results[0].text().contains("never-ex"));
    assert_eq!(code(&out.results[1]), "ok");
    assert_eq!(probe.started.load(Ordering::SeqCst), 1);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_panicking_guard_denies() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let _owner = harness
        .pipeline()
        .guards()
        .register(FnGuard::new("broken", |_c: &GuardCall| -> GuardVerdict {
            panic!("guard exploded")
        }))
        .await
        .unwrap();
    let out = session
        .run_step(StepRequest::new(vec![call("c1", "par", json!({}))]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "DENIED");
    assert!(out.results[0].text().contains("broken"));
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn calls_are_denied_while_the_guard_set_is_down_and_allowed_after_its_restart() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let guards = harness.pipeline().guards().clone();
    let _owner = guards
        .register(FnGuard::new("deny-ex", |c: &GuardCall| {
            if c.tool == "ex" {
                GuardVerdict::Deny("no ex".into())
            } else {
                GuardVerdict::Abstain
            }
        }))
        .await
        .unwrap();

    // Kill the actor; the handle must not let anything through while it is gone.
    let cell = guards.actor_cell().unwrap();
    cell.kill();
    let verdict = guards.evaluate(GuardCall::new("x", "par", json!({}))).await;
    assert!(matches!(verdict, GuardVerdict::Deny(_)), "{verdict:?}");

    // The supervisor restarts it, with the guards it held.
    let mut restarted = false;
    for _ in 0..200 {
        if guards.restarts() >= 1 && guards.actor_cell().is_some() {
            restarted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(restarted, "the guard set was not restarted");
    let out = session
        .run_step(StepRequest::new(vec![
            call("c1", "par", json!({})),
            call("c2", "ex", json!({})),
        ]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "ok");
    assert_eq!(
        code(&out.results[1]),
        "DENIED",
        "the guard survived the restart"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_stopped_guard_set_denies_every_call() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    harness.pipeline().guards().shutdown().await;
    let out = session
        .run_step(StepRequest::new(vec![
            call("c1", "par", json!({})),
            call("c2", "ex", json!({})),
        ]))
        .await
        .unwrap();
    for r in &out.results {
        assert_eq!(code(r), "DENIED");
        assert!(
            r.text().contains("guard set is unavailable"),
            "{}",
            r.text()
        );
    }
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
    session.shutdown().await;
}

#[tokio::test]
async fn unknown_tools_and_malformed_arguments_get_their_codes() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        probe_registry(&probe),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let malformed = dsh::core::ToolCall {
        call_id: "c2".into(),
        name: "par".into(),
        arguments: dsh::core::Arguments::parse("{\"sleep_ms\": "),
    };
    let out = session
        .run_step(StepRequest::new(vec![
            call("c1", "rm_rf", json!({})),
            malformed,
        ]))
        .await
        .unwrap();
    assert_eq!(code(&out.results[0]), "UNKNOWN_TOOL");
    assert!(out.results[0].text().contains("rm_rf"));
    assert!(
        out.results[0].text().contains("ex, par"),
        "names the known tools"
    );
    assert_eq!(code(&out.results[1]), "TOOL_INPUT_ERROR");
    assert!(out.results[1].text().contains("not valid JSON"));
    assert_eq!(probe.started.load(Ordering::SeqCst), 0);
    session.shutdown().await;
    harness.shutdown().await;
}
