//! `dsh serve --http`: MCP's streamable HTTP transport against the official MCP SDKs (Python
//! `mcp`, TypeScript `@modelcontextprotocol/sdk`), and its door against plain HTTP requests.
//!
//! - Each SDK (`tests/sdk/client_http.py`, `tests/sdk/client_http.cjs`) opens two client
//!   sessions on one `dsh serve --http`: lists the tools, reads and edits a file, is denied a
//!   write, answers an `ask` yes and no by elicitation, calls an upstream tool, makes 10
//!   concurrent safe calls (overlapping); the second session may not edit what only the first
//!   read. Then dsh is stopped by SIGTERM, and the log folder holds one log per session, each
//!   passing `dsh check`.
//! - Refused requests (no token, a wrong token, a foreign `Origin`, a foreign `Host`) get
//!   401/403 and leave nothing in the log folder; a non-loopback bind without a token does not
//!   start (exit 2).
//! - SIGTERM with a call in flight: the call is recorded `ABORTED`, the log passes `dsh check`.
//! - Garbage gets an HTTP answer; a client that closes its stream mid-call cancels the call
//!   (`ABORTED`); the others are still served and every log stays valid.
//!
//! `scripts/mcp-sdks.sh` installs both SDKs (into `target/mcp-sdks`); when it cannot, the test
//! fails, it does not skip. The upstream server is dsh-mcp's test server, served by this test
//! program itself (run with `DSH_CLI_TEST_MCP_SERVER` set), hence no libtest harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use common::serve::{HttpServe, post, post_text, sdks};
use common::{check, log_events};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SERVE: &str = "DSH_CLI_TEST_MCP_SERVER";
const TOKEN: &str = "s3cret-token-for-the-tests";

/// A running `dsh serve --http` and its folders.
struct Server {
    /// First, so dsh is stopped before its folders are removed.
    serve: HttpServe,
    /// `host:port`.
    addr: String,
    ws: PathBuf,
    logs: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `dsh serve --http 127.0.0.1:0` with a token file, a policy (deny `secret*`, ask
    /// `ask-*`) and the test MCP server; waits for its URL on stderr.
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
        std::fs::write(ws.join("other.txt"), "x\n").unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(
            &policy,
            "deny = [\"write_file(secret*)\"]\nask = [\"write_file(ask-*)\"]\n",
        )
        .unwrap();
        let config = dir.path().join("mcp.json");
        std::fs::write(
            &config,
            json!({"mcpServers": {"test": {
                "command": std::env::current_exe().unwrap(),
                "env": {SERVE: "1"},
            }}})
            .to_string(),
        )
        .unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, format!("another-token\n\n{TOKEN}\n")).unwrap();
        let logs = dir.path().join("logs");
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
        command
            .args(["serve", "--http", "127.0.0.1:0"])
            .arg("--workspace")
            .arg(&ws)
            .arg("--log")
            .arg(&logs)
            .arg("--policy")
            .arg(&policy)
            .arg("--mcp")
            .arg(&config)
            .arg("--token-file")
            .arg(&tokens);
        let serve = HttpServe::spawn(command);
        let addr = serve.addr.clone();
        Server {
            serve,
            addr,
            ws,
            logs,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        self.serve.url()
    }

    /// SIGTERM; dsh must exit 0 within 20 s.
    fn stop(&mut self) {
        self.serve.terminate();
    }

    /// The logs in the folder (none if it was never made).
    fn logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.logs)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        logs.sort();
        logs
    }
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
}

fn tool_call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
}

