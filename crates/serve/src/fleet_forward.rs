//! An answer to a stateless-era `ask` that lands on a node of a fleet other than the one
//! whose call waits for it: the node forwards it to the owner the session's lease names and
//! relays the owner's reply (see the book's "A fleet of servers").
//!
//! - The forwarded request is the client's own: its `tools/call` params and `_meta`, its
//!   headers (its bearer token among them: the owner's guard checks it as it checks any
//!   request, and finds the same scope, so the same session), `Host` set to the owner's
//!   address. The owner verifies the `requestState` with the fleet's key, and runs the call
//!   once (its parked answer is taken under a lock): a second answer, through any node, finds
//!   nothing waiting.
//! - It carries [`FORWARDED_HEADER`]: a node never forwards a request that carries it, so two
//!   nodes cannot bounce one between them. The header grants nothing (a client that sets it
//!   only gives up the forwarding).
//! - An owner that cannot be reached (dead, paused, not listening) is [`Forwarded::Unreachable`]:
//!   the caller waits for its lease to run out and takes the session itself.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, InputRequiredResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use std::time::Duration;

/// The header of a request one node of a fleet forwards to another (its value: the
/// forwarding node's view of the owner, for logs). A request carrying it is never forwarded
/// again.
pub const FORWARDED_HEADER: &str = "dsh-forwarded-by";

/// How long connecting to the owner may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// How long the owner may take to begin its answer (its headers: it streams the rest while
/// the call runs). A paused owner answers nothing: it is unreachable past this.
const ANSWER_BEGINS_WITHIN: Duration = Duration::from_secs(5);
/// The largest answer relayed.
const MAX_ANSWER: usize = 64 << 20;

/// The headers never copied to the owner: hop-by-hop ones, the ones the forward sets itself,
/// and `Origin` (this node's guard judged it already; the owner's may know other hosts).
const NOT_FORWARDED: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "proxy-authorization",
    "proxy-connection",
    "origin",
    FORWARDED_HEADER,
];

/// How a forward ended.
pub(crate) enum Forwarded {
    /// The owner's reply (its result, or its JSON-RPC error).
    Answer(Result<CallToolResponse, McpError>),
    /// The owner could not be reached, or gave no reply; why.
    Unreachable(String),
}

/// Whether the request was forwarded by another node.
pub(crate) fn was_forwarded(context: &RequestContext<RoleServer>) -> bool {
    context
        .extensions
        .get::<http::request::Parts>()
        .is_some_and(|parts| parts.headers.contains_key(FORWARDED_HEADER))
}

/// Whether `owner` reads as `host:port`, as a node's advertised address does (a `dsh run`'s
/// lease names `pid PID on HOST`): only such an owner is sent a client's token.
fn is_node_address(owner: &str) -> bool {
    let Some((host, port)) = owner.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && port.parse::<u16>().is_ok()
        && !owner
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == '@')
}

