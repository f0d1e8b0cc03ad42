//! A refused sub-call is binding: the script gets a `ToolDenied`, and whatever it does with
//! it, `run_code` answers DENIED and lists every refusal, so the model is told.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh_core::{
    EventBody, HookError, Hooks, PostExecuteContext, PostExecuteHandler, PostExecuteOutcome,
    PreExecuteContext, PreExecuteHandler, PreExecuteOutcome,
};
use dsh_scheduler::SchedulerConfig;
use serde_json::{Value, json};
use std::sync::Arc;

/// Denies any call whose `text` is "secret"; blocks the result of any whose `text` is "hide".
struct Policy;

#[async_trait]
impl PreExecuteHandler for Policy {
    fn name(&self) -> &str {
        "deny-secret"
    }
    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        Ok(
            if call.arguments.get("text").and_then(Value::as_str) == Some("secret") {
                PreExecuteOutcome::deny("secrets stay secret")
            } else {
                PreExecuteOutcome::abstain()
            },
        )
    }
}

#[async_trait]
impl PostExecuteHandler for Policy {
    fn name(&self) -> &str {
        "block-hidden"
    }
    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        Ok(
            if call.arguments.get("text").and_then(Value::as_str) == Some("hide") {
                PostExecuteOutcome::block("not for the model")
            } else {
                PostExecuteOutcome::accept()
            },
        )
    }
}

async fn open_with_policy(
    probe: &Arc<Probe>,
) -> (
    dsh_scheduler::Harness,
    dsh_scheduler::Session,
    dsh_session::SessionLog,
) {
    let mut hooks = Hooks::new();
    hooks.pre_execute(Policy);
    hooks.post_execute(Policy);
    open(
        registry(probe, test_limits()),
        hooks,
        SchedulerConfig::default(),
    )
    .await
}

#[tokio::test]
async fn a_caught_denial_still_makes_run_code_denied_and_is_listed_first() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open_with_policy(&probe).await;
    let r = run_code(
        &session,
        "c1",
        r#"
        let seen;
        try {
            await tools.nap({ text: "secret" });
        } catch (e) {
            seen = [e instanceof ToolDenied, e instanceof ToolError, e.name, e.code, e.reason];
        }
        console.log(JSON.stringify(seen));
        // Retrying does not help: the pipeline refuses again.
        try { await tools.nap({ text: "secret" }); } catch (e) {}
        const ok = await tools.nap({ text: "fine" });
        return "all good: " + ok.text;
        "#,
    )
    .await;
    assert_eq!(
        code(&r),
        "DENIED",
        "a caught denial cannot become a success"
    );
    let text = r.text();
    assert!(
        text.starts_with("DENIED: 2 sub-call(s) of this script were refused by policy"),
        "the denials come first: {text}"
    );
    assert!(
        text.contains("- c1.sub1 DENIED: secrets stay secret"),
        "{text}"
    );
    assert!(
        text.contains("- c1.sub2 DENIED: secrets stay secret"),
        "{text}"
    );
    assert!(
        text.contains("The script then returned: \"all good: fine\""),
        "what the script did is still told: {text}"
    );
    assert!(
        text.contains(r#"[true,true,"ToolDenied","DENIED","secrets stay secret"]"#),
        "the script received a ToolDenied with the reason: {text}"
    );
    assert!(text.contains("- c1.sub3 nap: ok"), "{text}");
    assert_eq!(probe.started.load(std::sync::atomic::Ordering::SeqCst), 1);

    let events = log.snapshot().await.unwrap();
    let outcomes: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::CodeDispatch(d) => Some(d.error.as_ref().map(|e| e.code.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(outcomes, [Some("DENIED"), Some("DENIED"), None]);
    let last = events.last().unwrap();
    match &last.body {
        EventBody::ToolResult { data, .. } => {
            assert_eq!(data.error.as_ref().unwrap().code.as_str(), "DENIED")
        }
        other => panic!("expected the result last, got {other:?}"),
    }
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn an_uncaught_denial_and_a_blocked_result_are_binding_too() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open_with_policy(&probe).await;
    let r = run_code(&session, "c1", r#"await tools.nap({ text: "secret" });"#).await;
    assert_eq!(code(&r), "DENIED");
    assert!(
        r.text().contains(
            "The script then threw an uncaught exception: ToolDenied: secrets stay secret"
        ),
        "{}",
        r.text()
    );

    let r = run_code(
        &session,
        "c2",
        r#"
        const why = await tools.nap({ text: "hide" }).then(() => "shown", (e) => e.name + " " + e.code);
        return why;
        "#,
    )
    .await;
    assert_eq!(code(&r), "DENIED", "a blocked result is a refusal as well");
    assert!(
        r.text().contains("- c2.sub1 BLOCKED: not for the model"),
        "{}",
        r.text()
    );
    assert!(
        r.text().contains(r#"returned: "ToolDenied BLOCKED""#),
        "{}",
        r.text()
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn run_code_without_denials_is_a_plain_success() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open_with_policy(&probe).await;
    let r = run_code(
        &session,
        "c1",
        r#"return (await tools.nap({ text: "fine" })).text;"#,
    )
    .await;
    assert_eq!(returned(&r), json!("fine"));
    session.shutdown().await;
    harness.shutdown().await;
}
