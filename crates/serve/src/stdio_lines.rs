//! The line filter in front of stdio `dsh serve`: every line the client writes is read here,
//! and one that is not a JSON-RPC message gets an error reply (id `null`) instead of being
//! dropped in silence, while the server goes on with the next line.
//!
//! - not JSON, invalid UTF-8, or longer than [`MAX_LINE`]: `-32700` (parse error);
//! - JSON but not a JSON-RPC message (a request without `method`, `params: 7`, an array):
//!   `-32600` (invalid request), with the request's `id` when it has a readable one;
//! - a notification (no `id`) that is not a message dsh knows: ignored, as JSON-RPC wants (a
//!   notification is never answered).
//!
//! Lines are read by a task of their own (so no read is ever cut in half by the service's
//! `select!`), handed to the service over a bounded channel (a client that writes faster than
//! dsh serves waits, it does not fill memory), and the replies go out through the transport's
//! one writer, whole lines each.

use rmcp::RoleServer;
use rmcp::model::{ErrorData, NumberOrString, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::Value;
use std::future::Future;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;

/// The longest line read (16 MiB, rmcp's own bound): a longer one is discarded as it arrives,
/// never buffered whole, and answered with a parse error.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// How many lines may wait for the service.
const QUEUE: usize = 16;

/// What the reader found on one line.
enum Line {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Reply(Box<TxJsonRpcMessage<RoleServer>>),
}

/// A transport over a reader and a writer of newline-delimited JSON-RPC that answers the lines
/// it cannot take (see the module's documentation).
pub(crate) struct FilteredLines<W: AsyncWrite + Send + Unpin + 'static> {
    lines: mpsc::Receiver<Line>,
    /// Writes whole messages (its reading side is never used).
    out: AsyncRwTransport<RoleServer, tokio::io::Empty, W>,
    reader: tokio::task::JoinHandle<()>,
}

impl<W: AsyncWrite + Send + Unpin + 'static> FilteredLines<W> {
    /// Reads `input` on a task of its own and writes to `output`.
    pub(crate) fn new<R: AsyncRead + Send + Unpin + 'static>(input: R, output: W) -> Self {
        let (tx, lines) = mpsc::channel(QUEUE);
        let reader = tokio::spawn(read_lines(BufReader::new(input), tx));
        FilteredLines {
            lines,
            out: AsyncRwTransport::new_server(tokio::io::empty(), output),
            reader,
        }
    }
}

impl<W: AsyncWrite + Send + Unpin + 'static> Drop for FilteredLines<W> {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl<W: AsyncWrite + Send + Unpin + 'static> Transport<RoleServer> for FilteredLines<W> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.out.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            // `recv` is cancel-safe: a line is either taken whole or left in the queue.
            match self.lines.recv().await? {
                Line::Message(message) => return Some(*message),
                Line::Reply(reply) => {
                    // Its own task: the service may drop this future at any await, and a
                    // reply cut off mid-write would corrupt the stream.
                    let sending = self.out.send(*reply);
                    tokio::spawn(async move {
                        if let Err(e) = sending.await {
                            tracing::debug!("the reply to a bad line was not written: {e}");
                        }
                    });
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.out.close().await
    }
}

/// Reads lines until the input ends (or fails), classifying each.
async fn read_lines<R: AsyncRead + Unpin>(mut input: BufReader<R>, tx: mpsc::Sender<Line>) {
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = match read_bounded(&mut input, &mut line).await {
            Ok(read) => read,
            Err(e) => {
                tracing::debug!("stdin failed: {e}");
                return;
            }
        };
        let found = match read {
            Read::End => return,
            Read::Oversized => Some(Line::Reply(Box::new(
                TxJsonRpcMessage::<RoleServer>::error(
                    ErrorData::parse_error(
                        format!("Parse error: a line longer than {MAX_LINE} bytes"),
                        None,
                    ),
                    None,
                ),
            ))),
            Read::Line => classify(trim(&line)),
        };
        if let Some(found) = found
            && tx.send(found).await.is_err()
        {
            return;
        }
    }
}

/// How reading one line ended.
enum Read {
    Line,
    Oversized,
    End,
}

