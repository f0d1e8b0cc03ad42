//! The proxy judges every connection: allowed names go through over plain HTTP, CONNECT and
//! SOCKS5; denied names, IP literals, names resolving to loopback, `Host` and SNI mismatches
//! and SOCKS5 UDP are refused and recorded; `ask` asks once per host; a flood stays bounded
//! and nothing outlives the call. Servers listen on 127.0.0.2 and 127.0.0.3 only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use dsh_core::net_rules::{NetClass, NetRules};
use dsh_net::{CallProxy, CallTag, HostsFile, NetAnswer, NetAsker, NetProxy, ProxyLimits, Via};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An HTTP server answering every request with its request line and Host header.
async fn http_server(ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let line = head.lines().next().unwrap_or("").to_string();
                let host = head
                    .lines()
                    .find(|l| l.to_ascii_lowercase().starts_with("host:"))
                    .unwrap_or("")
                    .to_string();
                let body = format!("{line}\n{host}\n");
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    addr
}

/// A server that records how many bytes it received, and echoes them.
async fn echo_server(ip: &str) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let seen = got.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            seen.fetch_add(n, Ordering::SeqCst);
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, got)
}

fn hosts() -> HostsFile {
    HostsFile::parse("127.0.0.2 pkg.test git.test ask.test\n127.0.0.3 other.test\n").unwrap()
}

fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> NetRules {
    NetRules::new(allow, ask, deny, NetClass::Deny).unwrap()
}

async fn start(proxy: &NetProxy) -> (CallProxy, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (proxy.serve(listener), addr)
}

