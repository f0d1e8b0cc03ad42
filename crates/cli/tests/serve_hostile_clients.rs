//! `dsh serve --http` under hostile clients (issue 29): one client cannot lock the others
//! out, and one token cannot act in another token's session. Ordinary clients are the official
//! Python MCP SDK (`tests/sdk/client_one_call.py`); hostile ones are raw HTTP on the loopback,
//! bounded in count and time.
//!
//! - `named_sessions_are_bounded_and_released_when_idle` (break 1): named sessions of the
//!   2026-07-28 era count against `--max-sessions-per-token`; past it a new one is refused with
//!   a JSON-RPC error while the live ones keep working; idle sessions give back their log file
//!   descriptors; a released session reopens from its log with its read-before-edit and its
//!   step count.
//! - `a_session_is_honoured_only_with_its_token` (break 2): token B holding A's
//!   `Mcp-Session-Id` gets 404 for a call, the GET stream and DELETE; A's session is untouched;
//!   no log is named after the session id; logs are 0600 in a 0700 folder.
//! - `stalled_bodies_are_cut_and_do_not_lock_out_others` (break 3): bodies that never end are
//!   answered 408 and closed after `--body-timeout`; past `--max-requests-per-token` a token's
//!   further requests are 429 at once; a client with its own token is served meanwhile.
//! - `initialize_floods_are_bounded_and_reaped` (break 4): `initialize`s past `--max-sessions`
//!   are refused with a JSON-RPC error (both eras count together); idle ones are reaped and
//!   their places come back.
//! - `a_long_silent_call_keeps_its_session` (break 5): a call running past the idle timeout
//!   gets its answer; once idle, the session is reaped and its id is a 404.
//! - `an_ask_goes_on_the_stream_of_its_call` (break 6): a client with no GET stream sees the
//!   approval request on the stream of the `tools/call` that asked, and its answer counts.
//! - `small_protocol_breaks` (break 7): `Origin` ports, token-file comments, the file winning
//!   over `DSH_SERVE_TOKEN`, SIGHUP rotation, `/mcp` only, invalid JSON (-32700), a nameless
//!   `tools/call` (-32602), DELETE answering 204, output schemas without unknown formats.
//!
//! The upstream MCP server is dsh-mcp's test server, served by this test program itself (run
//! with `DSH_CLI_TEST_MCP_SERVER` set), hence no libtest harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod common;

use common::serve::{HttpServe, Reply, post, post_text, sdks};
use common::{check, log_events};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SERVE: &str = "DSH_CLI_TEST_MCP_SERVER";
const TOKEN_A: &str = "token-of-client-a-for-limits";
const TOKEN_B: &str = "token-of-client-b-for-limits";
const V2026: &str = "2026-07-28";

/// A running `dsh serve --http` and its folders.
struct Server {
    /// First, so dsh is stopped before its folders are removed.
    serve: HttpServe,
    addr: String,
    ws: PathBuf,
    logs: PathBuf,
    tokens: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `dsh serve --http 127.0.0.1:0` with tokens A and B, a policy asking before
    /// `write_file(ask-*)`, the test MCP server, and `flags`.
    fn start(flags: &[&str]) -> Server {
        Self::start_with(flags, &format!("{TOKEN_A}\n{TOKEN_B}\n"), None)
    }

