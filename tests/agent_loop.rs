//! The agent-loop example (`examples/agent_loop.rs`) end to end, as a user runs it: its binary
//! against a local HTTP server that streams a recorded conversation
//! (`tests/fixtures/agent_loop.json`) in OpenAI's chunk format, and records every request, so
//! that what the model was sent back can be checked. No model is reachable from CI.
//!
//! `cargo test` builds the examples before it runs this; `cargo test --test agent_loop` alone
//! does not, so build it first then (`cargo build -p dsh --example agent_loop`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh::core::EventBody;
use dsh::core::event::ToolCallData;
use dsh::formats::{Format, render_transcript};
use dsh::session::check::{Violation, check_file};
use dsh::session::replay::replay_file;
use dsh::session::{Durability, SessionLog};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// Every wait is bounded by this: generous, so a loaded machine does not fail the test.
const WAIT: Duration = Duration::from_secs(60);

const PROMPT: &str = "Replace brown with red in notes.txt and store the token.";
const POLICY: &str = "deny = [\"write(secrets/**)\"]\n";

fn recorded_turns() -> Vec<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_loop.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_array().unwrap().clone())
        .collect()
}

/// One response of the server: its chunks (a JSON string is sent as raw event text), and
/// where it stops sending, holding the connection open (a stalled model) or closing it (a
/// dropped connection), if it does.
#[derive(Clone)]
struct Reply {
    chunks: Vec<Value>,
    stall_after: Option<usize>,
    cut_after: Option<usize>,
}

impl Reply {
    fn whole(chunks: Vec<Value>) -> Reply {
        Reply {
            chunks,
            stall_after: None,
            cut_after: None,
        }
    }
}

#[derive(Debug, PartialEq)]
enum Heard {
    /// Request `n` (from 0) arrived and was recorded.
    Request(usize),
    /// Reply `n` stopped sending.
    Stalled(usize),
}

/// A chat-completions server that replays `script`, one reply per request, in order.
struct ModelServer {
    base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    heard: mpsc::UnboundedReceiver<Heard>,
}

impl ModelServer {
    async fn start(script: Vec<Reply>) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (tx, heard) = mpsc::unbounded_channel();
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (recorded, tx, script) = (recorded.clone(), tx.clone(), script.clone());
                tokio::spawn(serve(stream, recorded, tx, script));
            }
        });
        ModelServer {
            base_url,
            requests,
            heard,
        }
    }

    async fn wait_for(&mut self, what: Heard) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let next = tokio::time::timeout_at(deadline, self.heard.recv())
                .await
                .unwrap_or_else(|_| panic!("the model server never heard {what:?}"));
            if next.as_ref() == Some(&what) {
                return;
            }
            assert!(next.is_some(), "the server stopped before {what:?}");
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(
    mut stream: TcpStream,
    recorded: Arc<Mutex<Vec<Value>>>,
    tx: mpsc::UnboundedSender<Heard>,
    script: Vec<Reply>,
) {
    let Some((head, body)) = read_request(&mut stream).await else {
        return;
    };
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "unexpected request: {head}"
    );
    let request: Value = serde_json::from_slice(&body).expect("the request body is JSON");
    let n = {
        let mut all = recorded.lock().unwrap();
        all.push(request);
        all.len() - 1
    };
    let _ = tx.send(Heard::Request(n));
    let Some(reply) = script.get(n) else {
        let body = "no more recorded turns";
        let _ = stream
            .write_all(
                format!(
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        return;
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                connection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for (i, chunk) in reply.chunks.iter().enumerate() {
        if reply.stall_after == Some(i) {
            let _ = stream.flush().await;
            let _ = tx.send(Heard::Stalled(n));
            // The connection stays open and silent until the client goes away.
            let mut sink = [0u8; 64];
            while matches!(stream.read(&mut sink).await, Ok(k) if k > 0) {}
            return;
        }
        if reply.cut_after == Some(i) {
            let _ = stream.shutdown().await;
            return;
        }
        let event = match chunk {
            Value::String(raw) => raw.clone(),
            event => format!("data: {event}\n\n"),
        };
        if stream.write_all(event.as_bytes()).await.is_err() {
            return;
        }
        let _ = stream.flush().await;
    }
    let _ = stream.write_all(b"data: [DONE]\n\n").await;
    let _ = stream.shutdown().await;
}

/// The request's head and its `content-length` body.
async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut piece = [0u8; 8192];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut piece).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&piece[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("the request has a content-length");
    let mut body = buf[end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut piece).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&piece[..n]);
    }
    Some((head, body))
}

