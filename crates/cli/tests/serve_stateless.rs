//! `dsh serve --http` and clients of the stateless 2026-07-28 era (no `initialize`, the
//! protocol version and capabilities in every request's `_meta`), spoken as raw JSON-RPC over
//! HTTP, beside the 2025-11-25 era on the same port.
//!
//! - A session is named by `_meta` `dev.dsh/session` or the `Dsh-Session` header; read-before-
//!   edit holds across requests of one session and not across sessions; each session has its
//!   own log; unnamed requests of one token share one session; a name never reaches another
//!   token's session; hostile names are refused and create nothing.
//! - A policy `ask` is an `InputRequiredResult` (an elicitation and a signed `requestState`);
//!   the retry's answer allows the call once (accept) or denies it (decline); a tampered,
//!   re-targeted, cross-session or replayed `requestState` is refused and changes nothing.
//! - rmcp's own client, started in that era (`server/discover`, stateless HTTP), does the same
//!   through its high-level calls: it names its session by header, and answers `ask`s with its
//!   elicitation handler, which rmcp drives from the `InputRequiredResult`s.
//! - Every log passes `dsh check` once dsh stops (SIGTERM).
//!
//! - The official Python SDK (`mcp` 2.3.0, `Client(mode="2026-07-28")`) does the same
//!   (`tests/sdk/client_stateless.py`). The pinned TypeScript SDK (1.32.2) knows no version past
//!   2025-11-25, so it has no part here; `scripts/mcp-sdks.sh` installs the SDKs (a failure to
//!   install fails the test).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::serve::{HttpServe, post, sdks};
use common::{check, log_events};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};

const TOKEN_A: &str = "token-of-client-a-for-the-tests";
const TOKEN_B: &str = "token-of-client-b-for-the-tests";
const V2026: &str = "2026-07-28";

/// A running `dsh serve --http` and its folders.
struct Server {
    /// First, so dsh is stopped before its folders are removed.
    serve: HttpServe,
    addr: String,
    ws: PathBuf,
    logs: PathBuf,
    dir: tempfile::TempDir,
}

impl Server {
    /// `dsh serve --http 127.0.0.1:0` with two tokens and a policy asking before
    /// `write_file(ask-*)`.
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
        std::fs::write(ws.join("other.txt"), "x\n").unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, "ask = [\"write_file(ask-*)\"]\n").unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, format!("{TOKEN_A}\n{TOKEN_B}\n")).unwrap();
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
            .arg("--token-file")
            .arg(&tokens);
        let serve = HttpServe::spawn(command);
        let addr = serve.addr.clone();
        Server {
            serve,
            addr,
            ws,
            logs,
            dir,
        }
    }

    /// SIGTERM; dsh must exit 0 within 20 s.
    fn stop(&mut self) {
        self.serve.terminate();
    }

    /// The file names in the log folder (none if it was never made).
    fn logs(&self) -> Vec<String> {
        let mut logs: Vec<String> = std::fs::read_dir(&self.logs)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        logs.sort();
        logs
    }

    /// Stops dsh; every log passes `dsh check`; the log names.
    fn stop_and_check(&mut self) -> Vec<String> {
        self.stop();
        let logs = self.logs();
        for log in &logs {
            let checked = check(&self.logs.join(log));
            assert_eq!(checked.code, 0, "dsh check {log}: {}", checked.stderr);
        }
        logs
    }

    /// One request of the 2026-07-28 era as `token`: `session` in `_meta` (when given),
    /// `headers` besides, the client declaring elicitation when `elicits`.
    fn request(
        &self,
        token: &str,
        session: Option<&str>,
        headers: &[(&str, &str)],
        method: &str,
        mut params: Value,
        elicits: bool,
    ) -> Value {
        let capabilities = if elicits {
            json!({"elicitation": {"form": {}}})
        } else {
            json!({})
        };
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
        });
        if let Some(session) = session {
            meta["dev.dsh/session"] = json!(session);
        }
        params["_meta"] = meta;
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let auth = format!("Bearer {token}");
        let mut all = vec![
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", V2026),
            ("Mcp-Method", method),
        ];
        let name = params["name"].as_str().map(str::to_string);
        if let Some(name) = &name {
            all.push(("Mcp-Name", name));
        }
        all.extend_from_slice(headers);
        post(&self.addr, &all, &body).message()
    }

    /// A `tools/call` of the 2026-07-28 era: the JSON-RPC answer.
    fn call(&self, token: &str, session: Option<&str>, tool: &str, arguments: Value) -> Value {
        self.request(
            token,
            session,
            &[],
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            true,
        )
    }

    /// The retry of a `tools/call` with its `requestState` and the client's answer.
    fn retry(
        &self,
        token: &str,
        session: Option<&str>,
        tool: &str,
        arguments: Value,
        state: &str,
        action: &str,
    ) -> Value {
        self.request(
            token,
            session,
            &[],
            "tools/call",
            json!({
                "name": tool,
                "arguments": arguments,
                "requestState": state,
                "inputResponses": {"approval": {"action": action}},
            }),
            true,
        )
    }
}

