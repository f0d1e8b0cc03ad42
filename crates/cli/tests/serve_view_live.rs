//! `dsh serve --http ADDR --view VIEW_ADDR` (issue 33): the page of each live session, on a
//! listener of its own, behind the MCP door. Over raw HTTP on the loopback:
//!
//! - no token: 401 with a login form; a `Host` or `Origin` of another site: 403, the login
//!   form's POST included;
//! - `POST /login` with a valid token answers 303 to `/` and sets it as an `HttpOnly`,
//!   `SameSite=Strict` cookie; a wrong token is 401 and sets nothing;
//! - with A's cookie, `/` lists A's sessions of both eras and none of B's; A's page is the
//!   session's page (reloading), and it shows a call made after the first look; B's session is
//!   404 for A, exactly like a session that does not exist, and a path that tries to leave the
//!   folder is 404;
//! - a bearer header works as the cookie does; after a rotation (SIGHUP) that retires A, A's
//!   cookie is 401.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::serve::post;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOKEN_A: &str = "view-token-of-client-a";
const TOKEN_B: &str = "view-token-of-client-b";
const V2026: &str = "2026-07-28";

/// `dsh serve --http 127.0.0.1:0 --view 127.0.0.1:0` with tokens A and B.
struct Served {
    child: Child,
    mcp: String,
    view: String,
    tokens: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    std::fs::write(ws.join("other.txt"), "other\n").unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN_A}\n{TOKEN_B}\n")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--http", "127.0.0.1:0", "--view", "127.0.0.1:0"])
        .arg("--workspace")
        .arg(&ws)
        .arg("--log")
        .arg(dir.path().join("logs"))
        .arg("--token-file")
        .arg(&tokens)
        .env_remove("DSH_SERVE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("[dsh] {line}");
            if let Some(rest) = line.split("http://").nth(1) {
                let addr = rest.split('/').next().unwrap_or_default().to_string();
                let _ = tx.send((line.contains("pages"), addr));
            }
        }
    });
    let (mut mcp, mut view) = (None, None);
    while mcp.is_none() || view.is_none() {
        let (pages, addr) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("dsh says both URLs on stderr");
        if pages {
            view = Some(addr);
        } else {
            mcp = Some(addr);
        }
    }
    Served {
        child,
        mcp: mcp.unwrap(),
        view: view.unwrap(),
        tokens,
        _dir: dir,
    }
}

/// An HTTP answer: status, headers (lowercase names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The session ids the list page links to.
    fn listed(&self) -> Vec<String> {
        self.body
            .split("href=\"/s/")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_string)
            .collect()
    }
}

/// One request over a fresh connection; `Host: addr` unless `headers` names one.
fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        text.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    request(addr, "GET", path, headers, "")
}

/// `POST /login` of `token` as a form, from the view's own origin.
fn login(served: &Served, token: &str) -> Answer {
    let origin = format!("http://{}", served.view);
    request(
        &served.view,
        "POST",
        "/login",
        &[
            ("Origin", &origin),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &format!("token={token}"),
    )
}

/// The `name=value` of the `Set-Cookie` header.
fn cookie_of(answer: &Answer) -> String {
    let set = answer.header("set-cookie").expect("a Set-Cookie header");
    set.split(';').next().unwrap().trim().to_string()
}

/// A call of the 2026-07-28 era in the named session `session`, as `token`.
fn call_named(served: &Served, token: &str, session: &str, tool: &str, arguments: Value) {
    let auth = format!("Bearer {token}");
    let reply = post(
        &served.mcp,
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", V2026),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", tool),
        ],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
            "dev.dsh/session": session,
        }}}),
    );
    let message = reply.message();
    assert!(
        message["result"]["isError"] != json!(true),
        "{tool}: {message}"
    );
}