/// The example's binary, beside this test's: `target/<profile>/deps/agent_loop-…` →
/// `target/<profile>/examples/agent_loop`.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let bin = profile
        .join("examples")
        .join(format!("agent_loop{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the agent_loop example is not built at {}: `cargo test` builds the examples, \
         `cargo test --test agent_loop` alone does not (run `cargo build -p dsh --example \
         agent_loop` first)",
        bin.display()
    );
    bin
}

struct Setup {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    log: PathBuf,
    policy: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(workspace.join("secrets")).unwrap();
    std::fs::write(workspace.join("notes.txt"), "the quick brown fox\n").unwrap();
    std::fs::write(workspace.join("todo.txt"), "1. write tests\n").unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    Setup {
        log: dir.path().join("session.jsonl"),
        workspace,
        policy,
        _dir: dir,
    }
}

fn start_example(setup: &Setup, server: &ModelServer, prompt: Option<&str>) -> Child {
    let mut cmd = Command::new(example_binary());
    cmd.env("OPENAI_BASE_URL", &server.base_url)
        .env_remove("OPENAI_API_KEY")
        .arg("--model")
        .arg("test-model")
        .arg("--workspace")
        .arg(&setup.workspace)
        .arg("--log")
        .arg(&setup.log)
        .arg("--policy")
        .arg(&setup.policy)
        .arg("--max-turns")
        .arg("5")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(p) = prompt {
        cmd.arg(p);
    }
    cmd.spawn().unwrap()
}

async fn exited(child: Child) -> Output {
    tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("the example finishes")
        .unwrap()
}