    fn start_with(flags: &[&str], token_file: &str, env_token: Option<&str>) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, "ask = [\"write_file(ask-*)\"]\n").unwrap();
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
        std::fs::write(&tokens, token_file).unwrap();
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
            .arg(&tokens)
            .args(flags);
        let mut serve = HttpServe::spawn_with_env(command, env_token);
        let addr = serve.addr.clone();
        let _ = &mut serve;
        Server {
            serve,
            addr,
            ws,
            logs,
            tokens,
            _dir: dir,
        }
    }

    /// The log files in the folder.
    fn logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.logs)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        logs.sort();
        logs
    }

    /// The files dsh has open in the log folder.
    fn open_logs(&self) -> usize {
        let folder = std::fs::canonicalize(&self.logs).unwrap();
        std::fs::read_dir(format!("/proc/{}/fd", self.serve.pid()))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(&folder))
            .count()
    }

    /// SIGTERM (dsh exits 0), then every log passes `dsh check`.
    fn stop_and_check(&mut self) {
        self.serve.terminate();
        for log in self.logs() {
            let checked = check(&log);
            assert_eq!(
                checked.code,
                0,
                "dsh check {}: {}",
                log.display(),
                checked.stderr
            );
        }
    }

    /// One request of the 2026-07-28 era as `token` in session `session`.
    fn call_2026(&self, token: &str, session: &str, tool: &str, arguments: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
            "dev.dsh/session": session,
        }}});
        let auth = format!("Bearer {token}");
        post(
            &self.addr,
            &[
                ("Authorization", &auth),
                ("MCP-Protocol-Version", V2026),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", tool),
            ],
            &body,
        )
        .message()
    }

    /// `initialize` as `token` (the raw 2025-11-25 handshake, `capabilities` declared):
    /// the reply (its `Mcp-Session-Id` when it opened a session).
    fn initialize(&self, token: &str, capabilities: Value) -> Reply {
        let auth = format!("Bearer {token}");
        let reply = post(
            &self.addr,
            &[("Authorization", &auth)],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "raw", "version": "1"}}}),
        );
        if let Some(id) = reply.header("mcp-session-id") {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let done = self.post_in(token, id, &note);
            assert_eq!(done.status, 202, "initialized: {}", done.body);
        }
        reply
    }

    /// A POST in session `id` as `token`.
    fn post_in(&self, token: &str, id: &str, body: &Value) -> Reply {
        let auth = format!("Bearer {token}");
        post(
            &self.addr,
            &[
                ("Authorization", &auth),
                ("Mcp-Session-Id", id),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            body,
        )
    }

    /// A `tools/call` in session `id` as `token`.
    fn call_in(&self, token: &str, id: &str, tool: &str, arguments: Value) -> Reply {
        self.post_in(
            token,
            id,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}),
        )
    }

    /// Runs the official Python SDK client: one session, one call; `(is_error, text)`.
    fn sdk_call(&self, token: &str, tool: &str, arguments: Value) -> (bool, String) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/client_one_call.py");
        let out = Command::new(sdks().python)
            .arg(script)
            .arg(self.serve.url())
            .arg(token)
            .arg(tool)
            .arg(arguments.to_string())
            .output()
            .expect("the Python client starts");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the Python SDK client failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        // The SDK ends its session with DELETE and says so when the answer is not 200/204.
        assert!(
            !stderr.contains("Session termination failed"),
            "DELETE: {stderr}"
        );
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .unwrap_or_else(|| panic!("no RESULT line: {stdout}"));
        let (error, text) = line.split_once(' ').unwrap_or((line, ""));
        (error == "True", text.to_string())
    }
}