/// Forwards the client's answer `request` (with its request's `_meta` and headers) to
/// `owner` (`host:port`), and relays the reply.
pub(crate) async fn forward(
    owner: &str,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Forwarded {
    if !is_node_address(owner) {
        return Forwarded::Unreachable(format!(
            "the session is held by {owner}, which is not a node of the fleet (a `dsh run` or \
             stdio `dsh serve` on the store)"
        ));
    }
    let mut params = match serde_json::to_value(request) {
        Ok(params) => params,
        Err(e) => {
            return Forwarded::Answer(Err(McpError::internal_error(
                format!("cannot forward the answer: {e}"),
                None,
            )));
        }
    };
    if !context.meta.0.is_empty()
        && let (Value::Object(params), Ok(meta)) =
            (&mut params, serde_json::to_value(&context.meta))
    {
        params.insert("_meta".into(), meta);
    }
    let id = match serde_json::to_value(&context.id) {
        Ok(id) => id,
        Err(_) => json!(1),
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let mut builder = http::Request::post(crate::MCP_PATH)
        .header(http::header::HOST, owner)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .header(FORWARDED_HEADER, owner);
    if let Some(parts) = context.extensions.get::<http::request::Parts>() {
        for (name, value) in &parts.headers {
            if !NOT_FORWARDED.contains(&name.as_str()) {
                builder = builder.header(name, value);
            }
        }
    }
    let http_request = match builder.body(Full::new(Bytes::from(body.to_string()))) {
        Ok(request) => request,
        Err(e) => {
            return Forwarded::Answer(Err(McpError::internal_error(
                format!("cannot forward the answer: {e}"),
                None,
            )));
        }
    };
    let stream =
        match tokio::time::timeout(CONNECT_WITHIN, tokio::net::TcpStream::connect(owner)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Forwarded::Unreachable(format!("connecting to {owner}: {e}")),
            Err(_) => {
                return Forwarded::Unreachable(format!(
                    "{owner} did not accept a connection within {} ms",
                    CONNECT_WITHIN.as_millis()
                ));
            }
        };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => return Forwarded::Unreachable(format!("talking to {owner}: {e}")),
        };
    // Ends with the exchange (or when this request is dropped: the owner then sees its
    // stream closed and cancels the call, as for a client of its own).
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response =
        match tokio::time::timeout(ANSWER_BEGINS_WITHIN, sender.send_request(http_request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Forwarded::Unreachable(format!("talking to {owner}: {e}")),
            Err(_) => {
                return Forwarded::Unreachable(format!(
                    "{owner} did not begin its answer within {} ms",
                    ANSWER_BEGINS_WITHIN.as_millis()
                ));
            }
        };
    let status = response.status();
    let bytes = match Limited::new(response.into_body(), MAX_ANSWER)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Forwarded::Unreachable(format!("reading the answer of {owner}: {e}")),
    };
    let text = String::from_utf8_lossy(&bytes);
    if !status.is_success() {
        let shown: String = text.chars().take(200).collect();
        return Forwarded::Answer(Err(McpError::internal_error(
            format!(
                "the node holding the session ({owner}) refused the forwarded answer: HTTP \
                 {status}: {shown}"
            ),
            None,
        )));
    }
    tracing::info!(owner, "relayed an answer from the node holding the session");
    Forwarded::Answer(reply(&text, &id, owner))
}

/// The JSON-RPC reply with id `id` in `text` (a JSON body, or an SSE stream whose `data:`
/// lines carry messages), as the handler's answer.
fn reply(text: &str, id: &Value, owner: &str) -> Result<CallToolResponse, McpError> {
    let message = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .chain(std::iter::once(text))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|m| {
            m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
        });
    let unreadable = || {
        McpError::internal_error(
            format!("the node holding the session ({owner}) gave no readable answer"),
            None,
        )
    };
    let Some(mut message) = message else {
        return Err(unreadable());
    };
    if let Some(error) = message.get_mut("error") {
        return Err(serde_json::from_value::<McpError>(error.take()).map_err(|_| unreadable())?);
    }
    let result = message
        .get_mut("result")
        .map(Value::take)
        .unwrap_or_default();
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        return serde_json::from_value::<InputRequiredResult>(result)
            .map(Into::into)
            .map_err(|_| unreadable());
    }
    serde_json::from_value::<CallToolResult>(result)
        .map(Into::into)
        .map_err(|_| unreadable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_with_its_id_is_read_from_json_or_sse() {
        let id = json!(7);
        let sse = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
                   data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}],\"isError\":false}}\n\n";
        let Ok(CallToolResponse::Complete(result)) = reply(sse, &id, "a:1") else {
            panic!("no result read");
        };
        assert_eq!(result.is_error, Some(false));
        let error = "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32602,\"message\":\"no\"}}";
        let Err(e) = reply(error, &id, "a:1") else {
            panic!("the error was not relayed");
        };
        assert_eq!(e.code.0, -32602);
        // Another id's answer is not this one's.
        assert!(reply(error, &json!(8), "a:1").is_err());
        assert!(reply("garbage", &id, "a:1").is_err());
    }

    #[test]
    fn only_a_node_address_is_sent_a_clients_token() {
        assert!(is_node_address("10.0.0.2:8080"));
        assert!(is_node_address("node-a.internal:443"));
        assert!(is_node_address("[::1]:8080"));
        // What `dsh run` and stdio `dsh serve` write as the owner (`default_owner`).
        assert!(!is_node_address("pid 4242 on host"));
        assert!(!is_node_address("host:99999"));
        assert!(!is_node_address("evil@host:80"));
        assert!(!is_node_address("host"));
    }
}
