//! MCP servers' tools run through the real pipeline, against a real MCP server over stdio
//! (`dsh-mcp-test-server`, built from rmcp's server side).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_core::{
    ContentBlock, ExecutionMode, FrozenResult, Hooks, ToolCall, ToolContext, ToolRegistry,
};
use dsh_guards::PermissionRules;
use dsh_mcp::{McpError, McpOptions, McpServers, McpToolSource};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SERVER: &str = env!("CARGO_BIN_EXE_dsh-mcp-test-server");

fn config(extra: Value) -> McpServers {
    let mut server = json!({"command": SERVER, "args": []});
    if let (Some(s), Some(e)) = (server.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    McpServers::from_json(&json!({"mcpServers": {"test": server}}).to_string()).unwrap()
}

fn quick() -> McpOptions {
    McpOptions {
        startup_timeout: Duration::from_secs(20),
        health_check_timeout: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(2),
        ..McpOptions::default()
    }
}

struct Rig {
    source: McpToolSource,
    registry: Arc<ToolRegistry>,
    harness: Harness,
    session: Session,
    log: SessionLog,
}

impl Rig {
    /// A pipeline with the timeout wrapper (without a default of its own).
    async fn start(extra: Value, hooks: Hooks) -> Rig {
        Rig::start_with(extra, hooks, quick(), true).await
    }

    async fn start_with(
        extra: Value,
        hooks: Hooks,
        options: McpOptions,
        timeout_wrapper: bool,
    ) -> Rig {
        let source = McpToolSource::start_with(config(extra), options)
            .await
            .unwrap();
        let registry = Arc::new(ToolRegistry::new());
        source.register(&registry).unwrap();
        // The harness installs the timeout wrapper unless told not to.
        let mut builder = HarnessBuilder::new(registry.clone()).hooks(hooks);
        if !timeout_wrapper {
            builder = builder.without_timeout();
        }
        let harness = builder.build().await.unwrap();
        let log = SessionLog::memory().await.unwrap();
        let session = harness
            .open(log.clone(), SchedulerConfig::default(), None)
            .await
            .unwrap();
        Rig {
            source,
            registry,
            harness,
            session,
            log,
        }
    }

    async fn step(&self, calls: Vec<(&str, &str, Value)>) -> Vec<FrozenResult> {
        let calls = calls
            .into_iter()
            .map(|(id, tool, args)| ToolCall::new(id, tool, args))
            .collect();
        self.session
            .run_step(StepRequest::new(calls))
            .await
            .unwrap()
            .results
    }

    async fn one(&self, tool: &str, args: Value) -> FrozenResult {
        self.step(vec![("c", tool, args)]).await.remove(0)
    }

    async fn pid(&self) -> String {
        let r = self.one("mcp__test__pid", json!({})).await;
        assert!(!r.is_error(), "{}", r.text());
        r.text()
    }

    async fn stop(self) {
        self.session.shutdown().await;
        self.harness.shutdown().await;
        self.source.shutdown().await;
    }
}

fn code(r: &FrozenResult) -> &'static str {
    r.code().map(|c| c.as_str()).unwrap_or("ok")
}

fn running(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.contains(") Z ")
}