/// A JSON-RPC tool result's text and whether it is an error.
fn result_text(message: &Value) -> (bool, String) {
    let result = &message["result"];
    let text = result["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    (result["isError"] == json!(true), text)
}

/// Waits up to `within` for `done`.
fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

fn named_sessions_are_bounded_and_released_when_idle() {
    let mut server = Server::start(&[
        "--max-sessions",
        "40",
        "--max-sessions-per-token",
        "8",
        "--idle-timeout",
        "2",
    ]);
    // Token A fills its places with named sessions, each holding its log.
    for n in 0..8 {
        let answer = server.call_2026(
            TOKEN_A,
            &format!("s{n}"),
            "read_file",
            json!({"path": "notes.txt"}),
        );
        let (error, text) = result_text(&answer);
        assert!(!error && text.contains("hello"), "s{n}: {answer}");
    }
    assert_eq!(server.open_logs(), 8);
    // The ninth is refused with a JSON-RPC error, and opens nothing.
    let refused = server.call_2026(TOKEN_A, "s8", "read_file", json!({"path": "notes.txt"}));
    assert_eq!(refused["error"]["code"], json!(-32001), "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("SESSION_LIMIT"), "{message}");
    assert_eq!(server.logs().len(), 8);
    // The live ones are unharmed: s0 edits what it read.
    let edit = server.call_2026(
        TOKEN_A,
        "s0",
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hello", "new_string": "hullo"}),
    );
    assert!(!result_text(&edit).0, "{edit}");
    // Token B has places of its own.
    let b = server.call_2026(TOKEN_B, "b0", "read_file", json!({"path": "notes.txt"}));
    assert!(!result_text(&b).0, "{b}");
    // Idle: every log descriptor is given back.
    assert!(
        eventually(Duration::from_secs(15), || server.open_logs() == 0),
        "idle sessions still hold {} logs",
        server.open_logs()
    );
    // s0 reopens from its log: its read still counts (read-before-edit) and its steps go on.
    let again = server.call_2026(
        TOKEN_A,
        "s0",
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hullo", "new_string": "hallo"}),
    );
    let (error, text) = result_text(&again);
    assert!(!error, "the reopened session lost its read: {text}");
    assert_eq!(
        std::fs::read_to_string(server.ws.join("notes.txt")).unwrap(),
        "hallo\n"
    );
    // And token A has places again.
    let s8 = server.call_2026(TOKEN_A, "s8", "read_file", json!({"path": "notes.txt"}));
    assert!(!result_text(&s8).0, "{s8}");
    server.stop_and_check();
    let s0 = server
        .logs()
        .into_iter()
        .find(|l| l.to_string_lossy().ends_with("-s0.jsonl"))
        .unwrap();
    // Its steps go on after the reopen (each call its own step, numbers rising), and no call
    // id comes twice.
    let calls: Vec<(u64, String)> = log_events(&s0)
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| {
            (
                e["step"].as_u64().unwrap(),
                e["data"]["callId"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls.windows(2).all(|w| w[0].0 < w[1].0),
        "the steps did not go on after the reopen: {calls:?}"
    );
    let mut ids: Vec<&String> = calls.iter().map(|(_, id)| id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "a call id came twice: {calls:?}");
}

fn a_session_is_honoured_only_with_its_token() {
    let mut server = Server::start(&[]);
    let opened = server.initialize(TOKEN_A, json!({}));
    let id = opened.header("mcp-session-id").unwrap().to_string();
    let read = server.call_in(TOKEN_A, &id, "read_file", json!({"path": "notes.txt"}));
    assert!(!result_text(&read.message()).0, "{}", read.body);
    // B with A's id: a call, the GET stream, DELETE: all 404, nothing done.
    let edit = server.call_in(
        TOKEN_B,
        &id,
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hello", "new_string": "B was here"}),
    );
    assert_eq!(edit.status, 404, "{}", edit.body);
    let get = raw(
        &server.addr,
        &format!(
            "GET /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN_B}\r\n\
             Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-11-25\r\n\
             Accept: text/event-stream\r\nConnection: close\r\n\r\n",
            server.addr
        ),
    );
    assert!(get.starts_with("HTTP/1.1 404"), "{get}");
    let delete = raw(
        &server.addr,
        &format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN_B}\r\n\
             Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n",
            server.addr
        ),
    );
    assert!(delete.starts_with("HTTP/1.1 404"), "{delete}");
    assert_eq!(
        std::fs::read_to_string(server.ws.join("notes.txt")).unwrap(),
        "hello\n"
    );
    // A's session is whole: its read still counts.
    let mine = server.call_in(
        TOKEN_A,
        &id,
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hello", "new_string": "A edits"}),
    );
    assert!(!result_text(&mine.message()).0, "{}", mine.body);
    // The log's name says nothing of the session id; logs and folder are the user's alone.
    let logs = server.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(
        !logs[0].to_string_lossy().contains(&id),
        "the log is named after the session id: {logs:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&logs[0]), 0o600, "log mode");
    assert_eq!(mode(&server.logs), 0o700, "log folder mode");
    server.stop_and_check();
}

/// Sends `request` on a fresh connection and reads the answer to its end (60 s at most).
fn raw(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn stalled_bodies_are_cut_and_do_not_lock_out_others() {
    let server = Server::start(&["--body-timeout", "2", "--max-requests-per-token", "16"]);
    // 40 requests of token A whose bodies never finish.
    let started = Instant::now();
    let mut stalled: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut stream = TcpStream::connect(&server.addr).unwrap();
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN_A}\r\n\
                 Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                 Content-Length: 1000\r\n\r\n{{\"jsonrpc\":",
                server.addr
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            stream
        })
        .collect();
    // A client with its own token is served meanwhile (the official SDK).
    let (error, text) = server.sdk_call(TOKEN_B, "read_file", json!({"path": "notes.txt"}));
    assert!(!error && text.contains("hello"), "{text}");
    // Every stalled request is answered (429 past the token's bound, 408 after the body
    // timeout) and its connection closed, well before the 30 s of the old header timeout.
    let mut statuses = Vec::new();
    for stream in &mut stalled {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        statuses.push(
            answer
                .split_whitespace()
                .nth(1)
                .unwrap_or("none")
                .to_string(),
        );
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(15),
        "{elapsed:?}: {statuses:?}"
    );
    let timed_out = statuses.iter().filter(|s| *s == "408").count();
    let too_many = statuses.iter().filter(|s| *s == "429").count();
    assert_eq!(timed_out + too_many, 40, "{statuses:?}");
    assert!((1..=16).contains(&timed_out), "{statuses:?}");
    // An unauthenticated request is refused before its body is read.
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000000\r\n\r\n",
        server.addr
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut first = String::new();
    BufReader::new(stream).read_line(&mut first).unwrap();
    assert!(first.starts_with("HTTP/1.1 401"), "{first}");
}

fn initialize_floods_are_bounded_and_reaped() {
    let server = Server::start(&[
        "--max-sessions",
        "12",
        "--max-sessions-per-token",
        "12",
        "--idle-timeout",
        "2",
    ]);
    // A named session counts too (both eras together).
    let named = server.call_2026(TOKEN_B, "n0", "read_file", json!({"path": "notes.txt"}));
    assert!(!result_text(&named).0, "{named}");
    let mut ids = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..30 {
        let reply = server.initialize(TOKEN_A, json!({}));
        match reply.header("mcp-session-id") {
            Some(id) => ids.push(id.to_string()),
            None => refused.push(reply),
        }
    }
    assert_eq!(ids.len(), 11, "one place went to the named session");
    for reply in &refused {
        let message = reply.message();
        assert_eq!(message["error"]["code"], json!(-32001), "{}", reply.body);
    }
    // The sessions already live are unharmed.
    let live = server.call_in(TOKEN_A, &ids[0], "read_file", json!({"path": "notes.txt"}));
    assert!(!result_text(&live.message()).0, "{}", live.body);
    // Idle (2 s, untouched: any request would be activity): reaped, their ids unknown now,
    // and the places come back.
    std::thread::sleep(Duration::from_secs(5));
    let reaped = server.call_in(TOKEN_A, &ids[1], "read_file", json!({"path": "notes.txt"}));
    assert_eq!(
        reaped.status, 404,
        "an idle session was not reaped: {}",
        reaped.body
    );
    let reply = server.initialize(TOKEN_A, json!({}));
    assert!(reply.header("mcp-session-id").is_some(), "{}", reply.body);
}

fn a_long_silent_call_keeps_its_session() {
    let server = Server::start(&["--idle-timeout", "1"]);
    let opened = server.initialize(TOKEN_A, json!({}));
    let id = opened.header("mcp-session-id").unwrap().to_string();
    // A call that runs silently 4 idle timeouts long (no progress token): it gets its answer.
    let slow = server.call_in(TOKEN_A, &id, "mcp__test__peek", json!({"ms": 4000}));
    let (error, text) = result_text(&slow.message());
    assert!(!error, "the long call lost its answer: {text}");
    // The same through the official SDK.
    let (error, text) = server.sdk_call(TOKEN_B, "mcp__test__peek", json!({"ms": 3000}));
    assert!(!error, "{text}");
    // Then, idle (1 s, untouched), the session is reaped: its id is a 404, never a 500.
    std::thread::sleep(Duration::from_secs(4));
    let reaped = server.call_in(TOKEN_A, &id, "read_file", json!({"path": "notes.txt"}));
    assert_eq!(
        reaped.status, 404,
        "the idle session was not reaped: {}",
        reaped.body
    );
}

/// Reads SSE events from `reader` until one whose JSON `pick` accepts (30 s at most).
fn next_event(reader: &mut BufReader<TcpStream>, pick: impl Fn(&Value) -> bool) -> Value {
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("the stream goes on");
        assert!(n > 0, "the stream ended");
        if let Some(data) = line.trim().strip_prefix("data:")
            && let Ok(value) = serde_json::from_str::<Value>(data.trim())
            && pick(&value)
        {
            return value;
        }
    }
}

fn an_ask_goes_on_the_stream_of_its_call() {
    let server = Server::start(&[]);
    let opened = server.initialize(TOKEN_A, json!({"elicitation": {"form": {}}}));
    let id = opened.header("mcp-session-id").unwrap().to_string();
    // No GET stream: the call's own POST stream is all this client reads.
    let body = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "ask-me.txt", "content": "ok"}}})
    .to_string();
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN_A}\r\n\
         Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let ask = next_event(&mut reader, |v| v["method"] == "elicitation/create");
    assert!(
        ask["params"]["message"]
            .as_str()
            .unwrap()
            .contains("ask-me.txt"),
        "{ask}"
    );
    let answer =
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {}}});
    let posted = server.post_in(TOKEN_A, &id, &answer);
    assert_eq!(posted.status, 202, "{}", posted.body);
    let result = next_event(&mut reader, |v| v["id"] == json!(41));
    let (error, text) = result_text(&result);
    assert!(!error, "{text}");
    assert_eq!(
        std::fs::read_to_string(server.ws.join("ask-me.txt")).unwrap(),
        "ok"
    );
}

