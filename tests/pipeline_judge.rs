//! `Pipeline::judge`: a call judged without running it (`dsh run --dry-run`). The same prepare
//! as a call that runs (schema, pre-execute waterfall, guards), an `ask` reported instead of
//! put to the approver, then the tool's own `dry_run`; no body ever starts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    ApprovalAnswer, ApprovalRequest, ApprovalResponder, ErrorCode, HookError, Hooks,
    PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, Signal, ToolContext, ToolDefinition,
    ToolExecutionInput, ToolFailure,
};
use dsh::guards::{FnGuard, GuardCall, GuardVerdict};
use dsh::scheduler::{HarnessBuilder, Judgement};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Asks about every call of `ex`; denies any call whose `marker` is `"secret"`.
struct Policy;

#[async_trait]
impl PreExecuteHandler for Policy {
    fn name(&self) -> &str {
        "policy"
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        Ok(if call.arguments["marker"] == "secret" {
            PreExecuteOutcome::deny("secrets stay secret")
        } else if call.tool.name() == "ex" {
            PreExecuteOutcome::ask("may ex run?")
        } else {
            PreExecuteOutcome::abstain()
        })
    }
}

struct CountingApprover(Arc<AtomicUsize>);

#[async_trait]
impl ApprovalResponder for CountingApprover {
    async fn respond(&self, _req: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(ApprovalAnswer::Approve)
    }
}

/// A tool whose dry run refuses what its body would refuse, and whose body must never run.
struct Careful(Arc<AtomicUsize>);

#[async_trait]
impl ToolDefinition for Careful {
    fn name(&self) -> &str {
        "careful"
    }
    fn description(&self) -> &str {
        "refuses `forbidden` before changing anything"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"target": {"type": "string"}}})
    }
    async fn dry_run(&self, input: Value, _ctx: ToolContext) -> Result<(), ToolFailure> {
        if input["target"] == "forbidden" {
            return Err(ToolFailure::with_code(
                ErrorCode::Denied,
                "`forbidden` is not to be touched",
            ));
        }
        Ok(())
    }
    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(json!("ran"))
    }
}

fn input(id: &str, tool: &str, args: Value) -> ToolExecutionInput {
    ToolExecutionInput {
        call_id: id.into(),
        name: tool.into(),
        arguments: dsh::core::Arguments::Json(args),
        agent: "main".into(),
        signal: Signal::never(),
        parent: None,
    }
}

#[tokio::test]
async fn judging_runs_prepare_but_never_a_body_nor_the_approver() {
    let probe = Arc::new(Probe::default());
    let registry = probe_registry(&probe);
    let careful_runs = Arc::new(AtomicUsize::new(0));
    registry.register(Careful(careful_runs.clone())).unwrap();
    let mut hooks = Hooks::new();
    hooks.pre_execute(Policy);
    let asked = Arc::new(AtomicUsize::new(0));
    let (harness, _session, _log) = open_with(
        HarnessBuilder::new(registry)
            .hooks(hooks)
            .approval(Arc::new(CountingApprover(asked.clone()))),
        Default::default(),
    )
    .await;
    let _owner = harness
        .pipeline()
        .guards()
        .register(FnGuard::new("fence", |c: &GuardCall| {
            if c.arguments["marker"] == "fenced" {
                GuardVerdict::Deny("behind the fence".into())
            } else {
                GuardVerdict::Abstain
            }
        }))
        .await
        .unwrap();
    let pipeline = harness.pipeline();
    let judge = |id: &str, tool: &str, args: Value| {
        let call = input(id, tool, args);
        async move { pipeline.judge(&call).await }
    };

    assert_eq!(judge("a", "par", json!({})).await, Judgement::Allow);
    assert_eq!(
        judge("b", "ex", json!({})).await,
        Judgement::Ask("may ex run?".into())
    );
    // The first deny of the waterfall.
    assert_eq!(
        judge("c", "ex", json!({"marker": "secret"})).await,
        Judgement::Deny {
            code: ErrorCode::Denied,
            reason: "secrets stay secret".into()
        }
    );
    // A guard's denial stands over an ask, as it would over a human's yes.
    assert_eq!(
        judge("d", "ex", json!({"marker": "fenced"})).await,
        Judgement::Deny {
            code: ErrorCode::Denied,
            reason: "guard `fence`: behind the fence".into()
        }
    );
    // The tool's own dry run.
    assert_eq!(
        judge("e", "careful", json!({"target": "forbidden"})).await,
        Judgement::Deny {
            code: ErrorCode::Denied,
            reason: "`forbidden` is not to be touched".into()
        }
    );
    assert_eq!(
        judge("f", "careful", json!({"target": "fine"})).await,
        Judgement::Allow
    );
    // Calls that cannot run at all.
    assert!(matches!(
        judge("g", "nope", json!({})).await,
        Judgement::Deny {
            code: ErrorCode::UnknownTool,
            ..
        }
    ));
    assert!(matches!(
        judge("h", "careful", json!({"target": 7})).await,
        Judgement::Deny {
            code: ErrorCode::ToolInputError,
            ..
        }
    ));

    assert_eq!(probe.started.load(Ordering::SeqCst), 0, "a body ran");
    assert_eq!(careful_runs.load(Ordering::SeqCst), 0, "a body ran");
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the approver was asked");
    harness.shutdown().await;
}