/// Initializes a client session with the token: its `Mcp-Session-Id`.
fn open_session(addr: &str) -> String {
    let auth = bearer();
    let reply = post(addr, &[("Authorization", &auth)], &initialize());
    assert_eq!(reply.status, 200, "initialize: {}", reply.body);
    let id = reply
        .header("mcp-session-id")
        .expect("an Mcp-Session-Id")
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = post(
        addr,
        &[
            ("Authorization", &auth),
            ("Mcp-Session-Id", &id),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &note,
    );
    assert_eq!(reply.status, 202, "initialized: {}", reply.body);
    id
}

/// Runs an SDK client against a fresh server, stops it by SIGTERM, checks every log.
fn drive(program: &str, script: &Path, node_path: Option<&str>) {
    let mut server = Server::start();
    let mut command = Command::new(program);
    command
        .arg(script)
        .arg(server.url())
        .arg(TOKEN)
        .arg(&server.ws)
        .stdin(Stdio::null());
    if let Some(path) = node_path {
        command.env("NODE_PATH", path);
    }
    let out = command.output().expect("the client starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{program} {}: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        script.display(),
        out.status
    );
    server.stop();
    let logs = server.logs();
    assert_eq!(logs.len(), 2, "one log per client session: {logs:?}");
    let mut calls_per_log = Vec::new();
    for log in &logs {
        assert_eq!(log.extension().unwrap(), "jsonl");
        let checked = check(log);
        assert_eq!(
            checked.code,
            0,
            "dsh check {}: {}",
            log.display(),
            checked.stderr
        );
        let events = log_events(log);
        calls_per_log.push(events.iter().filter(|e| e["type"] == "tool/call").count());
    }
    calls_per_log.sort();
    // The second session: one edit. The first: a read and two edits, 3 writes, 1 echo,
    // 10 peeks.
    assert_eq!(calls_per_log, vec![1, 17], "{logs:?}");
}

fn python_sdk_over_http() {
    let python = sdks().python;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/client_http.py");
    drive(&python, &script, None);
}

fn typescript_sdk_over_http() {
    let node_path = sdks().node_path;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/client_http.cjs");
    drive("node", &script, Some(&node_path));
}

/// No token, a wrong token, a foreign Origin, a foreign Host: refused, and nothing of them
/// reaches a log. The same call with the token then does.
fn refused_requests_leave_no_trace() {
    let mut server = Server::start();
    let addr = server.addr.clone();
    let wrong = "Bearer not-the-token";
    let auth = bearer();
    // Without a session: initialize itself is refused.
    let no_token = post(&addr, &[], &initialize());
    assert_eq!(no_token.status, 401, "{}", no_token.body);
    assert_eq!(no_token.header("www-authenticate"), Some("Bearer"));
    assert_eq!(
        post(&addr, &[("Authorization", wrong)], &initialize()).status,
        401
    );
    // With a session opened by a good client, a refused tools/call runs nothing.
    let session = open_session(&addr);
    let write = tool_call(
        7,
        "write_file",
        json!({"path": "planted.txt", "content": "x"}),
    );
    let base = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let with = |extra: &[(&'static str, &str)]| {
        let mut all: Vec<(&str, &str)> = base.to_vec();
        all.extend_from_slice(extra);
        post(&addr, &all, &write)
    };
    type Headers<'a> = Vec<(&'static str, &'a str)>;
    let cases: [(&str, Headers, u16); 5] = [
        ("no token", vec![], 401),
        ("a wrong token", vec![("Authorization", wrong)], 401),
        (
            "a token of another scheme",
            vec![("Authorization", "Basic czNjcmV0")],
            401,
        ),
        (
            "a foreign Origin",
            vec![("Authorization", &auth), ("Origin", "https://evil.example")],
            403,
        ),
        (
            "a foreign Host",
            vec![("Authorization", &auth), ("Host", "evil.example")],
            403,
        ),
    ];
    for (what, extra, status) in &cases {
        let reply = with(extra);
        assert_eq!(reply.status, *status, "{what}: {}", reply.body);
    }
    assert!(
        !server.ws.join("planted.txt").exists(),
        "a refused call ran"
    );
    assert!(
        server.logs().is_empty(),
        "the log folder holds something of refused requests: {:?}",
        server.logs()
    );
    // The same call with the token and a same-site Origin runs, and is the only one logged.
    let origin = format!("http://{addr}");
    let ok = with(&[("Authorization", &auth), ("Origin", &origin)]);
    assert_eq!(ok.status, 200, "{}", ok.body);
    let answer = ok.message();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    server.stop();
    let logs = server.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(check(&logs[0]).code, 0);
    let calls = log_events(&logs[0])
        .into_iter()
        .filter(|e| e["type"] == "tool/call")
        .count();
    assert_eq!(calls, 1, "only the accepted call is recorded");
}

/// `--http 0.0.0.0:0` without a token does not start: exit 2, a message naming the fix, no
/// log folder.
fn a_public_bind_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--http", "0.0.0.0:0"])
        .arg("--workspace")
        .arg(dir.path())
        .arg("--log")
        .arg(&logs)
        .env_remove("DSH_SERVE_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("token") && stderr.contains("--token-file"),
        "{stderr}"
    );
    assert!(!logs.exists(), "nothing is created");
    // With a token from the environment it starts.
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--http", "0.0.0.0:0"])
        .arg("--workspace")
        .arg(dir.path())
        .arg("--log")
        .arg(&logs)
        .env("DSH_SERVE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("serving MCP on http://0.0.0.0:"), "{line}");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
}

/// SIGTERM with a call in flight: it is cancelled and recorded, and the log passes.
fn sigterm_records_the_call_in_flight() {
    let mut server = Server::start();
    let addr = server.addr.clone();
    let session = open_session(&addr);
    let caller = std::thread::spawn({
        let addr = addr.clone();
        let session = session.clone();
        move || {
            let auth = bearer();
            post(
                &addr,
                &[
                    ("Authorization", &auth),
                    ("Mcp-Session-Id", &session),
                    ("MCP-Protocol-Version", "2025-11-25"),
                ],
                &tool_call(3, "mcp__test__slow", json!({"ms": 60000})),
            )
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.logs().iter().any(|l| {
        std::fs::read_to_string(l)
            .unwrap_or_default()
            .contains("mcp__test__slow")
    }) {
        assert!(Instant::now() < deadline, "the call was not recorded");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    server.stop();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopping took {:?}",
        started.elapsed()
    );
    let reply = caller.join().unwrap();
    assert_eq!(reply.status, 200);
    let logs = server.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(check(&logs[0]).code, 0, "{}", check(&logs[0]).stderr);
    let events = log_events(&logs[0]);
    let result = events
        .iter()
        .find(|e| e["type"] == "tool/result")
        .expect("the call in flight has its result");
    let code = result["data"]["error"]["code"].as_str().unwrap_or_default();
    assert!(code.starts_with("ABORTED"), "{result}");
}

/// A client that sends garbage and one that vanishes mid-call: the vanished client's call is
/// cancelled as its stream closes (recorded `ABORTED`), the server stays up for the others,
/// and every log passes `dsh check` once it stops.
fn garbage_and_a_vanished_client_leave_valid_logs() {
    let mut server = Server::start();
    let addr = server.addr.clone();
    let auth = bearer();
    let session = open_session(&addr);
    let headers = [
        ("Authorization", auth.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    // Garbage: not JSON, JSON that is not JSON-RPC, a tools/call with bad params.
    for body in [
        "this is not JSON".to_string(),
        json!({"hello": "world"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": 7}).to_string(),
    ] {
        // Any HTTP answer will do (`post_text` fails on anything else); a crash would not.
        post_text(&addr, &headers, &body);
    }
    // A client that starts a slow call and vanishes.
    let other = open_session(&addr);
    {
        let body = tool_call(9, "mcp__test__slow", json!({"ms": 60000})).to_string();
        let mut stream = TcpStream::connect(&addr).unwrap();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Authorization: {auth}\r\nMcp-Session-Id: {other}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !server.logs().iter().any(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .contains("mcp__test__slow")
        }) {
            assert!(Instant::now() < deadline, "the slow call was not recorded");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Dropped here: the connection closes mid-call.
    }
    // Closing the stream cancels the call: its result is recorded while dsh still serves.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.logs().iter().any(|l| {
        std::fs::read_to_string(l)
            .unwrap_or_default()
            .contains("tool/result")
    }) {
        assert!(
            Instant::now() < deadline,
            "closing the stream did not cancel the call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first client is still served.
    let reply = post(
        &addr,
        &headers,
        &tool_call(6, "read_file", json!({"path": "notes.txt"})),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.message()["result"]["isError"], false);
    server.stop();
    let logs = server.logs();
    assert_eq!(logs.len(), 2, "{logs:?}");
    for log in &logs {
        let checked = check(log);
        assert_eq!(
            checked.code,
            0,
            "dsh check {}: {}",
            log.display(),
            checked.stderr
        );
    }
    let slow = logs
        .iter()
        .flat_map(|l| log_events(l))
        .find(|e| {
            e["type"] == "tool/result"
                && e["data"]["callId"] == "mcp_1"
                && e["data"]["error"].is_object()
        })
        .expect("the vanished client's call has its result");
    let code = slow["data"]["error"]["code"].as_str().unwrap_or_default();
    assert!(code.starts_with("ABORTED"), "{slow}");
}

fn main() {
    if std::env::var_os(SERVE).is_some() {
        std::process::exit(dsh_mcp::test_server::main_exit_code());
    }
    let tests: [(&str, fn()); 6] = [
        ("python_sdk_over_http", python_sdk_over_http),
        ("typescript_sdk_over_http", typescript_sdk_over_http),
        (
            "refused_requests_leave_no_trace",
            refused_requests_leave_no_trace,
        ),
        (
            "a_public_bind_without_a_token_is_refused",
            a_public_bind_without_a_token_is_refused,
        ),
        (
            "sigterm_records_the_call_in_flight",
            sigterm_records_the_call_in_flight,
        ),
        (
            "garbage_and_a_vanished_client_leave_valid_logs",
            garbage_and_a_vanished_client_leave_valid_logs,
        ),
    ];
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                passed += 1;
                eprintln!("test {name} ... ok");
            }
            Err(_) => {
                failed += 1;
                eprintln!("test {name} ... FAILED");
            }
        }
    }
    eprintln!("test result: {passed} passed; {failed} failed");
    if failed > 0 {
        std::process::exit(101);
    }
}
