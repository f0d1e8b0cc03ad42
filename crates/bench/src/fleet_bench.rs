//! `serve/fleet`: `dsh serve --http --store`'s server as a fleet, in process: nodes (each a
//! harness whose sessions live in one PostgreSQL store started by `scripts/postgres.sh`, and
//! the HTTP server of `dsh serve --http`), behind Debian's nginx started by
//! `scripts/nginx.sh`, hashing on `Dsh-Session`.
//!
//! - The same load through one node and through two: 16 clients, each its own named session
//!   of the 2026-07-28 era, call a no-op tool one call after another (a fresh connection to
//!   nginx per call) for 3 s after a 0.5 s warm-up: `one_node_calls_per_s`, `one_node_p50_us`,
//!   `one_node_p99_us`, and the same for `two_nodes_`.
//! - `move_p50_ms`: a session released idle by one node (after 50 ms with nothing in flight),
//!   then called on the other node directly: the time of that first call, which takes the
//!   lease and rebuilds the session from the store (goal ≤ 50 ms); 20 moves. Printed beside
//!   it, `stay_p50_ms`: a call on the node that holds the session.
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use crate::serve_bench::{Sleep, runtime};
use dsh_core::ToolRegistry;
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, SessionStore};
use dsh_serve::{
    ElicitingApprover, FleetConfig, HttpGuard, ServeConfig, ServeLimits, SessionTable, StateSecret,
    StatelessSessions,
};
use dsh_session::Durability;
use dsh_session::postgres::{LeaseOptions, LeaseWatch};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const BENCHES: &[Bench] = &[Bench {
    name: "serve/fleet",
    in_all: true,
    run: fleet,
}];

const CLIENTS: usize = 16;

/// One node: its address and what stops it.
struct Node {
    addr: String,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<()>,
    harness: Harness,
}

impl Node {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.served.await;
        self.harness.shutdown().await;
    }
}

/// A node over the store at `url`, accepting the balancer's `Host` `balancer`.
async fn node(url: &str, balancer: &str, release_after: Duration) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address").to_string();
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Sleep).expect("register");
    let approver = Arc::new(ElicitingApprover::new());
    let harness = HarnessBuilder::new(registry)
        .approval(approver.clone())
        .store(SessionStore::Postgres {
            url: url.to_string(),
            durability: Durability::Batch,
            lease: LeaseOptions {
                lease: Duration::from_secs(5),
                wait: Duration::from_secs(3),
                owner: addr.clone(),
                watch: LeaseWatch::default(),
            },
        })
        .build()
        .await
        .expect("harness");
    let table = SessionTable::new(ServeLimits::default());
    let config = ServeConfig {
        fleet: Some(FleetConfig {
            state_key: StateSecret::from_secret(b"the secret of the bench's fleet").expect("key"),
            release_after,
        }),
        ..ServeConfig::default()
    };
    let sessions = StatelessSessions::bounded(
        harness.clone(),
        SchedulerConfig::default(),
        approver,
        config,
        table.clone(),
    );
    let releasing = dsh_serve::release_idle_sessions(&sessions, release_after);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let guard = HttpGuard::new().allow_host(balancer);
    let served = tokio::spawn(async move {
        let make = move || sessions.client_server();
        let _ = dsh_serve::serve_http_bounded(listener, guard, table, make, async {
            let _ = stopped.await;
        })
        .await;
        releasing.abort();
    });
    Node {
        addr,
        stop,
        served,
        harness,
    }
}

/// nginx on `port` over `nodes`, hashing on `Dsh-Session`; stopped when dropped.
struct Nginx {
    dir: std::path::PathBuf,
}

