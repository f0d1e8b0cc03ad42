//! `dsh serve` in tests: the official MCP SDKs, `dsh serve --http` as a child process, and raw
//! HTTP requests to it.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where `scripts/mcp-sdks.sh` installed the official SDKs.
pub struct Sdks {
    /// The Python interpreter that has `mcp`.
    pub python: String,
    /// The `NODE_PATH` that has `@modelcontextprotocol/sdk`.
    pub node_path: String,
}

/// Installs the SDKs (or finds them installed). A failure to install fails the test: it never
/// skips.
pub fn sdks() -> Sdks {
    let out = Command::new("bash")
        .arg(repo().join("scripts/mcp-sdks.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("bash runs scripts/mcp-sdks.sh");
    assert!(
        out.status.success(),
        "scripts/mcp-sdks.sh could not install the MCP SDKs (see above)"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("scripts/mcp-sdks.sh printed no {key}: {text}"))
            .to_string()
    };
    Sdks {
        python: get("python"),
        node_path: get("node_path"),
    }
}

/// A running `dsh serve --http`, killed when dropped.
pub struct HttpServe {
    child: Child,
    /// `host:port`, as dsh announced it.
    pub addr: String,
}

impl HttpServe {
    /// Spawns `command` (a `dsh serve --http …` with its arguments), echoes its stderr
    /// (prefixed `[dsh]`) and waits up to 60 s for the URL dsh announces there.
    pub fn spawn(command: Command) -> HttpServe {
        Self::spawn_with_env(command, None)
    }

    /// [`HttpServe::spawn`] with `DSH_SERVE_TOKEN` set to `env_token` (unset when `None`).
    pub fn spawn_with_env(mut command: Command, env_token: Option<&str>) -> HttpServe {
        match env_token {
            Some(token) => command.env("DSH_SERVE_TOKEN", token),
            None => command.env_remove("DSH_SERVE_TOKEN"),
        };
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[dsh] {line}");
                if !sent && let Some(rest) = line.split("http://").nth(1) {
                    let _ = tx.send(rest.split('/').next().unwrap_or_default().to_string());
                    sent = true;
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("dsh serve --http says its URL on stderr");
        HttpServe { child, addr }
    }

    /// dsh's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// SIGTERM; dsh must exit 0 within 20 s.
    pub fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "dsh serve --http after SIGTERM: {status:?}"
                );
                return;
            }
            assert!(Instant::now() < deadline, "dsh did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for HttpServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response: status, headers (lowercase names), body.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC message of an SSE or JSON body that has an `id`.
    pub fn message(&self) -> Value {
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .chain(std::iter::once(self.body.as_str()))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("id").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {:?}", self.body))
    }
}

/// One `POST /mcp` of `body` over a fresh connection (`Connection: close`), read to its end.
/// A `Host` header naming `addr` is sent unless `headers` has one.
pub fn post(addr: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    post_text(addr, headers, &body.to_string())
}

/// [`post`] of any text (garbage included); panics unless the answer is an HTTP response.
pub fn post_text(addr: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .filter(|l| l.starts_with("HTTP/1.1 "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
}
