//! The proxy: one listener per call, the judgement shared by the session.

use crate::egress::{Counters, Egress, EgressLog, EgressReport, Via};
use crate::hosts::HostsFile;
use crate::tls::{Hello, client_hello};
use async_trait::async_trait;
use dsh_core::net_rules::{
    NetClass, NetRules, is_special_address, normalize_host, parse_ip_literal,
};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

/// The call a proxy serves: its question about a host under `ask` goes to the approver of
/// this agent, about this call (a served client is asked on the stream of the request that
/// made the call).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallTag {
    /// The agent that made the call (the session, when served).
    pub agent: String,
    /// The call's id.
    pub call_id: String,
}

/// The approver's answer about a host under `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetAnswer {
    /// Allowed, for the rest of the session.
    Allow,
    /// Declined, for the rest of the session.
    Decline,
    /// Nobody can be asked while this call runs (a served client of the stateless era, one
    /// that declared no elicitation): the connection is refused with a reason naming the
    /// rule to add, and nothing is remembered (a later call may be asked).
    CannotAsk,
}

/// Asks whoever approves calls about a destination under an `ask` rule.
#[async_trait]
pub trait NetAsker: Send + Sync {
    /// The answer about `host` (as the client asked for it) and `port`, for the call `call`;
    /// `rule` the rule that asks.
    async fn ask(&self, call: &CallTag, host: &str, port: u16, rule: &str) -> NetAnswer;
}

/// The proxy's bounds.
#[derive(Debug, Clone)]
pub struct ProxyLimits {
    /// Connections open at once per call (128); more are refused as they arrive.
    pub max_connections: usize,
    /// Records kept per call (512); past it attempts are counted only.
    pub max_records: usize,
    /// The most a request head may take (16 KiB).
    pub max_head: usize,
    /// How long a client has to send its request (10 s).
    pub handshake_timeout: Duration,
    /// How long connecting to a destination may take (10 s).
    pub connect_timeout: Duration,
    /// How long an `ask` waits for its answer before the connection is refused (300 s; dsh
    /// sets the pipeline's approval timeout, see [`NetProxy::with_asker`]).
    pub ask_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            max_connections: 128,
            max_records: 512,
            max_head: 16 * 1024,
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            ask_timeout: Duration::from_secs(300),
        }
    }
}

/// The session's answer about one host for one agent: `None` until given; its lock is held
/// while the question is out, so a second connection waits for that answer instead of
/// asking again (and questions about other hosts, or from other agents, do not wait).
type Answer = Arc<Mutex<Option<bool>>>;

/// What the proxy judges by: one per session, with the call it serves (`call`, empty for
/// the session itself) set in each call's copy.
#[derive(Clone)]
struct Shared {
    rules: Arc<NetRules>,
    hosts: Option<Arc<HostsFile>>,
    asker: Option<Arc<dyn NetAsker>>,
    limits: ProxyLimits,
    /// Answers to `ask`, per agent and host, for the session (shared by its calls).
    answers: Arc<std::sync::Mutex<HashMap<(String, String), Answer>>>,
    call: CallTag,
}

/// The network proxy of a session: the rules, the resolver, the approver and the session's
/// answers. [`NetProxy::serve`] runs it for one call.
#[derive(Clone)]
pub struct NetProxy {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for NetProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetProxy")
            .field("rules", &self.shared.rules)
            .finish()
    }
}

/// Why a destination is refused, and which rule refused it.
#[derive(Debug, Clone)]
struct Refusal {
    reason: String,
    rule: Option<String>,
}

fn refuse(reason: impl Into<String>, rule: Option<String>) -> Refusal {
    Refusal {
        reason: reason.into(),
        rule,
    }
}

impl NetProxy {
    /// A proxy judging by `rules`, resolving through `hosts` when given (and through the
    /// system resolver otherwise).
    pub fn new(rules: NetRules, hosts: Option<HostsFile>) -> NetProxy {
        NetProxy::with(rules, hosts, None, ProxyLimits::default())
    }

