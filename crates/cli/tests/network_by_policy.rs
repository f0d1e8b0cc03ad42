//! The network by policy through `dsh run`: `net(…)` rules in the policy and `--net-hosts`
//! give shell commands the allowed hosts through dsh's proxy, and nothing else; every attempt
//! is in the logged result's `meta.egress`, which `dsh check` accepts; `ask` goes to the
//! approver (a 2025-11-25 `dsh serve` client by elicitation mid-call; a stateless one gets a
//! refusal naming the rule); `--shell-network` keeps its meaning (the whole network, no
//! proxy); an ordinary user (`nobody` when run as root) gets the same. Servers listen on
//! 127.0.0.2 only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = "hello through dsh\n";
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn shell_calls(dir: &Path, calls: &[(&str, String)]) -> std::path::PathBuf {
    let tool_calls: Vec<_> = calls
        .iter()
        .map(|(id, command)| {
            json!({"id": id, "type": "function",
                   "function": {"name": "shell", "arguments": json!({"command": command}).to_string()}})
        })
        .collect();
    let line = json!({"role": "assistant", "content": "", "tool_calls": tool_calls}).to_string();
    transcript(dir, "t.jsonl", &[&line])
}

/// The logged result's meta of call `id`.
fn result_meta(log: &Path, id: &str) -> Value {
    log_events(log)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == id)
        .inspect(|e| {
            let text = e.to_string();
            assert!(
                text.contains("egress"),
                "no egress in the result of {id}: {text}"
            );
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// One test's world: the HTTP server on 127.0.0.2, and a folder with the workspace, the
/// policy (when given), the hosts file naming `pkg.test`, `other.test` and `ask.test`
/// (127.0.0.2), and the session's log.
struct Fixture {
    port: u16,
    dir: tempfile::TempDir,
    ws: PathBuf,
    policy: Option<PathBuf>,
    hosts: PathBuf,
    log: PathBuf,
}

impl Fixture {
    fn new(policy: Option<&str>) -> Fixture {
        let port = http_server();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let policy = policy.map(|text| {
            let file = dir.path().join("policy.toml");
            std::fs::write(&file, text).unwrap();
            file
        });
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, "127.0.0.2 pkg.test other.test ask.test\n").unwrap();
        let log = dir.path().join("s.jsonl");
        Fixture {
            port,
            dir,
            ws,
            policy,
            hosts,
            log,
        }
    }

    /// `--workspace`, `--log`, `--policy` (when given) and `--net-hosts`.
    fn args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--workspace".into(),
            self.ws.clone().into(),
            "--log".into(),
            self.log.clone().into(),
        ];
        if let Some(policy) = &self.policy {
            args.extend(["--policy".into(), policy.clone().into()]);
        }
        args.extend(["--net-hosts".into(), self.hosts.clone().into()]);
        args
    }

    /// `dsh run` of one assistant turn making these shell calls, with [`Fixture::args`] and
    /// `extra`, as `uid` when given.
    fn run_as(&self, calls: &[(&str, String)], extra: &[&str], uid: Option<u32>) -> Run {
        use std::os::unix::process::CommandExt;
        let t = shell_calls(self.dir.path(), calls);
        let mut args: Vec<std::ffi::OsString> = vec!["run".into(), t.into()];
        args.extend(self.args());
        args.extend(extra.iter().map(Into::into));
        if let Some(uid) = uid {
            chown_tree(self.dir.path(), uid);
        }
        dsh_with(&args, |cmd| {
            if let Some(uid) = uid {
                cmd.uid(uid).gid(uid);
            }
        })
    }

    fn run(&self, calls: &[(&str, String)], extra: &[&str]) -> Run {
        self.run_as(calls, extra, None)
    }

    /// The logged result's meta of call `id`.
    fn meta(&self, id: &str) -> String {
        result_meta(&self.log, id).to_string()
    }
}