fn small_protocol_breaks() {
    let mut server = Server::start_with(
        &[],
        &format!("# the tokens of the team\n\n{TOKEN_A}\n  # {TOKEN_B}\nretired-token\n"),
        Some("env-token-beside-the-file"),
    );
    let port = server.addr.rsplit(':').next().unwrap().to_string();
    let auth_a = format!("Bearer {TOKEN_A}");
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    // An Origin without a port is port 80's, not this server's.
    for origin in ["http://localhost", "https://127.0.0.1"] {
        let reply = post(
            &server.addr,
            &[("Authorization", &auth_a), ("Origin", origin)],
            &ping,
        );
        assert_eq!(reply.status, 403, "{origin}: {}", reply.body);
    }
    let own = format!("http://localhost:{port}");
    let reply = post(
        &server.addr,
        &[("Authorization", &auth_a), ("Origin", &own)],
        &ping,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Comment lines are not tokens; with the file, DSH_SERVE_TOKEN is not one either.
    for token in [
        "# the tokens of the team",
        &format!("# {TOKEN_B}"),
        "env-token-beside-the-file",
    ] {
        let auth = format!("Bearer {token}");
        let reply = post(&server.addr, &[("Authorization", &auth)], &ping);
        assert_eq!(reply.status, 401, "{token:?}: {}", reply.body);
    }
    // A rotation: the file is rewritten and SIGHUP makes it the truth.
    let retired = "Bearer retired-token";
    assert_eq!(
        post(&server.addr, &[("Authorization", retired)], &ping).status,
        200
    );
    std::fs::write(&server.tokens, format!("{TOKEN_A}\nfresh-token\n")).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &server.serve.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    assert!(
        eventually(Duration::from_secs(10), || {
            post(&server.addr, &[("Authorization", retired)], &ping).status == 401
        }),
        "the retired token still works after SIGHUP"
    );
    let fresh = post(
        &server.addr,
        &[("Authorization", "Bearer fresh-token")],
        &ping,
    );
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    // MCP on /mcp only.
    let elsewhere = raw(
        &server.addr,
        &format!(
            "POST /other HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth_a}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{ping}",
            server.addr,
            ping.to_string().len()
        ),
    );
    assert!(elsewhere.starts_with("HTTP/1.1 404"), "{elsewhere}");
    // Invalid JSON: 400 and a JSON-RPC parse error.
    let garbage = post_text(&server.addr, &[("Authorization", &auth_a)], "{not json");
    assert_eq!(garbage.status, 400, "{}", garbage.body);
    let parsed: Value = serde_json::from_str(&garbage.body).expect("a JSON body");
    assert_eq!(parsed["error"]["code"], json!(-32700), "{parsed}");
    // tools/call without a name: invalid params.
    let opened = server.initialize(TOKEN_A, json!({}));
    let id = opened.header("mcp-session-id").unwrap().to_string();
    let nameless = server.post_in(
        TOKEN_A,
        &id,
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"arguments": {}}}),
    );
    assert_eq!(
        nameless.message()["error"]["code"],
        json!(-32602),
        "{}",
        nameless.body
    );
    // DELETE ends the session: 204, then the id is unknown.
    let delete = raw(
        &server.addr,
        &format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth_a}\r\n\
             Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n",
            server.addr
        ),
    );
    assert!(delete.starts_with("HTTP/1.1 204"), "{delete}");
    let after = server.call_in(TOKEN_A, &id, "read_file", json!({"path": "notes.txt"}));
    assert_eq!(after.status, 404, "{}", after.body);
    // The official SDK: output schemas without unknown formats, and a clean DELETE.
    let (error, text) = server.sdk_call(TOKEN_A, "read_file", json!({"path": "notes.txt"}));
    assert!(!error, "{text}");
    server.stop_and_check();
}

fn main() {
    common::runner::main(&[
        (
            "named_sessions_are_bounded_and_released_when_idle",
            named_sessions_are_bounded_and_released_when_idle,
        ),
        (
            "a_session_is_honoured_only_with_its_token",
            a_session_is_honoured_only_with_its_token,
        ),
        (
            "stalled_bodies_are_cut_and_do_not_lock_out_others",
            stalled_bodies_are_cut_and_do_not_lock_out_others,
        ),
        (
            "initialize_floods_are_bounded_and_reaped",
            initialize_floods_are_bounded_and_reaped,
        ),
        (
            "a_long_silent_call_keeps_its_session",
            a_long_silent_call_keeps_its_session,
        ),
        (
            "an_ask_goes_on_the_stream_of_its_call",
            an_ask_goes_on_the_stream_of_its_call,
        ),
        ("small_protocol_breaks", small_protocol_breaks),
    ]);
}