    /// A proxy with an approver for `ask` rules (without one, `ask` is a refusal naming the
    /// rule to add) and these bounds.
    pub fn with(
        rules: NetRules,
        hosts: Option<HostsFile>,
        asker: Option<Arc<dyn NetAsker>>,
        limits: ProxyLimits,
    ) -> NetProxy {
        NetProxy {
            shared: Arc::new(Shared {
                rules: Arc::new(rules),
                hosts: hosts.map(Arc::new),
                asker,
                limits,
                answers: Arc::default(),
                call: CallTag::default(),
            }),
        }
    }

    /// The same proxy, asking `asker` about destinations under `ask` (without one, `ask` is a
    /// refusal naming the rule to add), each question waiting at most `ask_timeout` (the
    /// pipeline's approval timeout); a fresh session memory of answers.
    pub fn with_asker(&self, asker: Option<Arc<dyn NetAsker>>, ask_timeout: Duration) -> NetProxy {
        NetProxy {
            shared: Arc::new(Shared {
                asker,
                limits: ProxyLimits {
                    ask_timeout,
                    ..self.shared.limits.clone()
                },
                answers: Arc::default(),
                ..(*self.shared).clone()
            }),
        }
    }

    /// The bounds it works within.
    pub fn limits(&self) -> &ProxyLimits {
        &self.shared.limits
    }

    /// The rules it judges by.
    pub fn rules(&self) -> &NetRules {
        &self.shared.rules
    }

    /// Serves one call on `listener` until the returned [`CallProxy`] is finished or dropped:
    /// then every connection it opened is closed. Its questions name no call (see
    /// [`NetProxy::serve_call`]).
    pub fn serve(&self, listener: TcpListener) -> CallProxy {
        self.serve_call(listener, CallTag::default())
    }

    /// [`NetProxy::serve`] for the call `call`: its questions about hosts under `ask` carry
    /// the call's agent and id, so the approver asks that agent's client about that call;
    /// answers are remembered per agent and host for the session.
    pub fn serve_call(&self, listener: TcpListener, call: CallTag) -> CallProxy {
        let log = Arc::new(EgressLog::new(self.shared.limits.max_records));
        let shared = Arc::new(Shared {
            call,
            ..(*self.shared).clone()
        });
        let task = tokio::spawn(accept_loop(shared, listener, log.clone()));
        CallProxy { task, log }
    }
}

/// The proxy of one running call.
pub struct CallProxy {
    task: tokio::task::JoinHandle<()>,
    log: Arc<EgressLog>,
}

impl CallProxy {
    /// Stops accepting, closes every connection of the call, and returns its records.
    pub async fn finish(mut self) -> EgressReport {
        self.task.abort();
        // Waiting for the task makes sure its connections (owned by its join set) are gone.
        let _ = (&mut self.task).await;
        let (records, omitted) = self.log.snapshot();
        EgressReport { records, omitted }
    }

    /// The records so far (the call still running).
    pub fn snapshot(&self) -> EgressReport {
        let (records, omitted) = self.log.snapshot();
        EgressReport { records, omitted }
    }
}