async fn finished(child: Child) -> Output {
    let out = exited(child).await;
    assert!(
        out.status.success(),
        "the example failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().unwrap().clone()
}

/// The `tool` message answering `call_id`.
fn tool_message(messages: &[Value], call_id: &str) -> String {
    messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool message for {call_id} in {messages:#?}"))["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The ids of the calls of the last assistant message.
fn last_call_ids(messages: &[Value]) -> Vec<String> {
    let assistant = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .expect("an assistant message");
    assistant["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_turns_run_the_calls_and_send_the_model_their_results() {
    let setup = setup();
    let turns = recorded_turns();
    let server = ModelServer::start(turns.iter().cloned().map(Reply::whole).collect()).await;
    let out = finished(start_example(&setup, &server, Some(PROMPT))).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Changed brown to red in notes.txt"),
        "the final answer is printed: {stdout}"
    );

    // The edit happened; the write the policy denies did not.
    assert_eq!(
        std::fs::read_to_string(setup.workspace.join("notes.txt")).unwrap(),
        "the quick red fox\n"
    );
    assert!(!setup.workspace.join("secrets/token.txt").exists());

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "one request a turn");
    let first = &requests[0];
    assert_eq!(first["model"], "test-model");
    assert_eq!(first["stream"], true);
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for name in ["read_file", "edit_file", "write_file", "word_count"] {
        assert!(tools.contains(&name), "{name} offered: {tools:?}");
    }
    let m0 = messages(first);
    assert_eq!(m0.len(), 2);
    assert_eq!(m0[0]["role"], "system");
    assert_eq!(m0[1], json!({"role": "user", "content": PROMPT}));

    // Turn 2's request carries turn 1's reads.
    let m1 = messages(&requests[1]);
    assert_eq!(m1[..2], m0[..], "the conversation only grows");
    assert_eq!(last_call_ids(&m1), ["call_r1", "call_r2"]);
    assert!(tool_message(&m1, "call_r1").contains("the quick brown fox"));
    assert!(tool_message(&m1, "call_r2").contains("1. write tests"));

    // Turn 3's request carries turn 2's edit, the denial and the typed tool's output.
    let m2 = messages(&requests[2]);
    assert_eq!(m2[..m1.len()], m1[..], "the conversation only grows");
    assert_eq!(last_call_ids(&m2), ["call_e1", "call_w1", "call_c1"]);
    let edit = tool_message(&m2, "call_e1");
    assert!(
        !edit.starts_with("DENIED") && !edit.starts_with("TOOL_") && !edit.starts_with("ABORTED"),
        "the edit succeeded: {edit}"
    );
    let denied = tool_message(&m2, "call_w1");
    assert!(denied.starts_with("DENIED: "), "{denied}");
    let count = tool_message(&m2, "call_c1");
    assert!(count.contains(r#""words":4"#), "{count}");

    // The log passes `dsh check`, and replaying it rebuilds exactly what the model was sent.
    check_file(&setup.log).unwrap_or_else(|v| panic!("{v}\n{}", log_text(&setup.log)));
    let transcript = replay_file(&setup.log).unwrap();
    let steps: Vec<(u64, usize)> = transcript
        .steps
        .iter()
        .map(|s| (s.step, s.calls.len()))
        .collect();
    assert_eq!(steps, [(1, 2), (2, 3)]);
    assert_eq!(render_transcript(Format::OpenAi, &transcript), m2[2..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_stream_it_resumes_from_the_log() {
    let setup = setup();
    let turns = recorded_turns();
    // Turn 2 stops right after the second call's block starts: the edit (the first block)
    // is complete, so it has been pushed and runs, while the model seems to write on.
    let stall = turns[1]
        .iter()
        .position(|c| c["choices"][0]["delta"]["tool_calls"][0]["index"] == 1)
        .unwrap()
        + 1;
    let mut first = ModelServer::start(vec![
        Reply::whole(turns[0].clone()),
        Reply {
            chunks: turns[1].clone(),
            stall_after: Some(stall),
            cut_after: None,
        },
    ])
    .await;
    let mut child = start_example(&setup, &first, Some(PROMPT));
    first.wait_for(Heard::Stalled(1)).await;
    // The edit's result is in the log before the kill, so the edit is part of what the
    // resumed conversation must show.
    let deadline = tokio::time::Instant::now() + WAIT;
    while !log_text(&setup.log)
        .lines()
        .any(|l| l.contains("tool/result") && l.contains("call_e1"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the edit's result never reached the log:\n{}",
            log_text(&setup.log)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().await.unwrap(); // SIGKILL
    assert_eq!(
        std::fs::read_to_string(setup.workspace.join("notes.txt")).unwrap(),
        "the quick red fox\n"
    );
    // Whatever the kill left in flight is what recovery must close.
    let left_open: Vec<String> = match check_file(&setup.log) {
        Ok(_) => Vec::new(),
        Err(Violation::NeedsRecovery { open_calls, .. }) => open_calls,
        Err(v) => panic!("the killed run's log is broken beyond recovery: {v}"),
    };

    // The resumed model asks for one more call, then answers.
    let resumed_turn = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_c2", "type": "function", "function": {"name": "word_count", "arguments": "{\"path\":\"todo.txt\"}"}}]}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ];
    let mut second = ModelServer::start(vec![
        Reply::whole(resumed_turn),
        Reply::whole(turns[2].clone()),
    ])
    .await;
    // No prompt this time: a resume reads it from beside the log.
    let child = start_example(&setup, &second, None);
    second.wait_for(Heard::Request(0)).await;
    let out = finished(child).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("resuming"), "{stderr}");

    // The resumed run's first request is the conversation rebuilt from the log: exactly the
    // killed run's turn-2 request (prompt, turn 1's reads), then the edit and its result.
    let before = first.requests();
    assert_eq!(before.len(), 2);
    let seen = messages(&before[1]);
    let after = second.requests();
    assert_eq!(after.len(), 2);
    let rebuilt = messages(&after[0]);
    assert_eq!(rebuilt[..seen.len()], seen[..]);
    assert!(tool_message(&rebuilt, "call_r1").contains("the quick brown fox"));
    assert!(tool_message(&rebuilt, "call_r2").contains("1. write tests"));
    assert_eq!(last_call_ids(&rebuilt), ["call_e1"]);
    let edit = tool_message(&rebuilt, "call_e1");
    assert!(
        !edit.starts_with("DENIED") && !edit.starts_with("TOOL_"),
        "{edit}"
    );
    for id in &left_open {
        assert!(tool_message(&rebuilt, id).starts_with("ABORTED"), "{id}");
    }
    // The call the model was still writing when the stream stopped never ran.
    assert!(!setup.workspace.join("secrets/token.txt").exists());
    assert!(!rebuilt.iter().any(|m| m["tool_call_id"] == "call_w1"));
    let next = messages(&after[1]);
    assert!(tool_message(&next, "call_c2").contains(r#""words":3"#));

    // The final log passes `dsh check`; the resumed step continued the numbering.
    check_file(&setup.log).unwrap_or_else(|v| panic!("{v}\n{}", log_text(&setup.log)));
    let transcript = replay_file(&setup.log).unwrap();
    let steps: Vec<(u64, Vec<&str>)> = transcript
        .steps
        .iter()
        .map(|s| (s.step, s.calls.iter().map(|c| c.call_id.as_str()).collect()))
        .collect();
    assert_eq!(
        steps,
        [
            (1, vec!["call_r1", "call_r2"]),
            (2, vec!["call_e1"]),
            (3, vec!["call_c2"])
        ]
    );
    for id in &left_open {
        let result = transcript
            .steps
            .iter()
            .flat_map(|s| &s.results)
            .find(|r| &r.call_id == id)
            .unwrap();
        assert_eq!(result.error.as_ref().unwrap().code.as_str(), "ABORTED");
    }
    assert_eq!(
        render_transcript(Format::OpenAi, &transcript),
        messages(&after[1])[2..]
    );
}

/// The index of the first chunk of `turn` that starts call block `index`.
fn block_start(turn: &[Value], index: u64) -> usize {
    turn.iter()
        .position(|c| c["choices"][0]["delta"]["tool_calls"][0]["index"] == index)
        .unwrap()
}

fn prompt_file(log: &Path) -> PathBuf {
    PathBuf::from(format!("{}.prompt", log.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_fails_the_run_and_a_rerun_resumes() {
    let setup = setup();
    let turns = recorded_turns();
    // Turn 2's connection closes right after the second block starts: the edit was whole,
    // the write was not.
    let cut = block_start(&turns[1], 1) + 1;
    let first = ModelServer::start(vec![
        Reply::whole(turns[0].clone()),
        Reply {
            chunks: turns[1].clone(),
            stall_after: None,
            cut_after: Some(cut),
        },
    ])
    .await;
    let out = exited(start_example(&setup, &first, Some(PROMPT))).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        (stderr.contains("the response ended before its last event")
            || stderr.contains("the response broke off"))
            && stderr.contains("run the same command again"),
        "a clear message: {stderr}"
    );
    // The log is valid as it stands: the whole block ran and has its result, the cut one
    // never ran and is not in the log.
    check_file(&setup.log).unwrap_or_else(|v| panic!("{v}\n{}", log_text(&setup.log)));
    let transcript = replay_file(&setup.log).unwrap();
    let last = transcript.steps.last().unwrap();
    assert_eq!(last.step, 2);
    assert_eq!(last.calls.len(), 1);
    assert_eq!(last.calls[0].call_id, "call_e1");
    assert!(last.results[0].error.is_none(), "{:?}", last.results[0]);
    assert_eq!(
        std::fs::read_to_string(setup.workspace.join("notes.txt")).unwrap(),
        "the quick red fox\n"
    );
    assert!(!setup.workspace.join("secrets/token.txt").exists());

    // Run again: the model is sent the conversation up to the edit's result, and answers.
    let second = ModelServer::start(vec![Reply::whole(turns[2].clone())]).await;
    finished(start_example(&setup, &second, None)).await;
    let rebuilt = messages(&second.requests()[0]);
    assert_eq!(last_call_ids(&rebuilt), ["call_e1"]);
    assert_eq!(render_transcript(Format::OpenAi, &transcript), rebuilt[2..]);
    check_file(&setup.log).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_left_in_flight_is_closed_aborted_and_the_model_is_told() {
    let setup = setup();
    // What a kill leaves when it strikes while a call runs: the call is in the log, its
    // result is not (and the prompt is beside the log, as the first run left it).
    let (log, _) = SessionLog::open_file(&setup.log, Durability::Always, None)
        .await
        .unwrap();
    let call = ToolCallData {
        call_id: "call_e9".into(),
        name: "edit_file".into(),
        arguments: json!({"path": "notes.txt", "old_string": "fox", "new_string": "cat"}),
        arguments_text: None,
        agent: "main".into(),
        parent: None,
    };
    log.append(1, EventBody::ToolCall(call)).await.unwrap();
    log.close().await.unwrap();
    std::fs::write(prompt_file(&setup.log), PROMPT).unwrap();
    assert!(matches!(
        check_file(&setup.log),
        Err(Violation::NeedsRecovery { open_calls, .. }) if open_calls == ["call_e9"]
    ));

    let turns = recorded_turns();
    let server = ModelServer::start(vec![Reply::whole(turns[2].clone())]).await;
    let out = finished(start_example(&setup, &server, None)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ABORTED") && stderr.contains("call_e9"),
        "{stderr}"
    );
    let sent = messages(&server.requests()[0]);
    assert_eq!(sent[1], json!({"role": "user", "content": PROMPT}));
    assert_eq!(last_call_ids(&sent), ["call_e9"]);
    assert!(tool_message(&sent, "call_e9").starts_with("ABORTED"));
    check_file(&setup.log).unwrap_or_else(|v| panic!("{v}\n{}", log_text(&setup.log)));
    let transcript = replay_file(&setup.log).unwrap();
    assert_eq!(
        transcript.steps[0].results[0]
            .error
            .as_ref()
            .unwrap()
            .code
            .as_str(),
        "ABORTED"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_bad_arguments_and_unreadable_events_do_not_stop_the_loop() {
    let setup = setup();
    let delta = |index: u64, id: &str, name: &str, args: &str| {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": args}}]},
            "finish_reason": null}]})
    };
    let turn = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "finish_reason": null}]}),
        delta(0, "call_u1", "delete_everything", "{}"),
        delta(1, "call_b1", "read_file", r#"{"path": "notes.txt""#),
        json!("data: {this is not json\n\n"),
        delta(2, "call_g1", "read_file", r#"{"path":"todo.txt"}"#),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ];
    let turns = recorded_turns();
    let server = ModelServer::start(vec![Reply::whole(turn), Reply::whole(turns[2].clone())]).await;
    let out = finished(start_example(&setup, &server, Some(PROMPT))).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 unreadable event(s)"), "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let sent = messages(&requests[1]);
    assert!(tool_message(&sent, "call_u1").starts_with("UNKNOWN_TOOL: "));
    assert!(tool_message(&sent, "call_b1").starts_with("TOOL_INPUT_ERROR: "));
    assert!(tool_message(&sent, "call_g1").contains("1. write tests"));
    check_file(&setup.log).unwrap_or_else(|v| panic!("{v}\n{}", log_text(&setup.log)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_error_status_fails_the_run_with_its_message() {
    let setup = setup();
    // A server with nothing recorded answers 500.
    let server = ModelServer::start(Vec::new()).await;
    let out = exited(start_example(&setup, &server, Some(PROMPT))).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("HTTP 500") && stderr.contains("no more recorded turns"),
        "{stderr}"
    );
    check_file(&setup.log).unwrap();
}