/// The text of a `tools/call` result, asserting it is a complete result.
fn result_text(answer: &Value) -> String {
    let result = answer
        .get("result")
        .unwrap_or_else(|| panic!("not a result: {answer}"));
    assert_ne!(result["resultType"], "input_required", "{answer}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn is_error(answer: &Value) -> bool {
    answer["result"]["isError"] == true
}

/// The JSON-RPC error message of an answer that must be an error.
fn error_message(answer: &Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not a JSON-RPC error: {answer}"))
        .to_string()
}

/// The `requestState` of an answer that must be an `InputRequiredResult` asking by
/// elicitation.
fn input_required(answer: &Value) -> String {
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    assert_eq!(
        result["inputRequests"]["approval"]["method"], "elicitation/create",
        "{answer}"
    );
    let message = result["inputRequests"]["approval"]["params"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("write_file"), "{message}");
    result["requestState"]
        .as_str()
        .expect("a requestState")
        .to_string()
}

/// The scopes of the log names `<scope>.jsonl` and `<scope>-<name>.jsonl`.
fn scopes(logs: &[String]) -> Vec<String> {
    let mut scopes: Vec<String> = logs
        .iter()
        .map(|l| {
            l.trim_end_matches(".jsonl")
                .split('-')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    scopes.sort();
    scopes.dedup();
    scopes
}

#[test]
fn named_sessions_keep_read_before_edit_and_logs_apart() {
    let mut server = Server::start();
    // tools/list needs no session.
    let listed = server.request(TOKEN_A, None, &[], "tools/list", json!({}), true);
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in ["read_file", "edit_file", "write_file"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    // Read in session `alpha` (named in _meta), then edit in `alpha` (named by the header)
    // in another request: read-before-edit holds across requests.
    let read = server.call(
        TOKEN_A,
        Some("alpha"),
        "read_file",
        json!({"path": "notes.txt"}),
    );
    assert!(
        !is_error(&read) && result_text(&read).contains("hello"),
        "{read}"
    );
    let edit = server.request(
        TOKEN_A,
        None,
        &[("Dsh-Session", "alpha")],
        "tools/call",
        json!({"name": "edit_file", "arguments":
            {"path": "notes.txt", "old_string": "hello", "new_string": "bye"}}),
        true,
    );
    assert!(!is_error(&edit), "{edit}");
    assert_eq!(
        std::fs::read_to_string(server.ws.join("notes.txt")).unwrap(),
        "bye\n"
    );
    // The same kind of edit in session `beta`, which read nothing: refused.
    let unread = server.call(
        TOKEN_A,
        Some("beta"),
        "edit_file",
        json!({"path": "notes.txt", "old_string": "bye", "new_string": "again"}),
    );
    assert!(is_error(&unread), "{unread}");
    // Token B naming `alpha` reaches its own `alpha`, not A's: it read nothing.
    let foreign = server.call(
        TOKEN_B,
        Some("alpha"),
        "edit_file",
        json!({"path": "notes.txt", "old_string": "bye", "new_string": "stolen"}),
    );
    assert!(is_error(&foreign), "{foreign}");
    // Unnamed requests of token A share one session: a read, then an edit, both unnamed.
    let read = server.call(TOKEN_A, None, "read_file", json!({"path": "other.txt"}));
    assert!(!is_error(&read), "{read}");
    let edit = server.call(
        TOKEN_A,
        None,
        "edit_file",
        json!({"path": "other.txt", "old_string": "x", "new_string": "y"}),
    );
    assert!(!is_error(&edit), "{edit}");
    // Token B's unnamed session is not A's.
    let unread = server.call(
        TOKEN_B,
        None,
        "edit_file",
        json!({"path": "other.txt", "old_string": "y", "new_string": "z"}),
    );
    assert!(is_error(&unread), "{unread}");
    // `_meta` and the header naming two sessions: refused.
    let both = server.request(
        TOKEN_A,
        Some("alpha"),
        &[("Dsh-Session", "beta")],
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "notes.txt"}}),
        true,
    );
    assert!(error_message(&both).contains("two sessions"), "{both}");
    assert_eq!(
        std::fs::read_to_string(server.ws.join("notes.txt")).unwrap(),
        "bye\n"
    );
    assert_eq!(
        std::fs::read_to_string(server.ws.join("other.txt")).unwrap(),
        "y\n"
    );
    let logs = server.stop_and_check();
    // A: alpha, beta, unnamed; B: alpha, unnamed. Two scopes, neither holding a token.
    assert_eq!(logs.len(), 5, "{logs:?}");
    let scopes = scopes(&logs);
    assert_eq!(scopes.len(), 2, "{logs:?}");
    for scope in &scopes {
        assert_eq!(scope.len(), 12, "{logs:?}");
        for suffix in [".jsonl", "-alpha.jsonl"] {
            assert!(logs.contains(&format!("{scope}{suffix}")), "{logs:?}");
        }
    }
    assert!(
        logs.iter().all(|l| !l.contains("token")),
        "a token in a log name: {logs:?}"
    );
    let a_alpha = logs
        .iter()
        .find(|l| {
            l.ends_with("-alpha.jsonl")
                && log_events(&server.logs.join(l))
                    .iter()
                    .any(|e| e["type"] == "tool/call" && e["data"]["name"] == "read_file")
        })
        .expect("A's alpha log holds its read");
    let calls: Vec<String> = log_events(&server.logs.join(a_alpha))
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(calls, ["read_file", "edit_file"], "{a_alpha}");
}

#[test]
fn hostile_session_names_are_refused_and_create_nothing() {
    let mut server = Server::start();
    let long = "x".repeat(65);
    for name in [
        "../x",
        "",
        "a/b",
        "a\u{0}b",
        long.as_str(),
        ".hidden",
        "tab\tname",
        "line\nbreak",
        "é",
        "..",
    ] {
        let answer = server.call(
            TOKEN_A,
            Some(name),
            "write_file",
            json!({"path": "planted.txt", "content": "x"}),
        );
        assert!(
            error_message(&answer).contains("session name"),
            "{name:?}: {answer}"
        );
    }
    // A name that is not a string.
    let mut answer = server.request(
        TOKEN_A,
        None,
        &[],
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "notes.txt"}, "_meta": {}}),
        true,
    );
    assert!(answer.get("result").is_some(), "{answer}");
    answer = post(
        &server.addr,
        &[
            ("Authorization", &format!("Bearer {TOKEN_A}")),
            ("MCP-Protocol-Version", V2026),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "write_file"),
        ],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "write_file", "arguments": {"path": "planted.txt", "content": "x"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientCapabilities": {},
            "dev.dsh/session": ["../x"],
        }}}),
    )
    .message();
    assert!(
        error_message(&answer).contains("dev.dsh/session"),
        "{answer}"
    );
    // By the header too (a header cannot carry NUL or line breaks at all).
    for name in ["../x", "a/b", ".hidden", long.as_str(), "a b"] {
        let answer = server.request(
            TOKEN_A,
            None,
            &[("Dsh-Session", name)],
            "tools/call",
            json!({"name": "write_file", "arguments": {"path": "planted.txt", "content": "x"}}),
            true,
        );
        assert!(
            error_message(&answer).contains("session name"),
            "{name:?}: {answer}"
        );
    }
    assert!(
        !server.ws.join("planted.txt").exists(),
        "a refused call ran"
    );
    // The one call above with no name went to the token's shared session: its log only.
    let logs = server.stop_and_check();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(!logs[0].contains('-'), "{logs:?}");
    let beside: Vec<String> = std::fs::read_dir(server.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        beside.iter().all(|f| !f.ends_with(".jsonl")),
        "a log outside the folder: {beside:?}"
    );
}

