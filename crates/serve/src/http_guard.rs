//! The door of `dsh serve --http`: a tower layer in front of rmcp's streamable HTTP service
//! that refuses a request before any of it is read further.
//!
//! - `Host` must name this server: `localhost`, a loopback address, the address the connection
//!   arrived at, or a name given with [`HttpGuard::allow_host`]; with a port, the port the
//!   connection arrived at. Anything else (a DNS rebinding page's own name) is 403.
//! - `Origin`, when present, must be `http(s)://` one of those hosts: a browser page from any
//!   other origin is 403 (`Origin: null` too).
//! - With tokens, `Authorization: Bearer TOKEN` must carry one of them: missing or wrong is
//!   401. Tokens are compared as SHA-256 digests, every one of them, byte by byte without an
//!   early exit, so the time taken says nothing of a token's content or length.
//!
//! A refused request's body is never read: nothing of it reaches rmcp, the pipeline or a log.
//! A request let in carries its [`SessionScope`] in its extensions: which token it showed (as a
//! digest), so the 2026-07-28 era's client-named sessions are kept apart per token.

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

/// What a request must show to get in. Cheap to clone.
#[derive(Clone, Default)]
pub struct HttpGuard {
    /// Shared by every clone: [`HttpGuard::set_tokens`] (a rotation) reaches them all.
    tokens: Arc<RwLock<Vec<[u8; 32]>>>,
    hosts: Arc<Vec<String>>,
}

impl std::fmt::Debug for HttpGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGuard")
            .field("tokens", &self.token_digests().len())
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` names another server (DNS rebinding): 403.
    Host,
    /// `Origin` is another site's: 403.
    Origin,
    /// No bearer token, or not one of ours: 401.
    Token,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whose a request is, as far as sessions go: `local` when no token is configured (every
/// client is the same principal), else 12 hex digits of a digest of the token it showed
/// (domain-separated from the digest compared above; the token itself is never kept or
/// shown). Put in the extensions of every request the guard lets in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionScope(pub String);

impl SessionScope {
    fn of(token_digest: &[u8; 32]) -> SessionScope {
        let mut hasher = Sha256::new();
        hasher.update(b"dsh-serve/session-scope\0");
        hasher.update(token_digest);
        let scope: String = hasher.finalize()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        SessionScope(scope)
    }
}

impl HttpGuard {
    /// A guard that asks for no token (loopback only: the caller decides).
    pub fn new() -> HttpGuard {
        HttpGuard::default()
    }

    /// Requires `Authorization: Bearer T`, T one of `tokens` (blank ones are ignored).
    pub fn with_tokens<I, S>(mut self, tokens: I) -> HttpGuard
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.tokens = Arc::new(RwLock::new(Vec::new()));
        self.set_tokens(tokens);
        self
    }

    /// Replaces the tokens of this guard and of every clone of it (a rotation: the requests
    /// that follow need one of the new tokens; sessions stay bound to the scope of the token
    /// that opened them). Blank ones are ignored.
    pub fn set_tokens<I, S>(&self, tokens: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let digests: Vec<[u8; 32]> = tokens
            .into_iter()
            .filter(|t| !t.as_ref().trim().is_empty())
            .map(|t| digest(t.as_ref().trim()))
            .collect();
        *self.tokens.write().unwrap_or_else(|e| e.into_inner()) = digests;
    }

    fn token_digests(&self) -> Vec<[u8; 32]> {
        self.tokens
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Also accepts `Host: name` (and `Origin`s of it): the name clients reach the server by.
    pub fn allow_host(mut self, name: &str) -> HttpGuard {
        let mut hosts = (*self.hosts).clone();
        hosts.push(name.trim_end_matches('.').to_ascii_lowercase());
        self.hosts = Arc::new(hosts);
        self
    }

    /// Whether a token is required.
    pub fn requires_token(&self) -> bool {
        !self.token_digests().is_empty()
    }

    /// Judges a request's headers, for a connection that arrived at `local`.
    pub fn check(&self, headers: &HeaderMap, local: SocketAddr) -> Result<(), Refusal> {
        self.admit(headers, local).map(|_| ())
    }

    /// [`HttpGuard::check`], and the [`SessionScope`] of a request let in.
    pub fn admit(&self, headers: &HeaderMap, local: SocketAddr) -> Result<SessionScope, Refusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or(Refusal::Host)?;
        if !self.host_allowed(host, local, 80) {
            return Err(Refusal::Host);
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().map_err(|_| Refusal::Origin)?;
            let (rest, default_port) = match origin.strip_prefix("http://") {
                Some(rest) => (rest, 80),
                None => (origin.strip_prefix("https://").ok_or(Refusal::Origin)?, 443),
            };
            // An origin is scheme://host[:port], nothing after.
            if rest.contains('/') || !self.host_allowed(rest, local, default_port) {
                return Err(Refusal::Origin);
            }
        }
        let tokens = self.token_digests();
        if tokens.is_empty() {
            return Ok(SessionScope("local".into()));
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or(Refusal::Token)?;
        let given = digest(given);
        // Every token, every byte: no early exit.
        let mut matched = 0u8;
        for token in tokens.iter() {
            let mut diff = 0u8;
            for (a, b) in token.iter().zip(given.iter()) {
                diff |= a ^ b;
            }
            matched |= u8::from(std::hint::black_box(diff) == 0);
        }
        if matched == 1 {
            Ok(SessionScope::of(&given))
        } else {
            Err(Refusal::Token)
        }
    }

    /// `authority` is `host[:port]` (`[v6]:port` for IPv6). The port, or `default_port` when
    /// it is left out (80 for `Host` and `http://` origins, 443 for `https://`), must be the
    /// one the connection arrived at: `http://localhost` is not the origin of a server on 8765.
    fn host_allowed(&self, authority: &str, local: SocketAddr, default_port: u16) -> bool {
        // A configured `name:port` (a load balancer's, in front of a fleet) is allowed as it
        // is, whatever port this node listens on.
        if authority.contains(':')
            && self
                .hosts
                .contains(&authority.trim_end_matches('.').to_ascii_lowercase())
        {
            return true;
        }
        let (host, port) = split_authority(authority);
        let port_ok = match port {
            Some(p) => p.parse::<u16>().is_ok_and(|p| p == local.port()),
            None => local.port() == default_port,
        };
        if !port_ok {
            return false;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host == "localhost" || self.hosts.contains(&host) {
            return true;
        }
        match host.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || ip == local.ip(),
            Err(_) => false,
        }
    }
}

