//! A fleet in tests: `dsh serve --http --store` nodes on one PostgreSQL (`pg::url()`), behind
//! Debian's nginx started by `scripts/nginx.sh` (installed when missing; a failure fails the
//! test, never skips it), and raw requests of the stateless 2026-07-28 era.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::pg;
use super::serve::{HttpServe, post, repo};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The protocol version of the stateless era.
pub const V2026: &str = "2026-07-28";

/// How the balancer picks a node.
#[derive(Clone, Copy, Debug)]
pub enum Balance {
    /// Each request to the next node.
    RoundRobin,
    /// By the `Dsh-Session` header (consistent hashing): a session sticks to a node.
    HashOnSession,
}

/// Two nodes (or more) over one store, and their workspace (shared, as a network file system
/// would be).
pub struct Fleet {
    pub nodes: Vec<HttpServe>,
    pub ws: PathBuf,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl Fleet {
    /// `count` nodes on `127.0.0.1:0`, a lease of 2 s, released after 100 ms idle, a shared
    /// `requestState` key, and a policy asking before `write_file(ask-*)` and `shell(echo asked*)`.
    pub fn start(count: usize) -> Fleet {
        Self::start_with(count, &[])
    }

    /// [`Fleet::start`] with `extra` arguments for every node.
    pub fn start_with(count: usize, extra: &[&str]) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(
            &policy,
            "ask = [\"write_file(ask-*)\", \"shell(echo asked*)\"]\n",
        )
        .unwrap();
        let key = dir.path().join("state.key");
        std::fs::write(&key, "a secret every node of this fleet shares\n").unwrap();
        let url = pg::url();
        let nodes = (0..count)
            .map(|_| {
                let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
                command
                    .args(["serve", "--http", "127.0.0.1:0", "--store", &url])
                    .arg("--workspace")
                    .arg(&ws)
                    .arg("--policy")
                    .arg(&policy)
                    .arg("--state-key-file")
                    .arg(&key)
                    .args(["--lease-ms", "2000", "--release-after-ms", "100"])
                    .args(["--lease-wait-ms", "3000"])
                    .args(extra)
                    .env_remove("RUST_LOG");
                HttpServe::spawn(command)
            })
            .collect();
        Fleet {
            nodes,
            ws,
            url,
            dir,
        }
    }

    /// `count` nodes behind a balancer to be started on `port` (they accept its `Host`).
    pub fn behind(count: usize, port: u16) -> Fleet {
        Self::start_with(count, &["--allow-host", &format!("127.0.0.1:{port}")])
    }

    /// The addresses of the nodes.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    /// Every event of the store session `id` (`dsh export`), none when it does not exist.
    pub fn export(&self, id: &str) -> Vec<Value> {
        export(&self.url, id)
    }

    /// `dsh check` on the store session `id`: its exit code and stderr.
    pub fn check(&self, id: &str) -> (i32, String) {
        let out = super::dsh(&["check", "--store", &self.url, "--session", id]);
        (out.code, out.stderr)
    }
}

/// Every event of the store session `id` (`dsh export`), none when it does not exist.
pub fn export(url: &str, id: &str) -> Vec<Value> {
    pg::export(url, id)
}

/// The store id of session `name` of a fleet without bearer tokens.
pub fn session_id(name: &str) -> String {
    format!("local-{name}")
}

/// A session name no other test (or earlier run on the same store) uses.
pub fn session_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{}", std::process::id(), nanos % 1_000_000_000)
}

/// One `tools/call` of the 2026-07-28 era to `addr`, in session `name` (the `Dsh-Session`
/// header), with `extra` params (a retry's `requestState` and `inputResponses`): the JSON-RPC
/// answer.
pub fn call(addr: &str, name: &str, tool: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-fleet", "version": "1"},
        },
    });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            params[k] = v;
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    post(
        addr,
        &[
            ("MCP-Protocol-Version", V2026),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", tool),
            ("Dsh-Session", name),
        ],
        &body,
    )
    .message()
}