impl Drop for CallProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, log: Arc<EgressLog>) {
    let slots = Arc::new(Semaphore::new(shared.limits.max_connections));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else {
                    // Out of descriptors, say: wait a little rather than spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = client.set_nodelay(true);
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let shared = shared.clone();
                        let log = log.clone();
                        connections.spawn(async move {
                            handle(&shared, &log, client).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        log.push(
                            record(
                                "",
                                0,
                                Via::Unknown,
                                Some(refuse(
                                    format!(
                                        "too many connections at once (the limit is {})",
                                        shared.limits.max_connections
                                    ),
                                    None,
                                )),
                            ),
                            None,
                        );
                        drop(client);
                    }
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

fn record(host: &str, port: u16, via: Via, refusal: Option<Refusal>) -> Egress {
    let (decision, rule, reason) = match refusal {
        Some(r) => ("deny", r.rule, Some(r.reason)),
        None => ("allow", None, None),
    };
    Egress {
        host: host.to_string(),
        port,
        via,
        decision,
        rule,
        reason,
        address: None,
        bytes_up: 0,
        bytes_down: 0,
    }
}

async fn handle(shared: &Shared, log: &EgressLog, mut client: TcpStream) {
    let mut buf = Vec::with_capacity(1024);
    let first = tokio::time::timeout(
        shared.limits.handshake_timeout,
        read_more(&mut client, &mut buf, shared.limits.max_head),
    )
    .await;
    if !matches!(first, Ok(Ok(n)) if n > 0) {
        return;
    }
    if buf[0] == 5 {
        crate::socks::handle(shared_ref(shared), log, client, buf).await;
    } else {
        http(shared, log, client, buf).await;
    }
}

fn shared_ref(shared: &Shared) -> Judge<'_> {
    Judge { shared }
}

/// Reads what is there into `buf` (at most `max` bytes in all).
pub(crate) async fn read_more<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<usize> {
    let room = max.saturating_sub(buf.len()).min(8192);
    if room == 0 {
        return Ok(0);
    }
    let start = buf.len();
    buf.resize(start + room, 0);
    let n = r.read(&mut buf[start..]).await;
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    n
}

/// The judgement, as the protocol handlers use it.
pub(crate) struct Judge<'a> {
    shared: &'a Shared,
}

impl Judge<'_> {
    pub(crate) fn limits(&self) -> &ProxyLimits {
        &self.shared.limits
    }

    pub(crate) async fn admit_and_connect(
        &self,
        host: &str,
        port: u16,
    ) -> Result<(TcpStream, SocketAddr, Option<String>), (String, Option<String>, bool)> {
        admit_and_connect(self.shared, host, port).await
    }
}

/// Judges `host:port`, resolves it, checks the addresses, connects. The error is the reason,
/// the rule, and whether the destination was allowed (a connection that failed).
async fn admit_and_connect(
    shared: &Shared,
    host: &str,
    port: u16,
) -> Result<(TcpStream, SocketAddr, Option<String>), (String, Option<String>, bool)> {
    let (addrs, rule) = admit(shared, host, port)
        .await
        .map_err(|r| (r.reason, r.rule, false))?;
    let mut last = String::from("no address");
    for addr in addrs {
        let target = SocketAddr::new(addr, port);
        match tokio::time::timeout(shared.limits.connect_timeout, TcpStream::connect(target)).await
        {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, target, rule));
            }
            Ok(Err(e)) => last = format!("{target}: {e}"),
            Err(_) => last = format!("{target}: no answer within the connect timeout"),
        }
    }
    Err((
        format!("allowed, but the connection failed: {last}"),
        rule,
        true,
    ))
}

fn rule_name(rule: &Option<String>) -> Option<String> {
    Some(rule.clone().unwrap_or_else(|| "default".into()))
}