impl Nginx {
    fn start(port: u16, nodes: &[String]) -> Nginx {
        let dir =
            std::env::temp_dir().join(format!("dsh-bench-nginx-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("nginx's folder");
        let servers: String = nodes
            .iter()
            .map(|n| format!("    server {n} max_fails=0;\n"))
            .collect();
        let conf = format!(
            "upstream dsh_fleet {{\n    hash $http_dsh_session consistent;\n{servers}}}\n\
             server {{\n    listen 127.0.0.1:{port};\n    location /mcp {{\n\
             \x20       proxy_pass http://dsh_fleet;\n        proxy_http_version 1.1;\n\
             \x20       proxy_set_header Connection \"\";\n        proxy_set_header Host $http_host;\n\
             \x20       proxy_buffering off;\n    }}\n}}\n"
        );
        let file = dir.join("upstreams.conf");
        std::fs::write(&file, conf).expect("nginx's configuration");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nginx.sh");
        let out = Command::new("bash")
            .arg(script)
            .arg("start")
            .arg(&dir)
            .arg(&file)
            .arg("--watch")
            .arg(std::process::id().to_string())
            .output()
            .expect("running scripts/nginx.sh");
        assert!(
            out.status.success(),
            "scripts/nginx.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Nginx { dir }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nginx.sh");
        let _ = Command::new("bash")
            .arg(script)
            .arg("stop")
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a port")
        .local_addr()
        .expect("its address")
        .port()
}

/// One no-op `tools/call` of the 2026-07-28 era in session `name`, to `addr` over a fresh
/// connection; panics unless it succeeded.
async fn call(addr: &str, host: &str, name: &str) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 0},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        },
    }})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: sleep\r\nDsh-Session: {name}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("a connection");
    let _ = stream.set_nodelay(true);
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.contains("\"isError\":false"),
        "the call failed: {answer}"
    );
}

/// 16 clients through `addr` for 3 s after a warm-up: calls/s, p50 and p99 in µs.
async fn load(addr: &str, host: &str, tag: &str) -> (f64, f64, f64) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let warmup = Duration::from_millis(500);
    let measured = Duration::from_secs(3);
    let started = Instant::now();
    let clients = (0..CLIENTS).map(|i| {
        let name = format!("bench-{tag}-{i}-{nanos}");
        async move {
            let mut times = Vec::new();
            loop {
                let at = started.elapsed();
                if at >= warmup + measured {
                    return times;
                }
                let t = Instant::now();
                call(addr, host, &name).await;
                if at >= warmup {
                    times.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
    });
    let mut all: Vec<f64> = futures::future::join_all(clients)
        .await
        .into_iter()
        .flatten()
        .collect();
    let rate = all.len() as f64 / measured.as_secs_f64();
    let p50 = quantile(&mut all, 0.5);
    let p99 = quantile(&mut all, 0.99);
    (rate, p50, p99)
}

fn fleet() {
    let url = crate::pg_bench::url();
    runtime().block_on(async {
        let release_after = Duration::from_millis(50);
        // One node behind the balancer, then two.
        for (count, prefix) in [(1usize, "one_node"), (2, "two_nodes")] {
            let port = free_port();
            let host = format!("127.0.0.1:{port}");
            let mut nodes = Vec::new();
            for _ in 0..count {
                nodes.push(node(&url, &host, Duration::from_secs(5)).await);
            }
            let addrs: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
            let nginx = Nginx::start(port, &addrs);
            let (rate, p50, p99) = load(&host, &host, prefix).await;
            emit(
                "serve/fleet",
                &format!("{prefix}_calls_per_s"),
                rate,
                "calls/s",
            );
            emit("serve/fleet", &format!("{prefix}_p50_us"), p50, "us");
            emit("serve/fleet", &format!("{prefix}_p99_us"), p99, "us");
            drop(nginx);
            for node in nodes {
                node.stop().await;
            }
        }
        // A session moving between two nodes, each called directly.
        let a = node(&url, "localhost", release_after).await;
        let b = node(&url, "localhost", release_after).await;
        let name = format!("bench-move-{}-{}", std::process::id(), free_port());
        let (mut moves, mut stays) = (Vec::new(), Vec::new());
        let both = [&a.addr, &b.addr];
        for round in 0..21 {
            let here = both[round % 2];
            let t = Instant::now();
            call(here, here, &name).await;
            let first = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            call(here, here, &name).await;
            stays.push(t.elapsed().as_secs_f64() * 1e3);
            if round > 0 {
                moves.push(first);
            }
            // Idle past the release on `here`, so the other node takes it next round.
            tokio::time::sleep(release_after * 4).await;
        }
        emit(
            "serve/fleet",
            "move_p50_ms",
            quantile(&mut moves, 0.5),
            "ms",
        );
        emit(
            "serve/fleet",
            "stay_p50_ms",
            quantile(&mut stays, 0.5),
            "ms",
        );
        a.stop().await;
        b.stop().await;
    });
}
