//! `dsh serve --http ADDR --view VIEW_ADDR`: the page of each live session (the same page as
//! `dsh view`), served on a listener of its own, reloading as the log grows.
//!
//! The door is the MCP door ([`HttpGuard`]): `Host` must name this server and an `Origin`, when
//! sent, must be this server's (403 otherwise), and with tokens every request needs one. A
//! browser cannot send a bearer header when it navigates, so the token is exchanged once: the
//! form of `GET /login` posts it (`POST /login`, never in a URL) and the answer sets it as a
//! cookie that is `HttpOnly` (no script reads it) and `SameSite=Strict` (no other site's page
//! sends it), then redirects to `/`. A client that can send headers (`curl`) may give
//! `Authorization: Bearer TOKEN` instead. Every request is judged again against the current
//! tokens, so a rotation (SIGHUP) retires the cookies of a retired token.
//!
//! A token sees only its own sessions: the logs whose name starts with its scope
//! ([`SessionScope`]: a digest of the token, never the token), those of both eras. Without
//! tokens (the loopback default) every client is one principal and sees every session.
//!
//! - `GET /`: the list of the token's sessions (newest first), reloading every few seconds;
//! - `GET /s/ID`: the page of session `ID` ([`dsh_view::render_lines`] of its log), reloading;
//!   a session of another token is 404, exactly as one that does not exist;
//! - anything else is 404; no token or a wrong one is 401 with the login form.

use crate::error::ServeError;
use crate::http_guard::{HttpGuard, Refusal, SessionScope};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The cookie that carries the token (hex-encoded).
pub const VIEW_COOKIE: &str = "dsh_view_token";

/// How often a page of a live session reloads, in seconds.
pub const RELOAD_SECS: u32 = 3;

/// The largest login form body read.
const MAX_FORM: usize = 4096;

/// How long a login form body may take.
const FORM_TIMEOUT: Duration = Duration::from_secs(10);

/// Pages being made at once (each reads a whole log).
const RENDERS: usize = 4;

/// Connections at once.
const CONNECTIONS: usize = 64;

type Body = Full<Bytes>;

struct View {
    guard: HttpGuard,
    logs: PathBuf,
    renders: tokio::sync::Semaphore,
}

