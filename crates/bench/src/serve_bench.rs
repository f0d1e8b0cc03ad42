//! `dsh serve`'s server side under an rmcp client, in process: JSON-RPC lines over a pipe
//! (the stdio framing without the processes), a session on an in-memory log.
//!
//! - `serve/roundtrip`: one no-op call after another; `p50_us`, `p99_us` per call.
//! - `serve/parallel`: 10 concurrent safe calls that each sleep 100 ms, over one connection;
//!   `wall_ms` (goal ≤ 150).
//! - `serve/http_throughput`: `dsh serve --http`'s server (the guard layer with a bearer token,
//!   rmcp's streamable HTTP service, one session per client on in-memory logs) on a loopback
//!   port; 16 rmcp streamable HTTP clients, each its own MCP session, call a no-op tool one
//!   call after another for 3 s; `calls_per_s`, all clients together.
//! - `serve/gateway_ratio`: one upstream MCP server (dsh's test server, this program started
//!   again over stdio) and one rmcp client; its no-op tool `pid` called directly over the
//!   server's stdio, then as `mcp__up__pid` through `dsh serve`'s server (the call passes the
//!   whole pipeline and an in-memory log, then dsh's MCP client to the same kind of upstream).
//!   `ratio` = p50 through dsh / p50 direct (goal ≤ 1.5), with `direct_p50_us` and
//!   `gateway_p50_us`.
//! - `serve/flood`: `dsh serve --http`'s server under its default session bounds (256 live
//!   sessions, here all for one token; idle timeout 2 s), logs in a folder: 2,000 named
//!   sessions of the 2026-07-28 era (one call each), then 5,000 `initialize`s, 16 clients at a
//!   time over raw HTTP; `rss_mib_after_flood` and `fds_after_flood` (this process's resident
//!   memory and open descriptors), then, once the idle sessions are released,
//!   `rss_mib_after_idle` (goals: descriptors bounded by the session limit, RSS after idle
//!   within 32 MiB of the start, printed as `rss_mib_start`).
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use async_trait::async_trait;
use dsh_core::{ExecutionMode, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig};
use dsh_serve::{DshServer, ElicitingApprover, ServeConfig};
use dsh_session::SessionLog;
use futures::StreamExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const BENCHES: &[Bench] = &[
    Bench {
        name: "serve/roundtrip",
        in_all: true,
        run: roundtrip,
    },
    Bench {
        name: "serve/parallel",
        in_all: true,
        run: parallel,
    },
    Bench {
        name: "serve/http_throughput",
        in_all: true,
        run: http_throughput,
    },
    Bench {
        name: "serve/gateway_ratio",
        in_all: true,
        run: gateway_ratio,
    },
    Bench {
        name: "serve/flood",
        in_all: true,
        run: flood,
    },
];

/// The argument that makes this program dsh's MCP test server (`serve/gateway_ratio`'s
/// upstream).
const TEST_SERVER_ARG: &str = "--dsh-bench-mcp-test-server";

/// Serves the MCP test server on stdio and exits, when this program was started as one.
pub fn mcp_test_server_if_requested() {
    if std::env::args().nth(1).as_deref() == Some(TEST_SERVER_ARG) {
        std::process::exit(dsh_mcp::test_server::main_exit_code());
    }
}

/// Sleeps `ms` (0: returns at once); parallel-safe.
pub(crate) struct Sleep;

#[async_trait]
impl ToolDefinition for Sleep {
    fn name(&self) -> &str {
        "sleep"
    }
    fn description(&self) -> &str {
        "sleeps ms milliseconds"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _: &Value) -> bool {
        true
    }
    async fn execute(&self, input: Value, _: ToolContext) -> Result<Value, ToolFailure> {
        let ms = input["ms"].as_u64().unwrap_or(0);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(json!("ok"))
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

async fn connect() -> RunningService<RoleClient, ()> {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Sleep).expect("register");
    connect_to(registry).await
}

/// An rmcp client of `dsh serve`'s server over a pipe, serving `registry`'s tools through a
/// harness and a session on an in-memory log (kept alive by the server's task).
async fn connect_to(registry: Arc<ToolRegistry>) -> RunningService<RoleClient, ()> {
    let approver = Arc::new(ElicitingApprover::new());
    let harness = HarnessBuilder::new(registry.clone())
        .approval(approver.clone())
        .build()
        .await
        .expect("harness");
    let log = SessionLog::memory().await.expect("log");
    let session = harness
        .open(log, SchedulerConfig::default(), None)
        .await
        .expect("session");
    let server = DshServer::new(session, &registry, approver, ServeConfig::default());
    let (server_end, client_end) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let _harness = harness;
        let _ = server
            .serve(tokio::io::split(server_end), std::future::pending())
            .await;
    });
    ().serve(tokio::io::split(client_end))
        .await
        .expect("client")
}

fn sleep_call(ms: u64) -> CallToolRequestParams {
    let mut args = serde_json::Map::new();
    args.insert("ms".into(), json!(ms));
    CallToolRequestParams::new("sleep").with_arguments(args)
}