#[test]
fn commands_reach_allowed_hosts_only_and_every_attempt_is_logged() {
    // `allow = ["*"]` and the default `allow` do not reach the network.
    let f = Fixture::new(Some("allow = [\"*\", \"net(pkg.test)\"]\n"));
    let port = f.port;
    let r = f.run(
        &[
            (
                "ok",
                format!("curl -sS --max-time 20 http://pkg.test:{port}/"),
            ),
            (
                "denied",
                format!("curl -sS --max-time 20 -f http://other.test:{port}/"),
            ),
            (
                "direct",
                format!("curl -sS --max-time 5 -f --noproxy '*' http://127.0.0.2:{port}/"),
            ),
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.tool_content("ok").contains("hello through dsh"),
        "{}",
        r.tool_content("ok")
    );
    let denied = r.tool_content("denied");
    assert!(!denied.contains("hello through dsh"), "{denied}");
    assert!(
        denied.contains("other.test"),
        "the model is told which host was refused: {denied}"
    );
    assert!(!r.tool_content("direct").contains("hello through dsh"));
    let ok = f.meta("ok");
    assert!(
        ok.contains("\"decision\":\"allow\"") && ok.contains("net(pkg.test)"),
        "{ok}"
    );
    let denied = f.meta("denied");
    assert!(
        denied.contains("\"decision\":\"deny\"") && denied.contains("egressRefused"),
        "{denied}"
    );
    let c = check(&f.log);
    assert_eq!(c.code, 0, "{}", c.stderr);
}

#[test]
fn ask_goes_to_the_approver() {
    for (approve, reached) in [("allow", true), ("deny", false)] {
        let f = Fixture::new(Some("ask = [\"net(ask.test)\"]\n"));
        let port = f.port;
        let r = f.run(
            &[(
                "a",
                format!(
                    "curl -sS --max-time 20 -f http://ask.test:{port}/ && curl -sS --max-time 20 -f http://ask.test:{port}/"
                ),
            )],
            &["--approve", approve],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let content = r.tool_content("a");
        assert_eq!(
            content.matches("hello through dsh").count(),
            if reached { 2 } else { 0 },
            "--approve {approve}: {content}"
        );
        if !reached {
            assert!(f.meta("a").contains("declined"));
        }
    }
}

#[test]
fn shell_network_keeps_its_meaning() {
    let f = Fixture::new(Some("allow = [\"net(pkg.test)\"]\n"));
    let port = f.port;
    let r = f.run(
        &[(
            "d",
            format!("curl -sS --max-time 20 --noproxy '*' http://127.0.0.2:{port}/"),
        )],
        &["--shell-network"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.tool_content("d").contains("hello through dsh"),
        "{}",
        r.tool_content("d")
    );
}

#[test]
fn claude_code_settings_map_onto_net_rules() {
    let f = Fixture::new(None);
    let port = f.port;
    let settings = f.dir.path().join("settings.json");
    std::fs::write(
        &settings,
        r#"{"permissions": {"allow": ["WebFetch(domain:pkg.test)"]},
            "sandbox": {"network": {"allowedDomains": ["ask.test"]}}}"#,
    )
    .unwrap();
    let r = f.run(
        &[
            (
                "fetch",
                format!("curl -sS --max-time 20 -f http://pkg.test:{port}/"),
            ),
            (
                "domain",
                format!("curl -sS --max-time 20 -f http://ask.test:{port}/"),
            ),
            (
                "other",
                format!("curl -sS --max-time 20 -f http://other.test:{port}/"),
            ),
        ],
        &["--claude-settings", settings.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.tool_content("fetch").contains("hello through dsh"),
        "{}",
        r.tool_content("fetch")
    );
    assert!(
        r.tool_content("domain").contains("hello through dsh"),
        "{}",
        r.tool_content("domain")
    );
    assert!(
        !r.tool_content("other").contains("hello through dsh"),
        "{}",
        r.tool_content("other")
    );
}

/// `dsh serve --http` with the client as approver (`--approve prompt`, the default): a client
/// of the stateless 2026-07-28 era cannot be asked while its call runs, so a host under `ask`
/// is refused at once, and the command (and the logged record) are told the host and the
/// rule to add; no question goes out, and the call is not held up waiting for one.
#[test]
fn a_stateless_serve_client_is_not_asked_mid_call_the_refusal_names_the_rule() {
    use common::serve::{HttpServe, post};
    const TOKEN: &str = "token-of-the-net-ask-test";
    let mut f = Fixture::new(Some("ask = [\"net(ask.test)\"]\n"));
    let port = f.port;
    let tokens = f.dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    // Over HTTP, `--log` names a folder of sessions' logs.
    let logs = f.dir.path().join("logs");
    f.log = logs.clone();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(f.args())
        .arg("--token-file")
        .arg(&tokens);
    let mut serve = HttpServe::spawn(command);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "shell",
        "arguments": {"command": format!("curl -sS --max-time 20 -i http://ask.test:{port}/")},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-2026", "version": "1"},
        },
    }});
    let auth = format!("Bearer {TOKEN}");
    let answer = post(
        &serve.addr,
        &[
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "shell"),
        ],
        &body,
    )
    .message();
    let result = &answer["result"];
    assert_ne!(result["resultType"], "input_required", "{answer}");
    let text = result["content"].to_string();
    assert!(!text.contains("hello through dsh"), "{text}");
    assert!(text.contains("403"), "{text}");
    assert!(
        text.contains("ask.test is under `net(ask.test)` and this client cannot be asked"),
        "{text}"
    );
    assert!(text.contains("add `net(ask.test)` to `allow`"), "{text}");
    serve.terminate();
    let log = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .expect("the session's log");
    let result = log_events(&log)
        .into_iter()
        .find(|e| e["type"] == "tool/result")
        .expect("the call's result");
    let egress = result.to_string();
    assert!(
        egress.contains("\"egressRefused\":[\"ask.test\"]") && egress.contains("cannot be asked"),
        "{egress}"
    );
    assert_eq!(check(&log).code, 0);
}