/// Serves the pages of the sessions whose logs are in folder `logs` on `listener`, behind
/// `guard`, until `shutdown` resolves.
pub async fn serve_view(
    listener: TcpListener,
    guard: HttpGuard,
    logs: PathBuf,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let view = Arc::new(View {
        guard,
        logs,
        renders: tokio::sync::Semaphore::new(RENDERS),
    });
    let places = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    let stop = CancellationToken::new();
    let connections = tokio_util::task::TaskTracker::new();
    tokio::pin!(shutdown);
    loop {
        let place = tokio::select! {
            () = &mut shutdown => break,
            place = places.clone().acquire_owned() => match place {
                Ok(place) => place,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a view connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(local) = stream.local_addr() else {
            continue;
        };
        let view = view.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let _place = place;
            let service = hyper::service::service_fn(move |request| {
                let view = view.clone();
                async move { Ok::<_, std::convert::Infallible>(view.answer(request, local).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = stop.cancelled() => connection.as_mut().graceful_shutdown(),
            }
        });
    }
    stop.cancel();
    connections.close();
    let _ = tokio::time::timeout(Duration::from_secs(2), connections.wait()).await;
    Ok(())
}

impl View {
    async fn answer(&self, request: Request<Incoming>, local: SocketAddr) -> Response<Body> {
        let path = request.uri().path().to_string();
        let method = request.method().clone();
        if path == "/login" && method == Method::POST {
            return self.login(request, local).await;
        }
        let scope = match self.admit(request.headers(), local) {
            Ok(scope) => scope,
            Err(Refusal::Token) => return login_page(StatusCode::UNAUTHORIZED, false),
            Err(refusal) => return forbidden(refusal),
        };
        if method != Method::GET && method != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed");
        }
        match path.as_str() {
            "/" => self.list(&scope).await,
            "/login" => login_page(StatusCode::OK, false),
            _ => match path.strip_prefix("/s/") {
                Some(id) => self.page(&scope, id).await,
                None => not_found(),
            },
        }
    }

    /// The guard's judgement, with the cookie's token standing for a bearer header when the
    /// request has none.
    fn admit(&self, headers: &HeaderMap, local: SocketAddr) -> Result<SessionScope, Refusal> {
        if headers.contains_key(header::AUTHORIZATION) {
            return self.guard.admit(headers, local);
        }
        match cookie_token(headers) {
            Some(token) => {
                let mut with = headers.clone();
                match HeaderValue::from_str(&format!("Bearer {token}")) {
                    Ok(value) => {
                        with.insert(header::AUTHORIZATION, value);
                        self.guard.admit(&with, local)
                    }
                    Err(_) => {
                        // Not a token any guard holds; Host and Origin are still judged first.
                        self.guard.admit(headers, local)
                    }
                }
            }
            None => self.guard.admit(headers, local),
        }
    }

    /// `POST /login` with `token=...` (a form): a valid token becomes the cookie.
    async fn login(&self, request: Request<Incoming>, local: SocketAddr) -> Response<Body> {
        // Host and Origin before anything of the body is read.
        let mut bare = request.headers().clone();
        bare.remove(header::AUTHORIZATION);
        bare.remove(header::COOKIE);
        match self.guard.admit(&bare, local) {
            Ok(_) | Err(Refusal::Token) => {}
            Err(refusal) => return forbidden(refusal),
        }
        let body = Limited::new(request.into_body(), MAX_FORM);
        let body = match tokio::time::timeout(FORM_TIMEOUT, body.collect()).await {
            Ok(Ok(body)) => body.to_bytes(),
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "Bad request: the form was not read",
                );
            }
        };
        let Some(token) = form_field(&body, "token") else {
            return login_page(StatusCode::UNAUTHORIZED, true);
        };
        let token = token.trim().to_string();
        let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) else {
            return login_page(StatusCode::UNAUTHORIZED, true);
        };
        bare.insert(header::AUTHORIZATION, value);
        if self.guard.admit(&bare, local).is_err() || !self.guard.requires_token() {
            // Without tokens there is nothing to log in with: every client sees every page.
            if !self.guard.requires_token() {
                return redirect_home(None);
            }
            tracing::warn!("a view login with a token that is not valid");
            return login_page(StatusCode::UNAUTHORIZED, true);
        }
        redirect_home(Some(&hex(token.as_bytes())))
    }

    /// The token's sessions, newest first.
    async fn list(&self, scope: &SessionScope) -> Response<Body> {
        let folder = self.logs.clone();
        let scope = scope.0.clone();
        let found = tokio::task::spawn_blocking(move || sessions_of(&folder, &scope)).await;
        let sessions = found.unwrap_or_default();
        let mut items = String::new();
        for (id, modified) in &sessions {
            let id = dsh_view::escape_html(id);
            let age = modified
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .map(|d| format!(" <small>(written {} s ago)</small>", d.as_secs()))
                .unwrap_or_default();
            items.push_str(&format!("<li><a href=\"/s/{id}\">{id}</a>{age}</li>\n"));
        }
        if sessions.is_empty() {
            items.push_str("<li>No session yet.</li>\n");
        }
        let body = format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"{RELOAD_SECS}\">\
             <title>dsh sessions</title></head><body><h1>dsh sessions</h1>\
             <p>{} session(s), newest first.</p><ul id=\"sessions\">\n{items}</ul></body></html>\n",
            sessions.len()
        );
        html(StatusCode::OK, body)
    }

    /// The page of session `id`, when it is the scope's.
    async fn page(&self, scope: &SessionScope, id: &str) -> Response<Body> {
        if !belongs(id, &scope.0) {
            return not_found();
        }
        let path = self.logs.join(format!("{id}.jsonl"));
        let Ok(_render) = self.renders.acquire().await else {
            return text(StatusCode::SERVICE_UNAVAILABLE, "Service unavailable");
        };
        let title = id.to_string();
        let made = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&path)?;
            let options = dsh_view::PageOptions {
                reload_secs: Some(RELOAD_SECS),
                ..dsh_view::PageOptions::new(title)
            };
            dsh_view::render_lines(std::io::BufReader::new(file), &options)
                .map_err(|e| std::io::Error::other(e.to_string()))
        })
        .await;
        match made {
            Ok(Ok(page)) => html(StatusCode::OK, page),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => not_found(),
            Ok(Err(e)) => {
                tracing::warn!(session = %id, error = %e, "a session's page could not be made");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The page could not be made",
                )
            }
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "a session's page could not be made");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The page could not be made",
                )
            }
        }
    }
}

