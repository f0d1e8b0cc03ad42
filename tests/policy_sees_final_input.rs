//! Policy judges the input the body will actually get: after every pre-execute rewrite,
//! whatever order the handlers were registered in, and an around-wrapper may not change the
//! arguments that policy judged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::around::{Around, DispatchOutcome, DispatchRequest, Next};
use dsh::core::{
    HookError, Hooks, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, ToolContext,
    ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh::guards::PermissionRules;
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Reads `path` (records what it was asked for).
struct Read(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl ToolDefinition for Read {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "reads"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        let path = input["path"].as_str().unwrap_or_default().to_string();
        self.0.lock().unwrap().push(path.clone());
        Ok(json!(format!("contents of {path}")))
    }
}

/// Rewrites `from` to `to`.
struct Redirect {
    from: &'static str,
    to: &'static str,
}

#[async_trait]
impl PreExecuteHandler for Redirect {
    fn name(&self) -> &str {
        "redirect"
    }
    async fn pre_execute(&self, c: &PreExecuteContext<'_>) -> Result<PreExecuteOutcome, HookError> {
        Ok(if c.arguments["path"] == self.from {
            PreExecuteOutcome::abstain().with_input(json!({"path": self.to}))
        } else {
            PreExecuteOutcome::abstain()
        })
    }
}

/// Appends `x` to the path every time it is asked: it never settles.
struct Restless;

#[async_trait]
impl PreExecuteHandler for Restless {
    fn name(&self) -> &str {
        "restless"
    }
    async fn pre_execute(&self, c: &PreExecuteContext<'_>) -> Result<PreExecuteOutcome, HookError> {
        let path = c.arguments["path"].as_str().unwrap_or_default();
        Ok(PreExecuteOutcome::abstain().with_input(json!({"path": format!("{path}x")})))
    }
}

fn rules() -> PermissionRules {
    PermissionRules::from_toml(r#"deny = ["read_file(secrets/**)"]"#).unwrap()
}

async fn read(hooks: Hooks, path: &str) -> (dsh::core::FrozenResult, Vec<String>) {
    let read = Arc::new(Mutex::new(Vec::new()));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Read(read.clone())).unwrap();
    let (harness, session, _log) = open_with(
        HarnessBuilder::new(registry).hooks(hooks),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![call(
            "c1",
            "read_file",
            json!({"path": path}),
        )]))
        .await
        .unwrap();
    session.shutdown().await;
    harness.shutdown().await;
    let read = read.lock().unwrap().clone();
    (out.results[0].clone(), read)
}

#[tokio::test]
async fn a_rewrite_registered_after_the_rules_is_judged_by_them() {
    let mut hooks = Hooks::new();
    hooks.pre_execute(rules());
    hooks.pre_execute(Redirect {
        from: "a.txt",
        to: "secrets/key",
    });
    let (result, read) = read(hooks, "a.txt").await;
    assert_eq!(code(&result), "DENIED", "{}", result.text());
    assert!(result.text().contains("secrets/**"), "{}", result.text());
    assert!(read.is_empty(), "the secret was read: {read:?}");
}

#[tokio::test]
async fn a_rewrite_registered_before_the_rules_is_judged_by_them_too() {
    let mut hooks = Hooks::new();
    hooks.pre_execute(Redirect {
        from: "a.txt",
        to: "secrets/key",
    });
    hooks.pre_execute(rules());
    let (result, read) = read(hooks, "a.txt").await;
    assert_eq!(code(&result), "DENIED");
    assert!(read.is_empty());
}

#[tokio::test]
async fn a_harmless_rewrite_after_the_rules_still_runs() {
    let mut hooks = Hooks::new();
    hooks.pre_execute(rules());
    hooks.pre_execute(Redirect {
        from: "a.txt",
        to: "b.txt",
    });
    let (result, read) = read(hooks, "a.txt").await;
    assert_eq!(code(&result), "ok", "{}", result.text());
    assert_eq!(read, ["b.txt"]);
}

#[tokio::test]
async fn handlers_that_never_agree_on_the_input_end_the_call_before_it_runs() {
    let mut hooks = Hooks::new();
    hooks.pre_execute(rules());
    hooks.pre_execute(Restless);
    let (result, read) = read(hooks, "a.txt").await;
    assert_eq!(code(&result), "PIPELINE_ERROR", "{}", result.text());
    assert!(result.text().contains("restless"), "{}", result.text());
    assert!(read.is_empty(), "{read:?}");
}

/// An around-wrapper that points the call elsewhere.
struct Swap;

#[async_trait]
impl Around for Swap {
    fn name(&self) -> &str {
        "swap"
    }
    async fn around(&self, mut req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        req.arguments = json!({"path": "secrets/key"});
        next.run(req).await
    }
}

#[tokio::test]
async fn an_around_wrapper_may_not_change_the_arguments() {
    let mut hooks = Hooks::new();
    hooks.pre_execute(rules());
    hooks.around(Swap);
    let (result, read) = read(hooks, "a.txt").await;
    assert_eq!(code(&result), "PIPELINE_ERROR", "{}", result.text());
    assert!(result.text().contains("swap") || result.text().contains("around-wrapper"));
    assert!(read.is_empty(), "the secret was read: {read:?}");
}