#[test]
fn an_ask_is_answered_through_input_required_results() {
    let mut server = Server::start();
    let s = Some("asker");
    // Accept: the call runs, once.
    let yes = json!({"path": "ask-yes.txt", "content": "yes"});
    let asked = server.call(TOKEN_A, s, "write_file", yes.clone());
    let state = input_required(&asked);
    assert!(
        !server.ws.join("ask-yes.txt").exists(),
        "the call ran before the answer"
    );
    let done = server.retry(TOKEN_A, s, "write_file", yes.clone(), &state, "accept");
    assert!(!is_error(&done), "{done}");
    assert_eq!(
        std::fs::read_to_string(server.ws.join("ask-yes.txt")).unwrap(),
        "yes"
    );
    // Replaying the answered state: refused.
    let replay = server.retry(TOKEN_A, s, "write_file", yes, &state, "accept");
    assert!(error_message(&replay).contains("does not wait"), "{replay}");
    // Decline: DENIED.
    let no = json!({"path": "ask-no.txt", "content": "no"});
    let state = input_required(&server.call(TOKEN_A, s, "write_file", no.clone()));
    let denied = server.retry(TOKEN_A, s, "write_file", no, &state, "decline");
    assert!(
        is_error(&denied) && result_text(&denied).starts_with("DENIED"),
        "{denied}"
    );
    assert!(!server.ws.join("ask-no.txt").exists());
    // A state tampered with, put on other arguments, another tool, another session or
    // another token's session: refused, and the call still waits, unchanged.
    let read = server.call(
        TOKEN_A,
        Some("other"),
        "read_file",
        json!({"path": "notes.txt"}),
    );
    assert!(!is_error(&read), "{read}");
    let held = json!({"path": "ask-held.txt", "content": "original"});
    let state = input_required(&server.call(TOKEN_A, s, "write_file", held.clone()));
    let mut flipped = state.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    let forged = format!("dsh1.mcp_1.{}", "0".repeat(64));
    let other_args = json!({"path": "ask-held.txt", "content": "changed"});
    let attempts = [
        (TOKEN_A, s, "write_file", held.clone(), flipped.as_str()),
        (TOKEN_A, s, "write_file", held.clone(), forged.as_str()),
        (TOKEN_A, s, "write_file", held.clone(), "not a state"),
        (TOKEN_A, s, "write_file", other_args, state.as_str()),
        (TOKEN_A, s, "edit_file", held.clone(), state.as_str()),
        (
            TOKEN_A,
            Some("other"),
            "write_file",
            held.clone(),
            state.as_str(),
        ),
        (TOKEN_A, None, "write_file", held.clone(), state.as_str()),
        (TOKEN_B, s, "write_file", held.clone(), state.as_str()),
    ];
    for (token, session, tool, arguments, bad) in attempts {
        let answer = server.retry(token, session, tool, arguments, bad, "accept");
        assert!(
            error_message(&answer).contains("requestState"),
            "{session:?} {tool} {bad}: {answer}"
        );
        assert!(
            !server.ws.join("ask-held.txt").exists(),
            "a refused answer ran the call"
        );
    }
    // The genuine answer still finds its call waiting, with its own arguments.
    let done = server.retry(TOKEN_A, s, "write_file", held, &state, "accept");
    assert!(!is_error(&done), "{done}");
    assert_eq!(
        std::fs::read_to_string(server.ws.join("ask-held.txt")).unwrap(),
        "original"
    );
    // A client that declares no elicitation is not asked: DENIED at once.
    let mute = server.request(
        TOKEN_A,
        s,
        &[],
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "ask-mute.txt", "content": "x"}}),
        false,
    );
    assert!(
        is_error(&mute) && result_text(&mute).starts_with("DENIED"),
        "{mute}"
    );
    let logs = server.stop_and_check();
    // The asker's session and `other`; the refused retries opened nothing (not A's unnamed
    // session, not B's).
    assert_eq!(logs.len(), 2, "{logs:?}");
    let asker = logs
        .iter()
        .find(|l| l.ends_with("-asker.jsonl"))
        .unwrap_or_else(|| panic!("{logs:?}"));
    assert!(logs.iter().any(|l| l.ends_with("-other.jsonl")), "{logs:?}");
    let events = log_events(&server.logs.join(asker));
    let calls = events.iter().filter(|e| e["type"] == "tool/call").count();
    assert_eq!(calls, 4, "yes, no, held, mute");
    let denied = events
        .iter()
        .filter(|e| e["type"] == "tool/result" && e["data"]["error"]["code"] == "DENIED")
        .count();
    assert_eq!(denied, 2, "no, mute");
}