/// `host[:port]` → (host, port); `[v6]:port` → (v6, port).
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((ip, "")) => (ip, None),
            Some((ip, tail)) => (ip, tail.strip_prefix(':').or(Some(""))),
            None => (authority, Some("")),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

/// The refusal's response: 403 or 401 (with `WWW-Authenticate: Bearer`), a short plain text.
fn refusal_response(refusal: Refusal) -> Response<BoxBody<Bytes, Infallible>> {
    let (status, text) = match refusal {
        Refusal::Host => (
            StatusCode::FORBIDDEN,
            "Forbidden: the Host header does not name this server",
        ),
        Refusal::Origin => (
            StatusCode::FORBIDDEN,
            "Forbidden: requests from this Origin are not allowed",
        ),
        Refusal::Token => (
            StatusCode::UNAUTHORIZED,
            "Unauthorized: a valid bearer token is required",
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // The body is never read: the connection closes after the answer.
    response
        .headers_mut()
        .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    if refusal == Refusal::Token {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

/// The layer: wraps a service so that a request passes [`HttpGuard::check`] first.
#[derive(Debug, Clone)]
pub struct GuardLayer {
    guard: HttpGuard,
    local: SocketAddr,
}

impl GuardLayer {
    /// The guard for a connection that arrived at `local`.
    pub fn new(guard: HttpGuard, local: SocketAddr) -> GuardLayer {
        GuardLayer { guard, local }
    }
}

impl<S> tower_layer::Layer<S> for GuardLayer {
    type Service = Guarded<S>;
    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            inner,
            guard: self.guard.clone(),
            local: self.local,
        }
    }
}

/// A service behind the guard.
#[derive(Debug, Clone)]
pub struct Guarded<S> {
    inner: S,
    guard: HttpGuard,
    local: SocketAddr,
}

impl<S, B> tower_service::Service<Request<B>> for Guarded<S>
where
    S: tower_service::Service<
            Request<B>,
            Response = Response<BoxBody<Bytes, Infallible>>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = Response<BoxBody<Bytes, Infallible>>;
    type Error = Infallible;
    type Future = futures::future::Either<
        futures::future::Ready<Result<Self::Response, Infallible>>,
        S::Future,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match self.guard.admit(request.headers(), self.local) {
            Ok(scope) => {
                request.extensions_mut().insert(scope);
                futures::future::Either::Right(self.inner.call(request))
            }
            Err(refusal) => {
                tracing::warn!(
                    ?refusal,
                    method = %request.method(),
                    "refused an HTTP request before reading it"
                );
                futures::future::Either::Left(futures::future::ready(Ok(refusal_response(refusal))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, http::HeaderValue::from_str(value).unwrap());
        }
        map
    }

    const LOCAL: &str = "127.0.0.1:8080";

    #[test]
    fn hosts_that_name_this_server_pass_and_others_are_refused() {
        let guard = HttpGuard::new();
        let local: SocketAddr = LOCAL.parse().unwrap();
        for ok in [
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "LOCALHOST:8080",
        ] {
            assert_eq!(
                guard.check(&headers(&[("host", ok)]), local),
                Ok(()),
                "{ok}"
            );
        }
        for bad in [
            "evil.example:8080",
            "localhost:9999",
            "localhost",
            "127.0.0.1.evil.example:8080",
            "[::1",
        ] {
            assert_eq!(
                guard.check(&headers(&[("host", bad)]), local),
                Err(Refusal::Host),
                "{bad}"
            );
        }
        assert_eq!(guard.check(&HeaderMap::new(), local), Err(Refusal::Host));
        // A bound non-loopback address is its own name; a configured name is too.
        let public: SocketAddr = "10.1.2.3:443".parse().unwrap();
        let guard = HttpGuard::new().allow_host("dsh.example");
        for ok in ["10.1.2.3:443", "dsh.example:443"] {
            assert_eq!(
                guard.check(&headers(&[("host", ok)]), public),
                Ok(()),
                "{ok}"
            );
        }
        assert_eq!(
            guard.check(&headers(&[("host", "10.9.9.9:443")]), public),
            Err(Refusal::Host)
        );
        // A configured balancer `name:port` passes with its port only, whatever the node's.
        let node: SocketAddr = "10.1.2.3:8080".parse().unwrap();
        let guard = HttpGuard::new().allow_host("lb.example:443");
        assert_eq!(
            guard.check(&headers(&[("host", "lb.example:443")]), node),
            Ok(())
        );
        for refused in ["lb.example:444", "lb.example", "lb.example:8080"] {
            assert_eq!(
                guard.check(&headers(&[("host", refused)]), node),
                Err(Refusal::Host),
                "{refused}"
            );
        }
    }

    #[test]
    fn foreign_origins_are_refused() {
        let guard = HttpGuard::new();
        let local: SocketAddr = LOCAL.parse().unwrap();
        let host = ("host", "localhost:8080");
        assert_eq!(
            guard.check(
                &headers(&[host, ("origin", "http://localhost:8080")]),
                local
            ),
            Ok(())
        );
        for bad in [
            "https://evil.example",
            "http://evil.example:8080",
            "null",
            "http://localhost:8080/path",
            "file://",
            // No port is the scheme's: not this server's 8080.
            "http://localhost",
            "https://localhost",
            "http://127.0.0.1",
        ] {
            assert_eq!(
                guard.check(&headers(&[host, ("origin", bad)]), local),
                Err(Refusal::Origin),
                "{bad}"
            );
        }
    }

    #[test]
    fn tokens_must_match_one_of_the_configured_ones() {
        let guard = HttpGuard::new().with_tokens(["alpha-token", "", "beta-token"]);
        assert!(guard.requires_token());
        let local: SocketAddr = LOCAL.parse().unwrap();
        let host = ("host", "localhost:8080");
        for ok in [
            "Bearer alpha-token",
            "bearer beta-token",
            "Bearer  beta-token ",
        ] {
            assert_eq!(
                guard.check(&headers(&[host, ("authorization", ok)]), local),
                Ok(()),
                "{ok}"
            );
        }
        for bad in [
            "Bearer alpha",
            "Bearer alpha-token2",
            "Basic alpha-token",
            "alpha-token",
            "Bearer ",
        ] {
            assert_eq!(
                guard.check(&headers(&[host, ("authorization", bad)]), local),
                Err(Refusal::Token),
                "{bad}"
            );
        }
        assert_eq!(guard.check(&headers(&[host]), local), Err(Refusal::Token));
    }

    #[test]
    fn each_token_has_its_own_scope_and_no_token_one_shared() {
        let local: SocketAddr = LOCAL.parse().unwrap();
        let host = ("host", "localhost:8080");
        let guard = HttpGuard::new().with_tokens(["alpha-token", "beta-token"]);
        let alpha = guard
            .admit(
                &headers(&[host, ("authorization", "Bearer alpha-token")]),
                local,
            )
            .unwrap();
        let beta = guard
            .admit(
                &headers(&[host, ("authorization", "Bearer beta-token")]),
                local,
            )
            .unwrap();
        assert_ne!(alpha, beta);
        assert_eq!(alpha.0.len(), 12);
        assert!(!alpha.0.contains("alpha"));
        assert_eq!(
            HttpGuard::new().admit(&headers(&[host]), local),
            Ok(SessionScope("local".into()))
        );
    }
}