/// Whether log `id` is a session of `scope`: `scope` itself or `scope-NAME`, and nothing in
/// it that could leave the folder.
fn belongs(id: &str, scope: &str) -> bool {
    let safe = !id.is_empty()
        && id.len() <= 200
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    safe && (id == scope
        || id
            .strip_prefix(scope)
            .is_some_and(|rest| rest.starts_with('-')))
}

/// The sessions of `scope` in `folder`, newest first.
fn sessions_of(folder: &Path, scope: &str) -> Vec<(String, Option<SystemTime>)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut found: Vec<(String, Option<SystemTime>)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let id = name.strip_suffix(".jsonl")?;
            belongs(id, scope).then(|| {
                let modified = entry.metadata().ok().and_then(|m| m.modified().ok());
                (id.to_string(), modified)
            })
        })
        .collect();
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    found
}

/// The token of the view cookie, when the request carries a well-formed one.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == VIEW_COOKIE)
        .and_then(|(_, value)| unhex(value.trim()))
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    body.split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| percent_decode(value))
}

fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = value.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 2048 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Headers every answer carries: not cached, not framed by another site, no referrer.
fn secured(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn html(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secured(response)
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    secured(response)
}

fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "Not found")
}

fn forbidden(refusal: Refusal) -> Response<Body> {
    tracing::warn!(?refusal, "refused a view request");
    let mut response = text(
        StatusCode::FORBIDDEN,
        "Forbidden: the Host or Origin is not this server's",
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The login form: no script, posts to `/login` on this origin only.
fn login_page(status: StatusCode, wrong: bool) -> Response<Body> {
    let note = if wrong {
        "<p id=\"wrong\">That token is not valid.</p>"
    } else {
        ""
    };
    let body = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         form-action 'self'\"><title>dsh: log in</title></head><body>\
         <h1>dsh sessions</h1>{note}<form method=\"post\" action=\"/login\">\
         <label>Bearer token <input id=\"token\" name=\"token\" type=\"password\" \
         autocomplete=\"off\"></label> <button id=\"login\" type=\"submit\">Show my sessions\
         </button></form></body></html>\n"
    );
    let mut response = html(status, body);
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// 303 to `/`, setting the cookie when there is a token.
fn redirect_home(token_hex: Option<&str>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SEE_OTHER;
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/"));
    if let Some(token_hex) = token_hex
        && let Ok(cookie) = HeaderValue::from_str(&format!(
            "{VIEW_COOKIE}={token_hex}; HttpOnly; SameSite=Strict; Path=/"
        ))
    {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    secured(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_owns_its_own_logs_only() {
        assert!(belongs("abc123", "abc123"));
        assert!(belongs("abc123-build", "abc123"));
        assert!(!belongs("abc1234-build", "abc123"));
        assert!(!belongs("abc123-../x", "abc123"));
        assert!(!belongs("abc123-a/b", "abc123"));
        assert!(!belongs("other-x", "abc123"));
        assert!(!belongs("", ""));
    }

    #[test]
    fn forms_and_cookies_read_back() {
        assert_eq!(
            form_field(b"a=1&token=t%2Bx+y%26", "token").as_deref(),
            Some("t+x y&")
        );
        assert_eq!(form_field(b"token=%zz", "token"), None);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("x=1; {VIEW_COOKIE}={}", hex(b"s3cret"))).unwrap(),
        );
        assert_eq!(cookie_token(&headers).as_deref(), Some("s3cret"));
    }
}