/// rmcp's own client, started in the 2026-07-28 era (`server/discover`, no `initialize`, the
/// stateless HTTP transport): it names its session by the `Dsh-Session` header, reads then
/// edits across requests, and answers `ask`s through its elicitation handler, which rmcp
/// drives from the `InputRequiredResult`s (yes for `ask-yes*`, no otherwise).
mod rmcp_client {
    use super::*;
    use rmcp::model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
        ElicitationAction, Implementation, ProtocolVersion,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};

    #[derive(Clone)]
    struct Answers;

    impl ClientHandler for Answers {
        fn get_info(&self) -> ClientConfig {
            ClientConfig::new(
                ClientCapabilities::builder().enable_elicitation().build(),
                Implementation::new("rmcp-2026", "1"),
            )
        }

        async fn create_elicitation(
            &self,
            request: ElicitRequestParams,
            _context: RequestContext<RoleClient>,
        ) -> Result<ElicitResult, ErrorData> {
            let yes = matches!(&request,
                ElicitRequestParams::FormElicitationParams { message, .. }
                    if message.contains("ask-yes"));
            Ok(ElicitResult::new(if yes {
                ElicitationAction::Accept
            } else {
                ElicitationAction::Decline
            }))
        }
    }

    fn call(tool: &str, arguments: Value) -> CallToolRequestParams {
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object")
        };
        CallToolRequestParams::new(tool.to_string()).with_arguments(arguments)
    }

    fn text(result: &rmcp::model::CallToolResult) -> String {
        serde_json::to_value(&result.content).unwrap()[0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn rmcp_client_of_the_2026_era() {
        let mut server = Server::start();
        let url = format!("http://{}/mcp", server.addr);
        let ws = server.ws.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut headers = std::collections::HashMap::new();
            headers.insert(
                http::HeaderName::from_static("dsh-session"),
                http::HeaderValue::from_static("rmcp"),
            );
            let config = StreamableHttpClientTransportConfig::with_uri(url)
                .auth_header(TOKEN_A)
                .custom_headers(headers);
            let transport = StreamableHttpClientTransport::from_config(config);
            let client = Answers
                .serve_with_lifecycle(
                    transport,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
                .expect("rmcp's client starts in the 2026-07-28 era");
            let tools = client.list_all_tools().await.unwrap();
            assert!(tools.iter().any(|t| t.name == "edit_file"), "{tools:?}");
            let read = client
                .call_tool(call("read_file", json!({"path": "notes.txt"})))
                .await
                .unwrap();
            assert_ne!(read.is_error, Some(true), "{read:?}");
            let edit = client
                .call_tool(call(
                    "edit_file",
                    json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"}),
                ))
                .await
                .unwrap();
            assert_ne!(edit.is_error, Some(true), "{edit:?}");
            let yes = client
                .call_tool(call(
                    "write_file",
                    json!({"path": "ask-yes.txt", "content": "yes"}),
                ))
                .await
                .unwrap();
            assert_ne!(yes.is_error, Some(true), "{yes:?}");
            let no = client
                .call_tool(call(
                    "write_file",
                    json!({"path": "ask-no.txt", "content": "no"}),
                ))
                .await
                .unwrap();
            assert_eq!(no.is_error, Some(true), "{no:?}");
            assert!(text(&no).starts_with("DENIED"), "{no:?}");
            let _ = client.cancel().await;
        });
        assert_eq!(
            std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
            "bye\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("ask-yes.txt")).unwrap(),
            "yes"
        );
        assert!(!ws.join("ask-no.txt").exists());
        let logs = server.stop_and_check();
        assert_eq!(logs.len(), 1, "{logs:?}");
        assert!(logs[0].ends_with("-rmcp.jsonl"), "{logs:?}");
        let calls = log_events(&server.logs.join(&logs[0]))
            .iter()
            .filter(|e| e["type"] == "tool/call")
            .count();
        assert_eq!(calls, 4);
    }
}

/// The official Python SDK (`mcp` 2.3.0) in the 2026-07-28 era: `tests/sdk/client_stateless.py`
/// (a session named by header, read then edit, an ask answered yes and no through its
/// elicitation callback; another named by `_meta`, where the edit is refused).
#[test]
fn python_sdk_of_the_2026_era() {
    let python = sdks().python;
    let mut server = Server::start();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/client_stateless.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{}/mcp", server.addr))
        .arg(TOKEN_A)
        .arg(&server.ws)
        .stdin(Stdio::null())
        .output()
        .expect("the client starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{python} {}: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        script.display(),
        out.status
    );
    assert_eq!(
        std::fs::read_to_string(server.ws.join("ask-yes.txt")).unwrap(),
        "yes"
    );
    assert!(!server.ws.join("ask-no.txt").exists());
    let logs = server.stop_and_check();
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(logs.iter().any(|l| l.ends_with("-py.jsonl")), "{logs:?}");
    assert!(
        logs.iter().any(|l| l.ends_with("-py-meta.jsonl")),
        "{logs:?}"
    );
}