/// A proxied call that fails the way sandbox refusals look: the sandbox's note says the
/// network goes only through dsh's proxy and names the hosts it refused (not "network off");
/// `meta.network` keeps meaning the whole network (false) beside `networkProxy: true`.
#[test]
fn the_sandbox_note_of_a_proxied_call_names_the_proxy_and_the_refused_hosts() {
    let f = Fixture::new(Some("allow = [\"net(pkg.test)\"]\n"));
    let port = f.port;
    // The refused host, then an error the sandbox note keys on (as ssh prints it).
    let r = f.run(
        &[(
            "a",
            format!(
                "curl -sS --max-time 20 -f http://other.test:{port}/; \
                 echo 'ssh: connect to host other.test port 22: Permission denied' >&2; exit 1"
            ),
        )],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let content = r.tool_content("a");
    assert!(content.contains("may have refused this"), "{content}");
    assert!(
        content.contains("network only through dsh's proxy")
            && content.contains("by the policy's net(…) rules; it refused other.test"),
        "{content}"
    );
    assert!(
        !content.contains("network off") && !content.contains("have no network"),
        "{content}"
    );
    let meta = result_meta(&f.log, "a");
    let meta = meta.to_string();
    assert!(
        meta.contains("\"network\":false") && meta.contains("\"networkProxy\":true"),
        "{meta}"
    );
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

/// The proxied sandbox of an ordinary user (CI runs as root: dsh then runs as `nobody`, whose
/// sandbox is an unprivileged user namespace with its own network namespace): curl reaches an
/// allowed host through the proxy, a direct connect has no route, and both are in the log.
#[test]
fn an_ordinary_user_gets_the_network_by_policy_too() {
    let me = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    // As root, `nobody`; otherwise this user is already an ordinary one.
    let uid = (me == 0).then_some(65534);
    let f = Fixture::new(Some("allow = [\"net(pkg.test)\"]\n"));
    let port = f.port;
    let r = f.run_as(
        &[
            (
                "ok",
                format!("id -u; curl -sS --max-time 20 http://pkg.test:{port}/"),
            ),
            (
                "direct",
                format!(
                    "curl -sS --max-time 5 -f --noproxy '*' http://127.0.0.2:{port}/; \
                     echo hi > /dev/tcp/127.0.0.2/{port}"
                ),
            ),
        ],
        &[],
        uid,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ok = r.tool_content("ok");
    assert!(ok.contains("hello through dsh"), "{ok}");
    let direct = r.tool_content("direct");
    assert!(!direct.contains("hello through dsh"), "{direct}");
    let meta = result_meta(&f.log, "ok").to_string();
    assert!(
        meta.contains("\"decision\":\"allow\"") && meta.contains("net(pkg.test)"),
        "{meta}"
    );
    // The direct attempts never reached the proxy: nothing allowed in their record.
    let direct_meta = log_events(&f.log)
        .into_iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == "direct")
        .unwrap()
        .to_string();
    assert!(
        !direct_meta.contains("\"decision\":\"allow\""),
        "{direct_meta}"
    );
    assert!(
        direct_meta.contains("\"networkProxy\":true"),
        "{direct_meta}"
    );
}

/// `dsh serve` over stdio, a raw 2025-11-25 client that declared elicitation answering every
/// `elicitation/create` with `action`, one `shell` call connecting twice to `ask.test`: the
/// questions it was asked, the call's content, and the fixture (its log).
fn serve_answering(action: &str) -> (Vec<Value>, String, Fixture) {
    use common::stdio::Client;
    let f = Fixture::new(Some("ask = [\"net(ask.test)\"]\n"));
    let port = f.port;
    let mut client = Client::start(&f.args());
    client.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25",
               "capabilities": {"elicitation": {"form": {}}},
               "clientInfo": {"name": "asked-2025", "version": "1"}}),
    );
    client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let command = format!(
        "curl -sS --max-time 30 -i http://ask.test:{port}/ ; curl -sS --max-time 30 -i http://ask.test:{port}/"
    );
    client.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "shell", "arguments": {"command": command}}}));
    let mut asked = Vec::new();
    let result = loop {
        let message = client.next_message();
        if message["method"] == "elicitation/create" {
            asked.push(message["params"].clone());
            client.send(&json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"action": action}}));
            continue;
        }
        if message["id"] == 7 {
            break message;
        }
    };
    assert!(result.get("error").is_none(), "{result}");
    let text = result["result"]["content"].to_string();
    assert_eq!(client.finish(), 0);
    (asked, text, f)
}

