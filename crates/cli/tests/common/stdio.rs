//! A client speaking newline-delimited JSON-RPC to `dsh serve` over its stdio.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// `dsh serve ARGS` with its stdin and stdout held by the test.
pub struct Client {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
}

impl Client {
    /// Starts `dsh serve ARGS` (stderr goes to the test's).
    pub fn start<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .arg("serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env_remove("RUST_LOG")
            .spawn()
            .unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Client {
            child,
            stdin,
            lines,
            next_id: 1,
        }
    }

    /// Writes one message.
    pub fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Writes raw bytes (a hostile client's line, not necessarily JSON or UTF-8).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// The next message the server writes (a reply or a notification), within 60 s.
    pub fn next_message(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("no message from dsh serve: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Sends a request and waits for its response (skipping notifications), whole: `result`
    /// or `error`.
    pub fn exchange(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("no answer to {method}: {e}"));
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// Sends a request and waits for its result (an error answer fails the test).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let message = self.exchange(method, params);
        assert!(message.get("error").is_none(), "{method}: {message}");
        message["result"].clone()
    }

    /// The MCP handshake.
    pub fn initialize(&mut self) -> Value {
        let info = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        info
    }

    /// Calls a tool: whether it is an error, and its text blocks joined by newlines.
    pub fn call(&mut self, name: &str, arguments: Value) -> (bool, String) {
        let result = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        let text = result["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        (result["isError"] == true, text)
    }

    /// Closes stdin (the end of the session) without waiting.
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Closes stdin (the end of the session) and waits for the server to exit.
    pub fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        self.child.wait().unwrap().code().unwrap()
    }
}