fn roundtrip() {
    runtime().block_on(async {
        let client = connect().await;
        for _ in 0..200 {
            let _ = client.call_tool(sleep_call(0)).await;
        }
        let mut samples = Vec::new();
        for _ in 0..2000 {
            let started = Instant::now();
            let answer = client.call_tool(sleep_call(0)).await;
            samples.push(started.elapsed().as_secs_f64() * 1e6);
            assert!(answer.is_ok_and(|r| r.is_error != Some(true)));
        }
        emit(
            "serve/roundtrip",
            "p50_us",
            quantile(&mut samples, 0.5),
            "us",
        );
        emit(
            "serve/roundtrip",
            "p99_us",
            quantile(&mut samples, 0.99),
            "us",
        );
        let _ = client.cancel().await;
    });
}

fn parallel() {
    runtime().block_on(async {
        let client = connect().await;
        let _ = client.call_tool(sleep_call(0)).await;
        let mut walls = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let calls = (0..10).map(|_| client.call_tool(sleep_call(100)));
            let answers = futures::future::join_all(calls).await;
            walls.push(started.elapsed().as_secs_f64() * 1e3);
            assert!(answers.iter().all(|a| a.is_ok()));
        }
        emit("serve/parallel", "wall_ms", quantile(&mut walls, 0.5), "ms");
        let _ = client.cancel().await;
    });
}

fn http_throughput() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    const CLIENTS: usize = 16;
    const TOKEN: &str = "bench-token";
    runtime().block_on(async {
        let registry = Arc::new(ToolRegistry::new());
        registry.register(Sleep).expect("register");
        let approver = Arc::new(ElicitingApprover::new());
        let harness = HarnessBuilder::new(registry)
            .approval(approver.clone())
            .build()
            .await
            .expect("harness");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn({
            let harness = harness.clone();
            async move {
                let make = move || {
                    DshServer::per_client(
                        harness.clone(),
                        SchedulerConfig::default(),
                        approver.clone(),
                        ServeConfig::default(),
                    )
                };
                let guard = dsh_serve::HttpGuard::new().with_tokens([TOKEN]);
                let _ = dsh_serve::serve_http(listener, guard, make, async {
                    let _ = stopped.await;
                })
                .await;
            }
        });
        let url = format!("http://{addr}/mcp");
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN);
            let transport = StreamableHttpClientTransport::from_config(config);
            let client = ().serve(transport).await.expect("an HTTP client session");
            // The first call opens the client's session.
            let answer = client.call_tool(sleep_call(0)).await;
            assert!(answer.is_ok_and(|r| r.is_error != Some(true)));
            clients.push(client);
        }
        let warmup = Duration::from_millis(500);
        let measured = Duration::from_secs(3);
        let started = Instant::now();
        let counts = futures::future::join_all(clients.iter().map(|client| async move {
            let mut calls = 0u64;
            loop {
                let at = started.elapsed();
                if at >= warmup + measured {
                    return calls;
                }
                let answer = client.call_tool(sleep_call(0)).await;
                assert!(answer.is_ok_and(|r| r.is_error != Some(true)));
                if at >= warmup {
                    calls += 1;
                }
            }
        }))
        .await;
        let total: u64 = counts.iter().sum();
        emit(
            "serve/http_throughput",
            "calls_per_s",
            total as f64 / measured.as_secs_f64(),
            "calls/s",
        );
        for client in clients {
            let _ = client.cancel().await;
        }
        let _ = stop.send(());
        let _ = server.await;
        harness.shutdown().await;
    });
}

/// `samples` calls of `tool` (no arguments) after a warm-up; the p50 in microseconds.
async fn call_p50(client: &RunningService<RoleClient, ()>, tool: &str, samples: usize) -> f64 {
    let call = || CallToolRequestParams::new(tool.to_string());
    for _ in 0..100 {
        let _ = client.call_tool(call()).await;
    }
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        let answer = client.call_tool(call()).await;
        times.push(started.elapsed().as_secs_f64() * 1e6);
        assert!(
            answer.as_ref().is_ok_and(|r| r.is_error != Some(true)),
            "{tool} failed: {answer:?}"
        );
    }
    quantile(&mut times, 0.5)
}

fn gateway_ratio() {
    const SAMPLES: usize = 2000;
    let exe = std::env::current_exe().expect("this program's path");
    runtime().block_on(async {
        // Directly: the rmcp client on the upstream's stdio.
        let mut child = tokio::process::Command::new(&exe)
            .arg(TEST_SERVER_ARG)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the upstream test server");
        let stdout = child.stdout.take().expect("its stdout");
        let stdin = child.stdin.take().expect("its stdin");
        let direct = ().serve((stdout, stdin)).await.expect("a direct client");
        let direct_p50 = call_p50(&direct, "pid", SAMPLES).await;
        let _ = direct.cancel().await;
        let _ = child.kill().await;

        // Through dsh: the same client on `dsh serve`'s server, which proxies the upstream.
        let config = json!({"mcpServers": {"up": {
            "command": exe.to_string_lossy(),
            "args": [TEST_SERVER_ARG],
        }}});
        let servers =
            dsh_mcp::McpServers::from_json(&config.to_string()).expect("the upstream's config");
        let upstream = dsh_mcp::McpToolSource::start(servers)
            .await
            .expect("the upstream through dsh");
        let registry = Arc::new(ToolRegistry::new());
        upstream.register(&registry).expect("register its tools");
        let gateway = connect_to(registry).await;
        let gateway_p50 = call_p50(&gateway, &dsh_mcp::tool_name("up", "pid"), SAMPLES).await;
        let _ = gateway.cancel().await;
        upstream.shutdown().await;

        let b = "serve/gateway_ratio";
        emit(b, "direct_p50_us", direct_p50, "us");
        emit(b, "gateway_p50_us", gateway_p50, "us");
        emit(b, "ratio", gateway_p50 / direct_p50, "x");
    });
}