/// [`call`], retried while the answer is the retryable `SESSION_BUSY` (-32002), up to 60 s.
pub fn call_retrying(addr: &str, name: &str, tool: &str, arguments: Value) -> Value {
    let started = Instant::now();
    loop {
        let answer = call(addr, name, tool, arguments.clone(), json!({}));
        if answer["error"]["code"] != -32002 {
            return answer;
        }
        assert_eq!(answer["error"]["data"]["retryable"], true, "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "still busy after 60 s: {answer}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The text of a complete `tools/call` result.
pub fn text(answer: &Value) -> String {
    let result = answer
        .get("result")
        .unwrap_or_else(|| panic!("not a result: {answer}"));
    assert_ne!(result["resultType"], "input_required", "{answer}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Whether a complete result is an error.
pub fn is_error(answer: &Value) -> bool {
    answer["result"]["isError"] == true
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The nginx configuration of a balancer on `port` over `nodes` (the body of an `http` block).
pub fn nginx_config(port: u16, nodes: &[String], balance: Balance) -> String {
    let how = match balance {
        Balance::RoundRobin => "",
        Balance::HashOnSession => "    hash $http_dsh_session consistent;\n",
    };
    let servers: String = nodes
        .iter()
        .map(|n| format!("    server {n} max_fails=0;\n"))
        .collect();
    format!(
        "upstream dsh_fleet {{\n{how}{servers}}}\n\
         server {{\n\
         \x20   listen 127.0.0.1:{port};\n\
         \x20   location /mcp {{\n\
         \x20       proxy_pass http://dsh_fleet;\n\
         \x20       proxy_http_version 1.1;\n\
         \x20       proxy_set_header Connection \"\";\n\
         \x20       proxy_set_header Host $http_host;\n\
         \x20       proxy_buffering off;\n\
         \x20       proxy_read_timeout 300s;\n\
         \x20   }}\n\
         }}\n"
    )
}

/// nginx in front of a fleet, stopped when dropped.
pub struct Nginx {
    dir: PathBuf,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Nginx {
    /// Starts nginx through `scripts/nginx.sh` in a fresh folder, on `port`, balancing
    /// `nodes` (which allow the `Host` `127.0.0.1:PORT`: see [`Fleet::behind`]).
    pub fn start(port: u16, nodes: &[String], balance: Balance) -> Nginx {
        Self::start_with_config(port, &nginx_config(port, nodes, balance))
    }

    /// Starts nginx through `scripts/nginx.sh` on `port` with `config` (the body of an `http`
    /// block, listening on `127.0.0.1:PORT`).
    pub fn start_with_config(port: u16, config: &str) -> Nginx {
        let dir =
            std::env::temp_dir().join(format!("dsh-nginx-{}-{}", std::process::id(), free_port()));
        // Beside nginx's own files: its user (`nobody` when the tests run as root) reads it.
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("upstreams.conf");
        std::fs::write(&conf, config).unwrap();
        // One at a time: the first may install nginx, and apt-get runs alone.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        let out = Command::new("bash")
            .arg(repo().join("scripts/nginx.sh"))
            .arg("start")
            .arg(&dir)
            .arg(&conf)
            .arg("--watch")
            .arg(std::process::id().to_string())
            .output()
            .expect("bash runs scripts/nginx.sh");
        assert!(
            out.status.success(),
            "scripts/nginx.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let addr = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nginx does not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { dir, addr }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("scripts/nginx.sh"))
            .arg("stop")
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The run part of a call id `mcp_<run>_<n>`: which node made it.
pub fn run_of(call_id: &str) -> String {
    call_id
        .strip_prefix("mcp_")
        .and_then(|rest| rest.split('_').next())
        .unwrap_or_default()
        .to_string()
}

/// The call ids of the log's `tool/call` events, in order.
pub fn call_ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["callId"].as_str().unwrap_or_default().to_string())
        .collect()
}