/// The judgement: the rules on the name as asked, `ask` through the approver, then the
/// resolved addresses.
async fn admit(
    shared: &Shared,
    host: &str,
    port: u16,
) -> Result<(Vec<IpAddr>, Option<String>), Refusal> {
    let rules = &shared.rules;
    let literal = parse_ip_literal(host);
    let name = normalize_host(host);
    if literal.is_none() && !is_host_name(&name) {
        return Err(refuse(format!("`{host}` is not a host name"), None));
    }
    let verdict = rules.judge(host, port);
    let rule = rule_name(&verdict.rule);
    match verdict.class {
        NetClass::Allow => {}
        NetClass::Deny => {
            let reason = match (&verdict.rule, literal) {
                (Some(r), _) => format!("{host}:{port} is denied by `{r}`"),
                (None, Some(_)) => format!(
                    "{host} is an IP literal no rule names; add `net({host})` to `allow` to reach it"
                ),
                (None, None) => format!(
                    "no rule allows {name}:{port} (network rules default to deny); add `net({name})` to `allow` to reach it"
                ),
            };
            return Err(refuse(reason, rule));
        }
        NetClass::Ask => {
            let asked_by = verdict
                .rule
                .clone()
                .unwrap_or_else(|| "[shell] net_default = \"ask\"".into());
            if !ask(shared, &name, port, &asked_by).await? {
                return Err(refuse(
                    format!("{name} was declined when asked (by `{asked_by}`)"),
                    rule,
                ));
            }
        }
    }
    // Resolve: a literal is itself; a name from the hosts file (which names its addresses),
    // or from the system resolver.
    let (addrs, named_by_file) = match literal {
        Some(ip) => (vec![ip], true),
        None => match &shared.hosts {
            Some(hosts) => match hosts.lookup(&name) {
                Some(list) => (list.to_vec(), true),
                None => {
                    return Err(refuse(
                        format!(
                            "{name} is not in the --net-hosts file, which replaces the resolver"
                        ),
                        rule,
                    ));
                }
            },
            None => match tokio::net::lookup_host((name.as_str(), port)).await {
                Ok(list) => (list.map(|a| a.ip()).collect(), false),
                Err(e) => return Err(refuse(format!("{name} does not resolve: {e}"), rule)),
            },
        },
    };
    let mut usable = Vec::new();
    let mut first_refusal = None;
    for ip in addrs {
        let ip = dsh_core::net_rules::canonical_ip(ip);
        if let Some(r) = rules.denies_address(ip, port) {
            first_refusal.get_or_insert_with(|| {
                refuse(
                    format!("{name} resolves to {ip}, denied by `{r}`"),
                    Some(r.to_string()),
                )
            });
            continue;
        }
        if is_special_address(ip) && !named_by_file && !rules.names_address(ip, port) {
            first_refusal.get_or_insert_with(|| {
                refuse(
                    format!(
                        "{name} resolves to {ip} ({}), which no rule names; add `net({ip})` to `allow` to reach it",
                        space(ip)
                    ),
                    rule.clone(),
                )
            });
            continue;
        }
        usable.push(ip);
    }
    if usable.is_empty() {
        return Err(
            first_refusal.unwrap_or_else(|| refuse(format!("{name} resolves to no address"), rule))
        );
    }
    Ok((usable, rule))
}

fn space(ip: IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => "loopback",
        IpAddr::V4(v4) if v4.is_link_local() => "link-local: the cloud metadata range",
        IpAddr::V4(v4) if v4.is_private() => "private",
        IpAddr::V4(v4) if v4.is_multicast() => "multicast",
        IpAddr::V6(v6) if v6.is_loopback() => "loopback",
        IpAddr::V6(v6) if v6.is_multicast() => "multicast",
        _ => "reserved or local",
    }
}

fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

/// Asks once per host and session; an accept and a decline are both remembered, and so is a
/// question left unanswered until the timeout (as a decline).
async fn ask(shared: &Shared, name: &str, port: u16, rule: &str) -> Result<bool, Refusal> {
    let cannot_ask = || {
        refuse(
            format!(
                "{name} is under `{rule}` and this client cannot be asked in the middle of a call; add `net({name})` to `allow` to reach it"
            ),
            Some(rule.to_string()),
        )
    };
    let Some(asker) = &shared.asker else {
        return Err(cannot_ask());
    };
    let key = (shared.call.agent.clone(), name.to_string());
    let slot = shared
        .answers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_default()
        .clone();
    let mut answer = slot.lock().await;
    if let Some(given) = *answer {
        return Ok(given);
    }
    let asked = asker.ask(&shared.call, name, port, rule);
    match tokio::time::timeout(shared.limits.ask_timeout, asked).await {
        Ok(NetAnswer::CannotAsk) => Err(cannot_ask()),
        Ok(given) => {
            let allowed = given == NetAnswer::Allow;
            *answer = Some(allowed);
            Ok(allowed)
        }
        Err(_) => {
            *answer = Some(false);
            Err(refuse(
                format!(
                    "{name} was asked about (by `{rule}`) and no answer came within the approval timeout"
                ),
                Some(rule.to_string()),
            ))
        }
    }
}