/// This process's resident memory, in MiB (`/proc/self/statm`).
fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(f64::NAN);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// This process's open file descriptors.
fn open_fds() -> f64 {
    std::fs::read_dir("/proc/self/fd").map_or(f64::NAN, |d| d.count() as f64)
}

/// One POST of `body` to `addr`'s `/mcp` as `TOKEN` over a fresh connection, read to its end;
/// whether it was answered at all.
async fn flood_post(addr: std::net::SocketAddr, token: &str, headers: &str, body: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         {headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
    matches!(read, Ok(Ok(_))) && answer.starts_with(b"HTTP/1.1 ")
}

fn flood() {
    use dsh_scheduler::SessionStore;
    use dsh_serve::{ServeLimits, SessionTable, StatelessSessions};
    const TOKEN: &str = "bench-flood-token";
    const NAMED: usize = 2_000;
    const INITIALIZES: usize = 5_000;
    const AT_ONCE: usize = 16;
    let idle = Duration::from_secs(2);
    runtime().block_on(async {
        let logs = tempfile::tempdir().expect("a log folder");
        let registry = Arc::new(ToolRegistry::new());
        registry.register(Sleep).expect("register");
        let approver = Arc::new(ElicitingApprover::new());
        let harness = HarnessBuilder::new(registry)
            .approval(approver.clone())
            .store(SessionStore::Directory {
                root: logs.path().to_path_buf(),
                durability: Default::default(),
            })
            .build()
            .await
            .expect("harness");
        let limits = ServeLimits {
            max_sessions_per_token: ServeLimits::default().max_sessions,
            idle_timeout: idle,
            ..ServeLimits::default()
        };
        let table = SessionTable::new(limits);
        let sessions = StatelessSessions::bounded(
            harness.clone(),
            SchedulerConfig::default(),
            approver,
            ServeConfig::default(),
            table.clone(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn({
            let table = table.clone();
            async move {
                let make = move || sessions.client_server();
                let guard = dsh_serve::HttpGuard::new().with_tokens([TOKEN]);
                let _ = dsh_serve::serve_http_bounded(listener, guard, table, make, async {
                    let _ = stopped.await;
                })
                .await;
            }
        });
        // Warm: one session of each era, then let them go idle and be released.
        let start_rss = {
            let call = named_call("warm");
            flood_post(addr, TOKEN, &named_headers(), &call).await;
            tokio::time::sleep(idle * 3).await;
            rss_mib()
        };
        let named = futures::stream::iter(0..NAMED)
            .map(|n| async move {
                let call = named_call(&format!("flood-{n}"));
                flood_post(addr, TOKEN, &named_headers(), &call).await
            })
            .buffer_unordered(AT_ONCE)
            .filter(|answered| futures::future::ready(*answered))
            .count()
            .await;
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "flood", "version": "1"}}})
        .to_string();
        let initialized = futures::stream::iter(0..INITIALIZES)
            .map(|_| flood_post(addr, TOKEN, "", &initialize))
            .buffer_unordered(AT_ONCE)
            .filter(|answered| futures::future::ready(*answered))
            .count()
            .await;
        assert_eq!(
            named + initialized,
            NAMED + INITIALIZES,
            "every request answered"
        );
        emit("serve/flood", "rss_mib_start", start_rss, "MiB");
        emit("serve/flood", "rss_mib_after_flood", rss_mib(), "MiB");
        emit("serve/flood", "fds_after_flood", open_fds(), "count");
        emit(
            "serve/flood",
            "live_sessions_after_flood",
            table.live() as f64,
            "count",
        );
        let deadline = Instant::now() + idle * 10;
        while table.live() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        emit("serve/flood", "rss_mib_after_idle", rss_mib(), "MiB");
        emit("serve/flood", "fds_after_idle", open_fds(), "count");
        let _ = stop.send(());
        let _ = server.await;
        harness.shutdown().await;
    });
}

fn named_headers() -> String {
    "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: sleep\r\n".into()
}

/// A no-op call of the 2026-07-28 era in the session named `name`.
fn named_call(name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "sleep", "arguments": {"ms": 0}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "flood", "version": "1"},
        "dev.dsh/session": name,
    }}})
    .to_string()
}