/// Reads one line (without its `\n`) into `line`, never holding more than [`MAX_LINE`] bytes
/// of it: the rest of a longer line is skipped as it arrives. A last line without `\n` counts.
async fn read_bounded<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
    line: &mut Vec<u8>,
) -> std::io::Result<Read> {
    let mut oversized = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(if oversized {
                Read::Oversized
            } else if line.is_empty() {
                Read::End
            } else {
                Read::Line
            });
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.unwrap_or(available.len());
        if !oversized {
            if line.len().saturating_add(take) > MAX_LINE {
                oversized = true;
                line.clear();
                line.shrink_to(0);
            } else {
                line.extend_from_slice(&available[..take]);
            }
        }
        let consumed = newline.map_or(take, |n| n + 1);
        input.consume(consumed);
        if newline.is_some() {
            return Ok(if oversized {
                Read::Oversized
            } else {
                Read::Line
            });
        }
    }
}

/// The line without a `\r` before its end, a UTF-8 byte order mark, or surrounding blanks.
fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    line.trim_ascii()
}

/// What to do with one line: a message for the service, a reply for the client, or nothing
/// (a blank line, an unknown notification).
fn classify(line: &[u8]) -> Option<Line> {
    if line.is_empty() {
        return None;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            tracing::debug!("a line that is not JSON: {e}");
            return Some(reply(
                ErrorData::parse_error(format!("Parse error: {e}"), None),
                None,
            ));
        }
    };
    let id = readable_id(&value);
    let notification = value.get("id").is_none() && value.get("method").is_some();
    match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
        Ok(message) => Some(Line::Message(Box::new(message))),
        // A notification is never answered, even one dsh cannot read.
        Err(e) if notification => {
            tracing::debug!("a notification dsh does not take: {e}");
            None
        }
        Err(e) => {
            tracing::debug!("a line that is not a JSON-RPC message: {e}");
            Some(reply(
                ErrorData::invalid_request(format!("Invalid request: {e}"), None),
                id,
            ))
        }
    }
}

fn reply(error: ErrorData, id: Option<RequestId>) -> Line {
    Line::Reply(Box::new(TxJsonRpcMessage::<RoleServer>::error(error, id)))
}

/// The `id` of a JSON-RPC object when it is one a reply can carry (a string or an integer).
fn readable_id(value: &Value) -> Option<RequestId> {
    match value.get("id")? {
        Value::String(s) => Some(NumberOrString::String(s.as_str().into())),
        Value::Number(n) => n.as_i64().map(NumberOrString::Number),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn replies_to(input: &[u8]) -> Vec<Value> {
        let (mut client, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, mut from_server) = tokio::io::duplex(1 << 16);
        let mut transport = FilteredLines::new(server_in, server_out);
        client.write_all(input).await.unwrap();
        drop(client);
        let mut messages = 0;
        while transport.receive().await.is_some() {
            messages += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        transport.close().await.unwrap();
        drop(transport);
        let mut out = String::new();
        from_server.read_to_string(&mut out).await.unwrap();
        let mut replies: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        replies.push(serde_json::json!({"messages": messages}));
        replies
    }

    #[tokio::test]
    async fn bad_lines_are_answered_and_good_ones_pass() {
        let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let mut input = Vec::new();
        input.extend_from_slice(b"this is not JSON\n\xff\xfe\xfd\n\n");
        input.extend_from_slice(ping);
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":7,\"result\"\n");
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"params\":3}\n");
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"no/such\"}\r\n");
        input.extend_from_slice(ping);
        let replies = replies_to(&input).await;
        let codes: Vec<(i64, Value)> = replies[..replies.len() - 1]
            .iter()
            .map(|r| (r["error"]["code"].as_i64().unwrap(), r["id"].clone()))
            .collect();
        assert_eq!(
            codes,
            vec![
                (-32700, Value::Null),
                (-32700, Value::Null),
                (-32700, Value::Null),
                (-32600, serde_json::json!(8)),
            ]
        );
        // The two pings and the notification (the service ignores one it does not know).
        assert_eq!(replies.last().unwrap()["messages"], 3);
    }

    #[tokio::test]
    async fn an_oversized_line_is_answered_without_being_held() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.push(b'\n');
        input.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        input.push(b'\n');
        let replies = replies_to(&input).await;
        assert_eq!(replies[0]["error"]["code"], -32700);
        assert_eq!(replies.last().unwrap()["messages"], 1);
    }
}