/// The reply that tells a client why: a 403 with a one-line reason.
async fn refuse_http(client: &mut TcpStream, status: &str, reason: &str) {
    let line: String = reason.chars().filter(|c| !c.is_control()).collect();
    let body = format!("dsh: {line}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\nX-Dsh-Refused: {line}\r\n\r\n",
        body.len()
    );
    let _ = client.write_all(head.as_bytes()).await;
    let _ = client.write_all(body.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// `host:port`, `[v6]:port`, or `host` with `default`.
pub(crate) fn split_authority(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let close = rest.find(']')?;
        let host = &rest[..close];
        let after = &rest[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default?,
            None => return None,
        };
        (format!("[{host}]"), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse().ok()?),
            Some(_) => return None,
            None => (authority.to_string(), default?),
        }
    };
    if host.is_empty() || port == 0 {
        return None;
    }
    Some((host, port))
}

async fn http(shared: &Shared, log: &EgressLog, mut client: TcpStream, mut buf: Vec<u8>) {
    let limits = &shared.limits;
    // The whole head.
    let head_len = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() >= limits.max_head {
            log.push(
                record(
                    "",
                    0,
                    Via::Unknown,
                    Some(refuse("the request head is too long", None)),
                ),
                None,
            );
            refuse_http(
                &mut client,
                "431 Request Header Fields Too Large",
                "the request head is too long",
            )
            .await;
            return;
        }
        match tokio::time::timeout(
            limits.handshake_timeout,
            read_more(&mut client, &mut buf, limits.max_head),
        )
        .await
        {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = req.parse(&buf[..head_len]);
    let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) =
        (parsed, req.method, req.path)
    else {
        log.push(
            record(
                "",
                0,
                Via::Unknown,
                Some(refuse("a request that is not HTTP, nor SOCKS5", None)),
            ),
            None,
        );
        refuse_http(&mut client, "400 Bad Request", "not an HTTP proxy request").await;
        return;
    };
    let method = method.to_string();
    let target = target.to_string();
    let host_header = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| String::from_utf8_lossy(h.value).trim().to_string());
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_authority(&target, None) else {
            log.push(
                record(
                    &target,
                    0,
                    Via::Connect,
                    Some(refuse("the CONNECT target is not HOST:PORT", None)),
                ),
                None,
            );
            refuse_http(
                &mut client,
                "400 Bad Request",
                "the CONNECT target is not HOST:PORT",
            )
            .await;
            return;
        };
        let rest = buf[head_len..].to_vec();
        match admit_and_connect(shared, &host, port).await {
            Err((reason, rule, allowed)) => {
                let refusal = (reason, rule, allowed);
                not_admitted(log, &mut client, &host, port, Via::Connect, refusal).await;
            }
            Ok((upstream, addr, rule)) => {
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                tunnel(
                    log,
                    client,
                    upstream,
                    rest,
                    &host,
                    port,
                    Via::Connect,
                    addr,
                    rule,
                    limits,
                )
                .await;
            }
        }
        return;
    }
    // Plain HTTP: an absolute `http://` URI.
    let Some(after_scheme) = strip_prefix_ci(&target, "http://") else {
        let reason = if strip_prefix_ci(&target, "https://").is_some() {
            "an https:// URI in a plain request: use CONNECT"
        } else {
            "not a proxy request (the target is not an absolute http:// URI)"
        };
        log.push(
            record(&target, 0, Via::Http, Some(refuse(reason, None))),
            None,
        );
        refuse_http(&mut client, "400 Bad Request", reason).await;
        return;
    };
    let end = after_scheme.find(['/', '?']).unwrap_or(after_scheme.len());
    let authority = &after_scheme[..end];
    let path = match &after_scheme[end..] {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    if authority.contains('@') {
        log.push(
            record(
                authority,
                0,
                Via::Http,
                Some(refuse("credentials in the URI", None)),
            ),
            None,
        );
        refuse_http(
            &mut client,
            "400 Bad Request",
            "credentials in the URI are not forwarded",
        )
        .await;
        return;
    }
    let Some((host, port)) = split_authority(authority, Some(80)) else {
        log.push(
            record(
                authority,
                0,
                Via::Http,
                Some(refuse("the URI's host is not HOST[:PORT]", None)),
            ),
            None,
        );
        refuse_http(
            &mut client,
            "400 Bad Request",
            "the URI's host is not HOST[:PORT]",
        )
        .await;
        return;
    };
    if let Some(h) = &host_header {
        let same = split_authority(h, Some(80))
            .is_some_and(|(hh, hp)| normalize_host(&hh) == normalize_host(&host) && hp == port);
        if !same {
            let reason =
                format!("the Host header `{h}` differs from the request's target {host}:{port}");
            log.push(
                record(&host, port, Via::Http, Some(refuse(reason.clone(), None))),
                None,
            );
            refuse_http(&mut client, "403 Forbidden", &reason).await;
            return;
        }
    }
    match admit_and_connect(shared, &host, port).await {
        Err((reason, rule, allowed)) => {
            let refusal = (reason, rule, allowed);
            not_admitted(log, &mut client, &host, port, Via::Http, refusal).await;
        }
        Ok((upstream, addr, rule)) => {
            let mut head = format!("{method} {path} HTTP/1.1\r\n");
            if host_header.is_none() {
                head.push_str(&format!("Host: {authority}\r\n"));
            }
            for h in req.headers.iter() {
                let n = h.name.to_ascii_lowercase();
                if matches!(
                    n.as_str(),
                    "connection" | "proxy-connection" | "keep-alive" | "proxy-authorization"
                ) {
                    continue;
                }
                head.push_str(h.name);
                head.push_str(": ");
                head.push_str(&String::from_utf8_lossy(h.value));
                head.push_str("\r\n");
            }
            // One request per connection: a second one on it could name another host.
            head.push_str("Connection: close\r\n\r\n");
            let mut first = head.into_bytes();
            first.extend_from_slice(&buf[head_len..]);
            tunnel(
                log,
                client,
                upstream,
                first,
                &host,
                port,
                Via::Http,
                addr,
                rule,
                limits,
            )
            .await;
        }
    }
}