/// A 2025-11-25 session of `token` with one call of `tool`.
fn call_in_new_session(served: &Served, token: &str, tool: &str, arguments: Value) {
    let auth = format!("Bearer {token}");
    let opened = post(
        &served.mcp,
        &[("Authorization", &auth)],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    let id = opened
        .header("mcp-session-id")
        .expect("a session")
        .to_string();
    let in_session = [
        ("Authorization", auth.as_str()),
        ("Mcp-Session-Id", id.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let done = post(
        &served.mcp,
        &in_session,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(done.status, 202, "{}", done.body);
    let called = post(
        &served.mcp,
        &in_session,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}),
    );
    let message = called.message();
    assert!(
        message["result"]["isError"] != json!(true),
        "{tool}: {message}"
    );
}

#[test]
fn each_token_sees_its_own_live_sessions_and_nothing_else() {
    let served = start();
    call_named(
        &served,
        TOKEN_A,
        "alpha",
        "read_file",
        json!({"path": "notes.txt"}),
    );
    call_in_new_session(&served, TOKEN_A, "read_file", json!({"path": "other.txt"}));
    call_named(
        &served,
        TOKEN_B,
        "beta",
        "read_file",
        json!({"path": "other.txt"}),
    );

    // The door: no token, another Host, another Origin.
    let bare = get(&served.view, "/", &[]);
    assert_eq!(bare.status, 401, "{}", bare.body);
    assert!(bare.body.contains("action=\"/login\""), "{}", bare.body);
    let auth_a = format!("Bearer {TOKEN_A}");
    let rebound = get(
        &served.view,
        "/",
        &[("Host", "evil.example"), ("Authorization", &auth_a)],
    );
    assert_eq!(rebound.status, 403, "{}", rebound.body);
    let foreign = get(
        &served.view,
        "/",
        &[
            ("Origin", "http://evil.example"),
            ("Authorization", &auth_a),
        ],
    );
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    let forged = request(
        &served.view,
        "POST",
        "/login",
        &[
            ("Origin", "http://evil.example"),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &format!("token={TOKEN_A}"),
    );
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(forged.header("set-cookie").is_none());
    let wrong = login(&served, "not-a-token");
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.header("set-cookie").is_none());

    // The exchange: a valid token becomes an HttpOnly, SameSite=Strict cookie.
    let logged_in = login(&served, TOKEN_A);
    assert_eq!(logged_in.status, 303, "{}", logged_in.body);
    assert_eq!(logged_in.header("location"), Some("/"));
    let set = logged_in.header("set-cookie").unwrap();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    let cookie_a = cookie_of(&logged_in);
    let cookie_b = cookie_of(&login(&served, TOKEN_B));

    // A's list: A's two sessions (both eras), none of B's.
    let list_a = get(&served.view, "/", &[("Cookie", &cookie_a)]);
    assert_eq!(list_a.status, 200, "{}", list_a.body);
    let ids_a = list_a.listed();
    assert_eq!(ids_a.len(), 2, "{}", list_a.body);
    let list_b = get(&served.view, "/", &[("Cookie", &cookie_b)]);
    let ids_b = list_b.listed();
    assert_eq!(ids_b.len(), 1, "{}", list_b.body);
    assert!(!ids_a.contains(&ids_b[0]), "{ids_a:?} {ids_b:?}");
    let alpha = ids_a
        .iter()
        .find(|id| id.ends_with("-alpha"))
        .expect("A's named session is listed")
        .clone();
    // The same list with a bearer header instead of the cookie.
    let by_header = get(&served.view, "/", &[("Authorization", &auth_a)]);
    assert_eq!(by_header.listed().len(), 2, "{}", by_header.body);

    // A's page: the session's page, reloading; then a new call shows on it.
    let page = get(
        &served.view,
        &format!("/s/{alpha}"),
        &[("Cookie", &cookie_a)],
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.starts_with("<!DOCTYPE html>"), "{}", page.body);
    assert!(page.body.contains("http-equiv=\"refresh\""));
    assert!(page.body.contains("read_file"));
    assert!(!page.body.contains("edit_file"));
    call_named(
        &served,
        TOKEN_A,
        "alpha",
        "edit_file",
        json!({"path": "notes.txt", "old_string": "hello", "new_string": "bye"}),
    );
    let page = get(
        &served.view,
        &format!("/s/{alpha}"),
        &[("Cookie", &cookie_a)],
    );
    assert!(page.body.contains("edit_file"), "the page is live");

    // B's session is not A's: 404, as one that does not exist; no way out of the folder.
    let theirs = get(
        &served.view,
        &format!("/s/{}", ids_b[0]),
        &[("Cookie", &cookie_a)],
    );
    assert_eq!(theirs.status, 404, "{}", theirs.body);
    let mine = get(
        &served.view,
        &format!("/s/{}", ids_b[0]),
        &[("Cookie", &cookie_b)],
    );
    assert_eq!(mine.status, 200);
    for path in [
        "/s/nothing-here",
        "/s/../tokens",
        "/s/%2e%2e%2ftokens",
        "/mcp",
    ] {
        let answer = get(&served.view, path, &[("Cookie", &cookie_a)]);
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
    }

    // A rotation that retires A retires A's cookie.
    std::fs::write(&served.tokens, format!("{TOKEN_B}\n")).unwrap();
    let pid = served.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let after = get(&served.view, "/", &[("Cookie", &cookie_a)]);
        if after.status == 401 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A's cookie still works"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&served.view, "/", &[("Cookie", &cookie_b)]).status, 200);
}