async fn exchange(proxy: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn plain_http_goes_to_allowed_hosts_only() {
    let server = http_server("127.0.0.2").await;
    let other = http_server("127.0.0.3").await;
    let proxy = NetProxy::new(rules(&["net(pkg.test)"], &[], &[]), Some(hosts()));
    let (call, addr) = start(&proxy).await;
    let p = server.port();
    let ok = exchange(addr, format!("GET http://pkg.test:{p}/simple/ HTTP/1.1\r\nHost: pkg.test:{p}\r\nProxy-Connection: keep-alive\r\n\r\n").as_bytes()).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(
        ok.contains("GET /simple/ HTTP/1.1"),
        "the request goes on in origin form: {ok}"
    );
    let denied = exchange(
        addr,
        format!(
            "GET http://other.test:{}/ HTTP/1.1\r\nHost: other.test:{}\r\n\r\n",
            other.port(),
            other.port()
        )
        .as_bytes(),
    )
    .await;
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    assert!(denied.contains("no rule allows other.test"), "{denied}");
    // The Host header names another site than the target: refused, even on an allowed host.
    let mismatch = exchange(
        addr,
        format!("GET http://pkg.test:{p}/ HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(mismatch.starts_with("HTTP/1.1 403"), "{mismatch}");
    assert!(mismatch.contains("Host header"), "{mismatch}");
    let report = call.finish().await;
    let r = &report.records;
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(
        (r[0].decision, r[0].via, r[0].rule.as_deref()),
        ("allow", Via::Http, Some("net(pkg.test)"))
    );
    assert!(r[0].bytes_down > 0 && r[0].bytes_up > 0, "{r:?}");
    assert_eq!(
        (r[1].decision, r[1].host.as_str(), r[1].rule.as_deref()),
        ("deny", "other.test", Some("default"))
    );
    assert_eq!(r[2].decision, "deny");
    assert_eq!(
        report.refused_hosts(),
        vec!["other.test".to_string(), "pkg.test".to_string()]
    );
}

#[tokio::test]
async fn connect_checks_the_tls_server_name() {
    let (echo, got) = echo_server("127.0.0.2").await;
    let proxy = NetProxy::new(rules(&["net(pkg.test)"], &[], &[]), Some(hosts()));
    let (call, addr) = start(&proxy).await;
    let p = echo.port();
    // The right name: the ClientHello reaches the server.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("CONNECT pkg.test:{p} HTTP/1.1\r\nHost: pkg.test:{p}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).await.unwrap();
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let hello = dsh_net::client_hello_for("pkg.test");
    s.write_all(&hello).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, hello);
    drop(s);
    let before = got.load(Ordering::SeqCst);
    // Another name in the ClientHello: cut before a byte reaches the server.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("CONNECT pkg.test:{p} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    s.read_exact(&mut head).await.unwrap();
    s.write_all(&dsh_net::client_hello_for("evil.example"))
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        got.load(Ordering::SeqCst),
        before,
        "no byte of the mismatched hello reached the server"
    );
    // An IP literal no rule names.
    let literal = exchange(
        addr,
        format!("CONNECT 127.0.0.2:{p} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(
        literal.starts_with("HTTP/1.1 403") && literal.contains("IP literal"),
        "{literal}"
    );
    let report = call.finish().await;
    let r = &report.records;
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!((r[0].decision, r[0].via), ("allow", Via::Connect));
    assert_eq!(r[0].bytes_up, hello.len() as u64);
    assert_eq!(r[1].decision, "deny");
    assert!(
        r[1].reason.as_deref().unwrap().contains("evil.example"),
        "{r:?}"
    );
    assert_eq!((r[2].decision, r[2].host.as_str()), ("deny", "127.0.0.2"));
}

#[tokio::test]
async fn names_resolving_to_loopback_or_link_local_need_a_rule_naming_the_address() {
    // The system resolver: `localhost` is loopback, and a rule naming the name is not enough.
    let proxy = NetProxy::new(rules(&["net(localhost)"], &[], &[]), None);
    let (call, addr) = start(&proxy).await;
    let out = exchange(addr, b"CONNECT localhost:80 HTTP/1.1\r\n\r\n").await;
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("loopback"),
        "{out}"
    );
    // The cloud metadata address, named by no rule, as a literal.
    let out = exchange(
        addr,
        b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    let report = call.finish().await;
    assert_eq!(
        report.refused_hosts(),
        vec!["localhost".to_string(), "169.254.169.254".to_string()]
    );
    // A rule naming the address lets the name through.
    let server = http_server("127.0.0.2").await;
    let proxy = NetProxy::new(
        rules(&["net(localhost)", "net(127.0.0.0/8)"], &[], &[]),
        None,
    );
    let (call, addr) = start(&proxy).await;
    let p = server.port();
    let _ = p;
    let out = exchange(
        addr,
        format!("GET http://127.0.0.2:{p}/ HTTP/1.1\r\nHost: 127.0.0.2:{p}\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    call.finish().await;
}

async fn socks(addr: SocketAddr, cmd: u8, host: &str, port: u16) -> (TcpStream, u8) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut greet = [0u8; 2];
    s.read_exact(&mut greet).await.unwrap();
    assert_eq!(greet, [5, 0]);
    let mut req = vec![5, cmd, 0, 3, host.len() as u8];
    req.extend_from_slice(host.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    (s, reply[1])
}

#[tokio::test]
async fn socks5_resolves_names_itself_and_refuses_what_the_rules_refuse() {
    let (echo, _) = echo_server("127.0.0.2").await;
    let proxy = NetProxy::new(
        rules(&["net(pkg.test)"], &[], &["net(other.test)"]),
        Some(hosts()),
    );
    let (call, addr) = start(&proxy).await;
    let (mut s, code) = socks(addr, 1, "pkg.test", echo.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"SSH-2.0-test\r\n").await.unwrap();
    let mut back = [0u8; 14];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"SSH-2.0-test\r\n");
    drop(s);
    let (_, code) = socks(addr, 1, "other.test", echo.port()).await;
    assert_eq!(code, 2, "connection not allowed by ruleset");
    let (_, code) = socks(addr, 3, "pkg.test", 53).await;
    assert_eq!(code, 7, "UDP ASSOCIATE is refused");
    let report = call.finish().await;
    let r = &report.records;
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!((r[0].decision, r[0].via), ("allow", Via::Socks5));
    assert_eq!(
        (r[1].decision, r[1].rule.as_deref()),
        ("deny", Some("net(other.test)"))
    );
    assert!(r[2].reason.as_deref().unwrap().contains("UDP ASSOCIATE"));
}

struct Asker {
    asked: AtomicUsize,
    answer: Option<bool>,
}

#[async_trait]
impl NetAsker for Asker {
    async fn ask(&self, _call: &CallTag, _host: &str, _port: u16, _rule: &str) -> NetAnswer {
        self.asked.fetch_add(1, Ordering::SeqCst);
        match self.answer {
            Some(true) => NetAnswer::Allow,
            Some(false) => NetAnswer::Decline,
            None => std::future::pending().await,
        }
    }
}

fn asking(answer: Option<bool>, timeout: Duration) -> (NetProxy, Arc<Asker>) {
    let asker = Arc::new(Asker {
        asked: AtomicUsize::new(0),
        answer,
    });
    let limits = ProxyLimits {
        ask_timeout: timeout,
        ..ProxyLimits::default()
    };
    let proxy = NetProxy::with(
        rules(&[], &["net(ask.test)"], &[]),
        Some(hosts()),
        Some(asker.clone()),
        limits,
    );
    (proxy, asker)
}

#[tokio::test]
async fn ask_is_asked_once_per_host_and_session() {
    let server = http_server("127.0.0.2").await;
    let p = server.port();
    let get = format!("GET http://ask.test:{p}/ HTTP/1.1\r\nHost: ask.test:{p}\r\n\r\n");
    // Approved: the second connection, in a later call of the same session, is not asked.
    let (proxy, asker) = asking(Some(true), Duration::from_secs(5));
    let (call, addr) = start(&proxy).await;
    assert!(
        exchange(addr, get.as_bytes())
            .await
            .starts_with("HTTP/1.1 200")
    );
    call.finish().await;
    let (call, addr) = start(&proxy).await;
    assert!(
        exchange(addr, get.as_bytes())
            .await
            .starts_with("HTTP/1.1 200")
    );
    call.finish().await;
    assert_eq!(asker.asked.load(Ordering::SeqCst), 1);
    // Declined: refused, and remembered.
    let (proxy, asker) = asking(Some(false), Duration::from_secs(5));
    let (call, addr) = start(&proxy).await;
    for _ in 0..2 {
        let out = exchange(addr, get.as_bytes()).await;
        assert!(
            out.starts_with("HTTP/1.1 403") && out.contains("declined"),
            "{out}"
        );
    }
    assert_eq!(asker.asked.load(Ordering::SeqCst), 1);
    let report = call.finish().await;
    assert_eq!(report.records[0].rule.as_deref(), Some("net(ask.test)"));
    // Unanswered: refused at the approval timeout.
    let (proxy, _) = asking(None, Duration::from_millis(300));
    let (call, addr) = start(&proxy).await;
    let started = std::time::Instant::now();
    let out = exchange(addr, get.as_bytes()).await;
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("approval timeout"),
        "{out}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    call.finish().await;
    // No approver (a stateless client): a refusal naming the host and the rule to add.
    let proxy = NetProxy::new(rules(&[], &["net(ask.test)"], &[]), Some(hosts()));
    let (call, addr) = start(&proxy).await;
    let out = exchange(addr, get.as_bytes()).await;
    assert!(
        out.contains("cannot be asked") && out.contains("net(ask.test)"),
        "{out}"
    );
    call.finish().await;
}

#[tokio::test]
async fn a_flood_stays_bounded_and_nothing_outlives_the_call() {
    let (echo, _) = echo_server("127.0.0.2").await;
    let limits = ProxyLimits {
        max_connections: 16,
        max_records: 64,
        ..ProxyLimits::default()
    };
    let proxy = NetProxy::with(
        rules(&["net(pkg.test)"], &[], &[]),
        Some(hosts()),
        None,
        limits,
    );
    let (call, addr) = start(&proxy).await;
    let p = echo.port();
    let mut open = Vec::new();
    for _ in 0..200 {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            continue;
        };
        let _ = s
            .write_all(format!("CONNECT pkg.test:{p} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        open.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut through = 0;
    for s in open.iter_mut() {
        let mut head = [0u8; 12];
        let read = tokio::time::timeout(Duration::from_millis(50), s.read_exact(&mut head)).await;
        if matches!(read, Ok(Ok(_))) && head.starts_with(b"HTTP/1.1 200") {
            through += 1;
        }
    }
    assert!(
        through <= 16,
        "at most the limit are served at once: {through}"
    );
    assert!(through > 0);
    let report = call.finish().await;
    assert_eq!(report.records.len(), 64, "records are capped");
    assert!(report.omitted > 0);
    // Every tunnel of the call is closed with it.
    for s in open.iter_mut() {
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return 0,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert_eq!(n, Ok(0), "a connection outlived its call");
    }
}

/// Answers for agent `b` at once, and never for any other agent.
struct OnlyB;

#[async_trait]
impl NetAsker for OnlyB {
    async fn ask(&self, call: &CallTag, _host: &str, _port: u16, _rule: &str) -> NetAnswer {
        if call.agent == "b" {
            NetAnswer::Allow
        } else {
            std::future::pending().await
        }
    }
}

/// Answers are per agent (the session of a served client): one agent's question left open
/// holds up neither another agent's question about the same host nor its connection, and
/// one agent's approval is not another's.
#[tokio::test]
async fn one_agents_open_question_holds_up_no_other_agent() {
    let server = http_server("127.0.0.2").await;
    let p = server.port();
    let get = format!("GET http://ask.test:{p}/ HTTP/1.1\r\nHost: ask.test:{p}\r\n\r\n");
    let limits = ProxyLimits {
        ask_timeout: Duration::from_secs(60),
        ..ProxyLimits::default()
    };
    let proxy = NetProxy::with(
        rules(&[], &["net(ask.test)"], &[]),
        Some(hosts()),
        Some(Arc::new(OnlyB)),
        limits,
    );
    let tag = |agent: &str| CallTag {
        agent: agent.into(),
        call_id: format!("{agent}-1"),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a_addr = listener.local_addr().unwrap();
    let call_a = proxy.serve_call(listener, tag("a"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b_addr = listener.local_addr().unwrap();
    let call_b = proxy.serve_call(listener, tag("b"));
    // Agent a's question stays open.
    let mut waiting = TcpStream::connect(a_addr).await.unwrap();
    waiting.write_all(get.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Agent b is asked, answered, and through, meanwhile.
    let started = std::time::Instant::now();
    let answer = exchange(b_addr, get.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Agent a is still waiting for its own answer: b's approval is not a's.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(300), waiting.read(&mut byte)).await;
    assert!(read.is_err(), "agent a got an answer it was never given");
    drop(call_a);
    call_b.finish().await;
}