/// A CONNECT or plain-HTTP request that [`admit_and_connect`] turned away: logged, and told
/// `403` (the rules refused it) or `502` (allowed, but the connection failed).
async fn not_admitted(
    log: &EgressLog,
    client: &mut TcpStream,
    host: &str,
    port: u16,
    via: Via,
    (reason, rule, allowed): (String, Option<String>, bool),
) {
    log.push(
        denied_or_failed(host, port, via, reason.clone(), rule, allowed),
        None,
    );
    let status = if allowed {
        "502 Bad Gateway"
    } else {
        "403 Forbidden"
    };
    refuse_http(client, status, &reason).await;
}

fn denied_or_failed(
    host: &str,
    port: u16,
    via: Via,
    reason: String,
    rule: Option<String>,
    allowed: bool,
) -> Egress {
    let mut r = record(host, port, via, Some(refuse(reason, rule)));
    if allowed {
        r.decision = "allow";
    }
    r
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Carries bytes both ways, counting them. For a tunnel (CONNECT, SOCKS5) the client's first
/// bytes are checked before any of them reaches the destination: a TLS ClientHello whose
/// server name differs from the target ends the tunnel (the record becomes a refusal). The
/// destination's bytes flow meanwhile, for protocols where the server speaks first.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn tunnel(
    log: &EgressLog,
    client: TcpStream,
    upstream: TcpStream,
    mut first: Vec<u8>,
    host: &str,
    port: u16,
    via: Via,
    addr: SocketAddr,
    rule: Option<String>,
    limits: &ProxyLimits,
) {
    let counters = Arc::new(Counters::default());
    let mut rec = record(host, port, via, None);
    rec.rule = rule;
    rec.address = Some(addr.to_string());
    let index = log.push(rec, Some(counters.clone()));
    let (mut cr, mut cw) = client.into_split();
    let (mut ur, mut uw) = upstream.into_split();
    let down = carry(&mut ur, &mut cw, &counters.down);
    tokio::pin!(down);
    let mut down_done = false;
    if via != Via::Http {
        let verdict = {
            let check = check_hello(&mut cr, &mut first, host, via, limits);
            tokio::pin!(check);
            loop {
                tokio::select! {
                    v = &mut check => break v,
                    _ = &mut down, if !down_done => down_done = true,
                }
            }
        };
        if let Err(reason) = verdict {
            log.refuse(index, reason);
            return;
        }
    }
    let up = async {
        if !first.is_empty() {
            if uw.write_all(&first).await.is_err() {
                return;
            }
            counters.up.fetch_add(first.len() as u64, Ordering::Relaxed);
        }
        carry(&mut cr, &mut uw, &counters.up).await;
    };
    if down_done {
        up.await;
    } else {
        tokio::join!(up, down);
    }
}