/// `dsh serve` over stdio with a 2025-11-25 client that declared elicitation: a connection to
/// a host under `ask` is put to that client mid-call, on the call's own request (the
/// elicitation names the host), and its answer decides; an accept holds for the session (the
/// second connection is not asked again), a decline is a refusal.
#[test]
fn a_2025_serve_client_is_asked_mid_call_and_its_answer_holds() {
    let (asked, text, f) = serve_answering("accept");
    let log = &f.log;
    assert_eq!(asked.len(), 1, "asked once per host and session: {asked:?}");
    let message = asked[0]["message"].as_str().unwrap_or("");
    assert!(message.contains("ask.test"), "{message}");
    assert_eq!(
        text.matches("hello through dsh").count(),
        2,
        "both connections went through: {text}"
    );
    let result = log_events(log)
        .into_iter()
        .find(|e| e["type"] == "tool/result")
        .expect("the call's result")
        .to_string();
    assert!(
        result.contains("\"decision\":\"allow\"") && result.contains("net(ask.test)"),
        "{result}"
    );
    assert_eq!(check(log).code, 0);

    let (asked, text, f) = serve_answering("decline");
    let log = &f.log;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(!text.contains("hello through dsh"), "{text}");
    assert!(text.contains("403") && text.contains("declined"), "{text}");
    let result = log_events(log)
        .into_iter()
        .find(|e| e["type"] == "tool/result")
        .expect("the call's result")
        .to_string();
    assert!(
        result.contains("\"egressRefused\":[\"ask.test\"]"),
        "{result}"
    );
}
