//! run_code through the real pipeline: the script's value, its console, tools as async
//! functions returning presentation and value, errors with their line and column, and no
//! way out but the tools.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use dsh_core::{EventBody, Hooks};
use dsh_scheduler::SchedulerConfig;
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn a_script_returns_json_and_its_console_and_its_sub_calls_are_listed() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(
        &session,
        "c1",
        r#"
        const a = await tools.nap({ text: "hello" });
        console.log("got", a.text, { n: 1 });
        return { text: a.text, value: a.value, id: a.callId, names: Object.keys(tools).sort() };
        "#,
    )
    .await;
    assert_eq!(
        returned(&r),
        json!({
            "text": "hello",
            "value": {"shown": "hello", "slept": 0},
            "id": "c1.sub1",
            "names": ["nap", "solo"],
        }),
        "the script sees the tool's presentation and value, and every tool but run_code"
    );
    let value = r.value().unwrap();
    assert_eq!(value["console"], "got hello {\"n\":1}");
    assert_eq!(
        value["subCalls"],
        json!([{"callId": "c1.sub1", "tool": "nap", "outcome": "ok"}])
    );
    let text = r.text();
    assert!(text.starts_with("returned: {"), "{text}");
    assert!(text.contains("console:\ngot hello"), "{text}");
    assert!(text.contains("- c1.sub1 nap: ok"), "{text}");

    let events = log.snapshot().await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(kinds, ["tool/call", "tool/code-dispatch", "tool/result"]);
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_failed_sub_call_is_a_catchable_tool_error() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(
        &session,
        "c1",
        r#"
        try {
            await tools.nap({ fail: "disk on fire" });
            return "no error";
        } catch (e) {
            return [e instanceof ToolError, e instanceof ToolDenied, e.name, e.code, e.message, e.tool];
        }
        "#,
    )
    .await;
    assert_eq!(
        returned(&r),
        json!([
            true,
            false,
            "ToolError",
            "TOOL_ERROR",
            "disk on fire",
            "nap"
        ])
    );
    assert_eq!(r.value().unwrap()["subCalls"][0]["outcome"], "TOOL_ERROR");

    let bad = run_code(&session, "c2", r#"return await tools.nap({ nope: 1 });"#).await;
    assert_eq!(code(&bad), "TOOL_ERROR");
    assert!(bad.text().contains("TOOL_INPUT_ERROR"), "{}", bad.text());
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn syntax_and_runtime_errors_name_the_models_line_and_column() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(&session, "c1", "const a = 1;\nconst b = ;\nreturn a;").await;
    assert_eq!(code(&r), "TOOL_ERROR");
    assert!(
        r.text().contains("SyntaxError at line 2, column 11"),
        "{}",
        r.text()
    );

    let r = run_code(
        &session,
        "c2",
        "const x = 1;\nfunction f() {\n  throw new Error(\"boom\");\n}\nf();",
    )
    .await;
    assert_eq!(code(&r), "TOOL_ERROR");
    let text = r.text();
    assert!(text.contains("uncaught exception: Error: boom"), "{text}");
    assert!(
        text.contains("run_code:3:"),
        "the throw is on the model's line 3: {text}"
    );

    let r = run_code(&session, "c3", "throw 42;").await;
    assert!(r.text().contains("uncaught exception: 42"), "{}", r.text());
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn the_script_has_no_file_network_or_process_access() {
    let probe = Arc::new(Probe::default());
    let (harness, session, _log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(
        &session,
        "c1",
        r#"
        const kinds = ["require", "process", "fetch", "std", "os", "Deno", "Bun", "XMLHttpRequest",
                       "setTimeout", "WebSocket"].map((n) => typeof globalThis[n]);
        let imported;
        try { await import("os"); imported = "imported"; } catch (e) { imported = e.name; }
        return { kinds, imported, runCode: typeof tools.run_code };
        "#,
    )
    .await;
    let v = returned(&r);
    assert!(
        v["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k == "undefined"),
        "{v}"
    );
    assert_ne!(v["imported"], "imported", "no module can be loaded");
    assert_eq!(
        v["runCode"], "undefined",
        "run_code is not offered to itself"
    );
    session.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test]
async fn a_script_cannot_rebind_the_bridge_to_fake_a_result() {
    let probe = Arc::new(Probe::default());
    let (harness, session, log) = open(
        registry(&probe, test_limits()),
        Hooks::new(),
        SchedulerConfig::default(),
    )
    .await;
    let r = run_code(
        &session,
        "c1",
        r#"
        tools.nap = async () => ({ text: "fake" });
        globalThis.tools = {};
        JSON.parse = () => ({ ok: true, result: "forged" });
        const r = await tools.nap({ text: "real" });
        return r.text;
        "#,
    )
    .await;
    assert_eq!(returned(&r), json!("real"));
    let dispatched = log
        .snapshot()
        .await
        .unwrap()
        .iter()
        .filter(|e| matches!(e.body, EventBody::CodeDispatch(_)))
        .count();
    assert_eq!(dispatched, 1);
    session.shutdown().await;
    harness.shutdown().await;
}