/// Reads the client's first bytes until they are known not to be TLS, or hold a whole
/// ClientHello whose server name is the target's (or names none).
async fn check_hello<R: AsyncRead + Unpin>(
    client: &mut R,
    first: &mut Vec<u8>,
    host: &str,
    via: Via,
    limits: &ProxyLimits,
) -> Result<(), String> {
    let max = limits.max_head + 5;
    loop {
        match client_hello(first) {
            Hello::NotTls if !first.is_empty() => return Ok(()),
            Hello::Tls(Some(sni)) if normalize_host(&sni) != normalize_host(host) => {
                return Err(format!(
                    "the TLS server name `{sni}` differs from the {} target {host}",
                    if via == Via::Socks5 {
                        "SOCKS5"
                    } else {
                        "CONNECT"
                    }
                ));
            }
            Hello::Tls(_) => return Ok(()),
            Hello::Malformed => return Err("a TLS ClientHello that does not parse".into()),
            Hello::NotTls | Hello::NeedMore => {
                if first.len() >= max {
                    return Err("a TLS ClientHello too long to check".into());
                }
                // No deadline while nothing came: a client may wait for the server to speak.
                let read = if first.is_empty() {
                    read_more(client, first, max).await
                } else {
                    tokio::time::timeout(limits.handshake_timeout, read_more(client, first, max))
                        .await
                        .unwrap_or(Ok(0))
                };
                match read {
                    Ok(n) if n > 0 => {}
                    _ => return Err("the client closed the tunnel before sending anything".into()),
                }
            }
        }
    }
}

/// Copies from `r` to `w` until the end of `r`, then shuts `w` down for writing, counting the
/// bytes `w` took: through a pipe with `splice(2)` (the bytes never enter user space), or
/// through a buffer where no pipe can be made.
async fn carry(r: &mut OwnedReadHalf, w: &mut OwnedWriteHalf, count: &AtomicU64) {
    match crate::splice::Pipe::new() {
        Ok(pipe) => {
            pipe.carry(r, w, count).await;
            let _ = w.shutdown().await;
        }
        Err(e) => {
            tracing::debug!(error = %e, "no pipe for splice: copying through a buffer");
            pump(r, w, count).await;
        }
    }
}

/// Copies until the end of `r`, then shuts `w` down for writing.
async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    count: &std::sync::atomic::AtomicU64,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
    let _ = w.shutdown().await;
}

/// `record` for the SOCKS5 handler.
pub(crate) fn refused(
    host: &str,
    port: u16,
    via: Via,
    reason: String,
    rule: Option<String>,
    allowed: bool,
) -> Egress {
    denied_or_failed(host, port, via, reason, rule, allowed)
}

/// Whether the name is acceptable (for SOCKS5).
pub(crate) fn plain_record(host: &str, port: u16, via: Via, reason: &str) -> Egress {
    record(host, port, via, Some(refuse(reason, None)))
}

#[cfg(test)]
mod tests {
    use super::split_authority;

    #[test]
    fn authorities() {
        assert_eq!(split_authority("a.b:443", None), Some(("a.b".into(), 443)));
        assert_eq!(split_authority("a.b", Some(80)), Some(("a.b".into(), 80)));
        assert_eq!(
            split_authority("[::1]:8080", None),
            Some(("[::1]".into(), 8080))
        );
        assert_eq!(split_authority("a.b", None), None);
        assert_eq!(split_authority("::1:80", None), None);
        assert_eq!(split_authority("a.b:0", None), None);
    }
}