/// True once `pid` no longer runs; a SIGKILL takes effect when the process is next
/// scheduled, so a process that was just killed is given a moment to go.
fn gone(pid: &str) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while running(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_tool_is_registered_with_its_schemas_and_placement() {
    let rig = Rig::start(json!({}), Hooks::new()).await;
    let names = rig.registry.names();
    for tool in [
        "echo", "peek", "slow", "hang", "crash", "fail", "image", "add", "pid",
    ] {
        assert!(
            names.contains(&format!("mcp__test__{tool}")),
            "{tool} missing from {names:?}"
        );
    }
    let echo = rig.registry.get("mcp__test__echo").unwrap();
    let echo = echo.definition();
    assert_eq!(echo.description(), "Returns its text");
    assert_eq!(echo.input_schema()["required"], json!(["text"]));
    assert_eq!(echo.execution_mode(), ExecutionMode::Exclusive);
    assert!(!echo.is_concurrency_safe(&json!({"text": "x"})));
    assert_eq!(
        echo.timeout_ms(),
        Some(60_000),
        "a server without a `timeout` gets the default"
    );
    let peek = rig.registry.get("mcp__test__peek").unwrap();
    assert_eq!(peek.definition().execution_mode(), ExecutionMode::Parallel);
    assert!(peek.definition().is_concurrency_safe(&json!({})));
    let add = rig.registry.get("mcp__test__add").unwrap();
    assert_eq!(
        add.definition().output_schema().unwrap()["required"],
        json!(["sum"])
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_through_the_pipeline_and_results_keep_their_kind() {
    let rig = Rig::start(json!({}), Hooks::new()).await;
    let results = rig
        .step(vec![
            ("e", "mcp__test__echo", json!({"text": "hello over stdio"})),
            ("i", "mcp__test__image", json!({})),
            ("a", "mcp__test__add", json!({"a": 2, "b": 3})),
            ("f", "mcp__test__fail", json!({})),
            ("bad", "mcp__test__echo", json!({"text": 7})),
        ])
        .await;
    assert_eq!(code(&results[0]), "ok");
    assert_eq!(results[0].text(), "hello over stdio");

    assert_eq!(
        results[1].content(),
        [
            ContentBlock::text("a pixel:"),
            ContentBlock::Image {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into()
            }
        ]
    );

    assert_eq!(code(&results[2]), "ok", "{}", results[2].text());
    assert_eq!(results[2].value(), Some(&json!({"sum": 5})));
    assert!(
        results[2].text().contains("\"sum\":5"),
        "{}",
        results[2].text()
    );

    assert_eq!(code(&results[3]), "TOOL_ERROR");
    assert_eq!(results[3].text(), "it failed on purpose");

    assert_eq!(
        code(&results[4]),
        "TOOL_INPUT_ERROR",
        "{}",
        results[4].text()
    );

    let events = rig.log.snapshot().await.unwrap();
    let logged = events
        .iter()
        .filter(|e| e.body.type_str() == "tool/result")
        .count();
    assert_eq!(logged, 5);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tools_run_side_by_side_and_the_others_one_at_a_time() {
    let rig = Rig::start(json!({}), Hooks::new()).await;
    rig.step(vec![
        ("p1", "mcp__test__peek", json!({"ms": 400})),
        ("p2", "mcp__test__peek", json!({"ms": 400})),
        ("e1", "mcp__test__echo", json!({"text": "a"})),
        ("e2", "mcp__test__echo", json!({"text": "b"})),
    ])
    .await;
    let stats: Value =
        serde_json::from_str(&rig.one("mcp__test__stats", json!({})).await.text()).unwrap();
    assert_eq!(stats, json!({"peek": 2, "echo": 1}));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_execute_hook_denies_an_mcp_tool_before_the_server_sees_it() {
    let mut hooks = Hooks::new();
    hooks.pre_execute(PermissionRules::from_toml(r#"deny = ["mcp__test__echo"]"#).unwrap());
    let rig = Rig::start(json!({}), hooks).await;
    let r = rig.one("mcp__test__echo", json!({"text": "hi"})).await;
    assert_eq!(code(&r), "DENIED");
    assert!(r.text().contains("mcp__test__echo"), "{}", r.text());
    let stats = rig.one("mcp__test__stats", json!({})).await.text();
    assert_eq!(stats, "{}", "the server never ran echo");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tool_times_out_and_a_server_that_still_answers_is_kept() {
    let rig = Rig::start(json!({"timeout": 300}), Hooks::new()).await;
    let before = rig.pid().await;
    let r = rig.one("mcp__test__slow", json!({"ms": 10_000})).await;
    assert_eq!(code(&r), "TOOL_TIMEOUT", "{}", r.text());
    assert!(r.text().contains("300 ms"), "{}", r.text());
    assert_eq!(rig.pid().await, before, "the server answered its ping");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_timeout_times_out_at_the_default_timeout() {
    // The default is 60 s (a unit test in server.rs checks it); a small default keeps this
    // test fast. The wrapper has no default of its own: only the server's applies.
    let options = McpOptions {
        default_timeout: Duration::from_millis(300),
        ..quick()
    };
    let rig = Rig::start_with(json!({}), Hooks::new(), options, true).await;
    let slow = rig.registry.get("mcp__test__slow").unwrap();
    assert_eq!(slow.definition().timeout_ms(), Some(300));
    let before = rig.pid().await;
    let started = std::time::Instant::now();
    let r = rig.one("mcp__test__slow", json!({"ms": 10_000})).await;
    assert_eq!(code(&r), "TOOL_TIMEOUT", "{}", r.text());
    assert!(r.text().contains("300 ms"), "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(rig.pid().await, before, "the server answered its ping");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_timeout_wrapper_a_call_still_ends_at_the_servers_timeout() {
    let rig = Rig::start_with(json!({"timeout": 300}), Hooks::new(), quick(), false).await;
    let before = rig.pid().await;
    let started = std::time::Instant::now();
    let r = rig.one("mcp__test__slow", json!({"ms": 10_000})).await;
    assert_eq!(code(&r), "TOOL_TIMEOUT", "{}", r.text());
    assert!(r.text().contains("300 ms"), "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(rig.pid().await, before, "the server answered its ping");
    let r = rig
        .one("mcp__test__echo", json!({"text": "still here"}))
        .await;
    assert_eq!(r.text(), "still here");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_structured_results_never_take_each_others_text() {
    let rig = Rig::start(json!({}), Hooks::new()).await;
    let tag = rig.registry.get("mcp__test__tag").unwrap();
    let tag = tag.definition();
    assert_eq!(tag.execution_mode(), ExecutionMode::Parallel);
    let run =
        |label: &'static str| tag.execute(json!({"label": label}), ToolContext::detached(label));
    let json_text = vec![ContentBlock::text(r#"{"ok":true}"#)];

    // One at a time: each result keeps the server's own text.
    let a = run("a").await.unwrap();
    assert_eq!(tag.present(&a), [ContentBlock::text("tagged a")]);
    let b = run("b").await.unwrap();
    assert_eq!(tag.present(&b), [ContentBlock::text("tagged b")]);

    // Both returned before either is presented, with the same structuredContent: the value
    // cannot say which is which, so neither shows the other's text.
    let a = run("a").await.unwrap();
    let b = run("b").await.unwrap();
    assert_eq!(a, b);
    assert_eq!(tag.present(&a), json_text);
    assert_eq!(tag.present(&b), json_text);
    // And the next call on its own has its text again.
    let c = run("c").await.unwrap();
    assert_eq!(tag.present(&c), [ContentBlock::text("tagged c")]);

    // Through the pipeline, side by side, many times over.
    for round in 0..10 {
        let labels = ["a", "b", "c"];
        let results = rig
            .step(
                labels
                    .iter()
                    .map(|l| (*l, "mcp__test__tag", json!({"label": l, "ms": 20})))
                    .collect(),
            )
            .await;
        for (label, r) in labels.iter().zip(&results) {
            assert_eq!(code(r), "ok", "{}", r.text());
            let own = vec![ContentBlock::text(format!("tagged {label}"))];
            assert!(
                r.content() == own.as_slice() || r.content() == json_text.as_slice(),
                "round {round}: call {label} was shown {:?}",
                r.content()
            );
        }
    }
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_times_out_and_is_restarted_on_the_next_call() {
    // Long enough for the next call to wait out the ping (300 ms) and a restart.
    let rig = Rig::start(json!({"timeout": 1500}), Hooks::new()).await;
    let before = rig.pid().await;
    let r = rig.one("mcp__test__hang", json!({})).await;
    assert_eq!(code(&r), "TOOL_TIMEOUT", "{}", r.text());
    let after = rig.pid().await;
    assert_ne!(after, before, "a fresh server answered");
    assert!(gone(&before), "the hung server was killed");
    let r = rig.one("mcp__test__echo", json!({"text": "back"})).await;
    assert_eq!(r.text(), "back");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_a_tool_error_and_is_restarted_on_the_next_call() {
    let rig = Rig::start(json!({}), Hooks::new()).await;
    let before = rig.pid().await;
    let r = rig.one("mcp__test__crash", json!({})).await;
    assert_eq!(code(&r), "TOOL_ERROR", "{}", r.text());
    assert!(
        r.text().contains("MCP server `test` stopped"),
        "{}",
        r.text()
    );
    assert!(
        !r.text().contains("crashing on purpose"),
        "stderr stays out of results: {}",
        r.text()
    );
    let after = rig.pid().await;
    assert_ne!(after, before);
    let r = rig.one("mcp__test__echo", json!({"text": "again"})).await;
    assert_eq!(r.text(), "again");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_env_reaches_the_server_and_shutdown_stops_it() {
    let rig = Rig::start(
        json!({"env": {"DSH_TEST_GREETING": "hi from config"}}),
        Hooks::new(),
    )
    .await;
    let r = rig
        .one("mcp__test__env", json!({"name": "DSH_TEST_GREETING"}))
        .await;
    assert_eq!(r.text(), "hi from config");
    let pid = rig.pid().await;
    assert!(running(&pid));
    let registry = rig.registry.clone();
    rig.stop().await;
    assert!(gone(&pid), "shutdown stopped the server");

    // A shut-down source does not start its servers again.
    let tool = registry.get("mcp__test__pid").unwrap();
    let e = tool
        .definition()
        .execute(json!({}), ToolContext::detached("late"))
        .await
        .unwrap_err();
    assert!(e.message.contains("shut down"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_named_in_the_error() {
    let servers = McpServers::from_json(
        r#"{"mcpServers": {"ghost": {"command": "/nonexistent/mcp-server"}}}"#,
    )
    .unwrap();
    let e = McpToolSource::start_with(servers, quick())
        .await
        .unwrap_err();
    assert!(matches!(e, McpError::Start { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("MCP server `ghost` could not start") && text.contains("/nonexistent"),
        "{text}"
    );

    // Not an MCP server at all: it exits at once.
    let servers =
        McpServers::from_json(r#"{"mcpServers": {"bogus": {"command": "true"}}}"#).unwrap();
    let e = McpToolSource::start_with(servers, quick())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("MCP server `bogus` could not start"),
        "{e}"
    );
}

/// Collects what `tracing` writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

// Current-thread, so that the stderr reader task logs through this thread's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn server_stderr_is_logged_and_never_mixed_into_results() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rig = Rig::start(json!({}), Hooks::new()).await;
    let r = rig.one("mcp__test__echo", json!({"text": "clean"})).await;
    assert_eq!(r.content(), [ContentBlock::text("clean")]);
    rig.stop().await;
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("dsh_mcp::stderr") && logs.contains("dsh-mcp-test-server: ready"),
        "{logs}"
    );
}
