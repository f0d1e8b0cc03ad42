//! What a request let in by the [`crate::HttpGuard`] passes before rmcp sees it: the path
//! (`/mcp` only), the session it names (only its own token's), the number of its token's
//! requests in flight, a body read within [`ServeLimits::body_timeout`] and parsed as JSON,
//! and, for an `initialize`, a free place among the live sessions. Every refusal here is a
//! clear answer (JSON-RPC errors for what JSON-RPC can carry), and nothing of a refused
//! request reaches a session or a log.

use crate::http_guard::SessionScope;
use crate::limits::{Owner, Refused, RequestTicket, ServeLimits, SessionTable};
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The path MCP is served on.
pub const MCP_PATH: &str = "/mcp";
/// The largest request body read (rmcp's own bound).
const MAX_BODY: usize = 4 * 1024 * 1024;
const SESSION_ID_HEADER: &str = "mcp-session-id";

/// The JSON-RPC code of a refused new session (the server's or the token's bound).
pub const SESSION_LIMIT_CODE: i32 = -32001;

type Answer = Response<BoxBody<Bytes, Infallible>>;

/// A refusal in plain text. The connection is closed after it: the request's body may be
/// unread, and reading it to keep the connection would let a client that never sends it hold
/// the connection.
fn text(status: StatusCode, text: &'static str) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

fn jsonrpc_error(status: StatusCode, id: Value, code: i32, message: String) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Wraps rmcp's service (through [`crate::http`]'s stream watch).
#[derive(Clone)]
pub(crate) struct Admission<S> {
    pub(crate) inner: S,
    pub(crate) table: Arc<SessionTable>,
}

/// A response body that holds its request's ticket until it ends or is dropped.
struct Ticketed {
    inner: BoxBody<Bytes, Infallible>,
    _ticket: Option<RequestTicket>,
}

impl Body for Ticketed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What a parsed body is, as far as admission goes.
enum Shape {
    Initialize,
    /// A `tools/call` whose params have no string `name`: its id.
    NamelessCall(Value),
    Other,
}

fn shape(message: &Value) -> Shape {
    let method = message.get("method").and_then(Value::as_str);
    match method {
        Some("initialize") if message.get("id").is_some() => Shape::Initialize,
        Some("tools/call") if message.get("id").is_some() => {
            let named = message
                .get("params")
                .and_then(|p| p.get("name"))
                .is_some_and(Value::is_string);
            if named {
                Shape::Other
            } else {
                Shape::NamelessCall(message.get("id").cloned().unwrap_or(Value::Null))
            }
        }
        _ => Shape::Other,
    }
}

impl<S, B> tower_service::Service<Request<B>> for Admission<S>
where
    S: tower_service::Service<Request<Full<Bytes>>, Response = Answer, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Answer;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Answer, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let mut inner = self.inner.clone();
        let table = self.table.clone();
        Box::pin(async move { Ok(admit(&mut inner, &table, request).await) })
    }
}

/// Reads `body` within the body timeout: the bytes, or the answer that refuses it.
async fn read_body<B>(body: B, limits: &ServeLimits) -> Result<Bytes, Answer>
where
    B: Body<Data = Bytes> + Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match tokio::time::timeout(limits.body_timeout, Limited::new(body, MAX_BODY).collect()).await {
        Err(_) => Err(text(
            StatusCode::REQUEST_TIMEOUT,
            "Request Timeout: the request body did not arrive in time",
        )),
        Ok(Err(e)) => {
            let too_large = e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            Err(if too_large {
                text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Payload Too Large: a request body is at most 4 MiB",
                )
            } else {
                text(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: the request body could not be read",
                )
            })
        }
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

async fn admit<S, B>(inner: &mut S, table: &Arc<SessionTable>, request: Request<B>) -> Answer
where
    S: tower_service::Service<Request<Full<Bytes>>, Response = Answer, Error = Infallible>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if request.uri().path() != MCP_PATH {
        return text(
            StatusCode::NOT_FOUND,
            "Not Found: MCP is served on /mcp only",
        );
    }
    let scope = request
        .extensions()
        .get::<SessionScope>()
        .map(|s| s.0.clone())
        .unwrap_or_else(|| "local".into());
    let session = request
        .headers()
        .get(SESSION_ID_HEADER)
        .map(|v| v.to_str().unwrap_or_default().to_string());
    let not_found = || text(StatusCode::NOT_FOUND, "Not Found: Session not found");
    let method = request.method().clone();
    // A GET stream is not counted: there is one at most per live session (bounded by the
    // session bounds), and an open one must not keep its session from being idle.
    let ticket = if method == Method::GET {
        if let Some(id) = &session
            && table.owner(id, &scope) != Owner::Own
        {
            return not_found();
        }
        None
    } else {
        match table.begin_request(&scope, session.as_deref()) {
            Ok(ticket) => Some(ticket),
            Err(Refused::NotFound) => return not_found(),
            Err(Refused::TooMany) => {
                let mut answer = text(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too Many Requests: this token has its maximum of requests in flight",
                );
                answer
                    .headers_mut()
                    .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
                return answer;
            }
        }
    };
    let (parts, body) = request.into_parts();
    let mut slot = None;
    let mut bytes = Bytes::new();
    if method == Method::POST {
        bytes = match read_body(body, table.limits()).await {
            Ok(bytes) => bytes,
            Err(answer) => return answer,
        };
        let message: Value = match serde_json::from_slice(&bytes) {
            Ok(message) => message,
            Err(e) => {
                return jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    -32700,
                    format!("Parse error: the request body is not JSON ({e})"),
                );
            }
        };
        match shape(&message) {
            Shape::NamelessCall(id) => {
                return jsonrpc_error(
                    StatusCode::OK,
                    id,
                    -32602,
                    "Invalid params: tools/call needs `name`, the tool to call (a string)".into(),
                );
            }
            Shape::Initialize if session.is_none() => match table.reserve(&scope) {
                Ok(taken) => slot = Some(taken),
                Err(full) => {
                    tracing::warn!(scope, ?full, "refused a new session at the bound");
                    let id = message.get("id").cloned().unwrap_or(Value::Null);
                    return jsonrpc_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        id,
                        SESSION_LIMIT_CODE,
                        full.sessions_message(table.limits()),
                    );
                }
            },
            _ => {}
        }
    }
    let request = Request::from_parts(parts, Full::new(bytes));
    let mut answer = match inner.call(request).await {
        Ok(answer) => answer,
        Err(never) => match never {},
    };
    if let Some(slot) = slot
        && answer.status() == StatusCode::OK
        && let Some(id) = answer
            .headers()
            .get(SESSION_ID_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        table.bind(id, slot);
    }
    if method == Method::DELETE
        && let Some(id) = &session
        && answer.status().is_success()
    {
        table.unbind(id);
        // The session is ended; nothing follows (the Python SDK takes 202 for a failure).
        *answer.status_mut() = StatusCode::NO_CONTENT;
    }
    answer.map(|inner| {
        BoxBody::new(Ticketed {
            inner,
            _ticket: ticket,
        })
    })
}
