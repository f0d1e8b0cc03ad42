//! The stdio transport: one JSON-RPC message a line, read with a bounded buffer.
//!
//! rmcp's own line transport drops a line it cannot read (longer than its limit, or not
//! decodable: a lone surrogate such as `\ud800` is valid JSON text but no Rust string), and
//! the request it answered then waits for its whole timeout. This one keeps the requests it
//! sent until they are answered, and answers an unreadable line itself, at once, with an
//! error for the request it was meant for (its `id`, found by a lenient scan of the line's
//! first bytes), or, when the line is an answer (it has a `result` or an `error`) that does
//! not say which, for every request still waiting: a call ends with the reason instead of a
//! timeout, and never with another call's answer. An unreadable request or notification
//! from the server (it has a `method`) is dropped, and so is anything else (servers that
//! print logs on stdout), as rmcp does.

use rmcp::RoleClient;
use rmcp::model::{ClientNotification, ErrorCode, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

/// The JSON-RPC error code of an answer dsh could not read (in the implementation range).
const UNREADABLE_ANSWER: i32 = -32_099;
/// The `data` of that error, telling it from a server's own error of the same code.
const UNREADABLE_MARK: &str = "dsh: unreadable answer";

/// True for the error this transport makes up for an answer it could not read.
pub(crate) fn is_unreadable_answer(e: &ErrorData) -> bool {
    e.code.0 == UNREADABLE_ANSWER
        && e.data.as_ref().and_then(Value::as_str) == Some(UNREADABLE_MARK)
}

/// How much of an oversized line is kept to find its `id`.
const HEAD: usize = 4 * 1024;

/// Requests sent and not yet answered.
type Pending = Arc<Mutex<HashSet<RequestId>>>;

fn pending_set(pending: &Pending) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
    match pending.lock() {
        Ok(set) => set,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A client transport over a server's stdin and stdout.
pub(crate) struct LineTransport {
    server: String,
    read: BufReader<ChildStdout>,
    write: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    max_line: usize,
    /// The line being read (kept across cancelled reads).
    line: Vec<u8>,
    /// Dropping the rest of a line past `max_line`, whose head is in `line`.
    discarding: bool,
    pending: Pending,
    /// Answers made up for unreadable lines, delivered before reading on.
    made_up: VecDeque<RxJsonRpcMessage<RoleClient>>,
}

enum Read {
    Line,
    /// Longer than the limit: `line` holds its head only.
    Oversized,
    Eof,
}

impl LineTransport {
    pub(crate) fn new(
        server: String,
        stdout: ChildStdout,
        stdin: ChildStdin,
        max_line: usize,
    ) -> LineTransport {
        LineTransport {
            server,
            read: BufReader::new(stdout),
            write: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            max_line: max_line.max(1),
            line: Vec::new(),
            discarding: false,
            pending: Arc::default(),
            made_up: VecDeque::new(),
        }
    }

    /// Reads one line without ever holding more than `max_line` bytes of it. Cancel-safe:
    /// what was read stays in `self.line` for the next call.
    async fn read_line(&mut self) -> std::io::Result<Read> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(Read::Eof);
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            if self.discarding {
                let room = HEAD.saturating_sub(self.line.len()).min(take);
                self.line.extend_from_slice(&available[..room]);
            } else if self.line.len() + take > self.max_line {
                self.discarding = true;
                let room = HEAD.saturating_sub(self.line.len()).min(take);
                self.line.extend_from_slice(&available[..room]);
                self.line.truncate(HEAD);
            } else {
                self.line.extend_from_slice(&available[..take]);
            }
            self.read.consume(take);
            if newline.is_some() {
                if std::mem::take(&mut self.discarding) {
                    return Ok(Read::Oversized);
                }
                return Ok(Read::Line);
            }
        }
    }

    fn answered(&self, message: &RxJsonRpcMessage<RoleClient>) {
        let id = match message {
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if let Some(id) = id {
            pending_set(&self.pending).remove(id);
        }
    }

    /// Answers the request(s) an unreadable line was meant for with an error saying why.
    fn unreadable(&mut self, why: String) {
        let envelope = scan_envelope(&self.line);
        if envelope.id.is_none() && !envelope.is_answer && !envelope.has_method {
            tracing::warn!(server = %self.server, "MCP server wrote a line that is not a \
                message ({why}); ignored");
            return;
        }
        if envelope.has_method {
            tracing::warn!(server = %self.server, "MCP server sent a request or notification \
                that cannot be read ({why}); dropped");
            return;
        }
        let waiting: Vec<RequestId> = {
            let mut pending = pending_set(&self.pending);
            match envelope
                .id
                .and_then(|id| serde_json::from_value::<RequestId>(id).ok())
            {
                Some(id) => pending.take(&id).into_iter().collect(),
                // It does not say which request it answers: none of them can be told theirs.
                None => pending.drain().collect(),
            }
        };
        if waiting.is_empty() {
            tracing::warn!(server = %self.server, "MCP server sent an answer that cannot be \
                read ({why}) to no request that is waiting; dropped");
        }
        for id in waiting {
            tracing::warn!(server = %self.server, %id, "MCP server's answer cannot be read: {why}");
            let error = ErrorData::new(
                ErrorCode(UNREADABLE_ANSWER),
                why.clone(),
                Some(Value::String(UNREADABLE_MARK.into())),
            );
            self.made_up
                .push_back(JsonRpcMessage::error(error, Some(id)));
        }
    }
}

impl Transport<RoleClient> for LineTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Request(request) => {
                pending_set(&self.pending).insert(request.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(cancelled) = &n.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    pending_set(&self.pending).remove(id);
                }
            }
            _ => {}
        }
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        let write = self.write.clone();
        async move {
            let line = line.map_err(std::io::Error::other)?;
            let mut write = write.lock().await;
            let Some(stdin) = write.as_mut() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the server's stdin is closed",
                ));
            };
            stdin.write_all(&line).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if let Some(message) = self.made_up.pop_front() {
                return Some(message);
            }
            let read = match self.read_line().await {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(server = %self.server, "reading the MCP server's output: {e}");
                    return None;
                }
            };
            match read {
                Read::Eof => return None,
                Read::Oversized => {
                    let why = format!(
                        "its answer is longer than the {} byte limit of one message",
                        self.max_line
                    );
                    self.unreadable(why);
                }
                Read::Line => {
                    let text = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                    let text = text.strip_suffix(b"\r").unwrap_or(text);
                    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
                    if text.iter().all(u8::is_ascii_whitespace) {
                        self.line.clear();
                        continue;
                    }
                    match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(text) {
                        Ok(message) => {
                            self.line.clear();
                            self.answered(&message);
                            return Some(message);
                        }
                        Err(e) => {
                            let why =
                                format!("its answer is not a JSON-RPC message dsh can read ({e})");
                            self.unreadable(why);
                        }
                    }
                }
            }
            self.line.clear();
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping stdin closes it: the server sees its input end.
        drop(self.write.lock().await.take());
        Ok(())
    }
}

/// What a lenient scan of a message's top level found.
#[derive(Debug, Default, PartialEq)]
struct Envelope {
    id: Option<Value>,
    has_method: bool,
    /// It has a `result` or an `error`: an answer, even where its `id` cannot be read.
    is_answer: bool,
}

/// Reads the top-level `id` and whether there is a `method` from a line that may be
/// invalid JSON further on, or cut short; gives up quietly where it cannot tell.
fn scan_envelope(line: &[u8]) -> Envelope {
    let mut found = Envelope::default();
    let mut scan = Scanner { text: line, at: 0 };
    scan.skip_space();
    if !scan.eat(b'{') {
        return found;
    }
    loop {
        scan.skip_space();
        let Some(key) = scan.string() else {
            return found;
        };
        scan.skip_space();
        if !scan.eat(b':') {
            return found;
        }
        scan.skip_space();
        match key {
            b"method" => found.has_method = true,
            b"result" | b"error" => found.is_answer = true,
            _ => {}
        }
        let start = scan.at;
        if !scan.skip_value() {
            return found;
        }
        if key == b"id" {
            found.id = serde_json::from_slice::<Value>(&line[start..scan.at]).ok();
        }
        scan.skip_space();
        if !scan.eat(b',') {
            return found;
        }
    }
}

struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    /// A string's raw bytes between its quotes (escapes left as they are).
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        loop {
            match self.peek()? {
                b'\\' => self.at += 2,
                b'"' => {
                    let raw = self.text.get(start..self.at)?;
                    self.at += 1;
                    return Some(raw);
                }
                _ => self.at += 1,
            }
        }
    }

    /// Skips one value of any kind; false if the text ends first.
    fn skip_value(&mut self) -> bool {
        match self.peek() {
            None => false,
            Some(b'"') => self.string().is_some(),
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                loop {
                    match self.peek() {
                        None => return false,
                        Some(b'"') => {
                            if self.string().is_none() {
                                return false;
                            }
                        }
                        Some(b'{' | b'[') => {
                            depth += 1;
                            self.at += 1;
                        }
                        Some(b'}' | b']') => {
                            depth = depth.saturating_sub(1);
                            self.at += 1;
                            if depth == 0 {
                                return true;
                            }
                        }
                        Some(_) => self.at += 1,
                    }
                }
            }
            // A number or a literal: it ends where the next token starts, which a line cut
            // short does not show.
            Some(_) => {
                while let Some(b) = self.peek() {
                    if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                        return true;
                    }
                    self.at += 1;
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_envelope_is_found_in_lines_that_do_not_parse() {
        let line =
            br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"\ud800"}]}}"#;
        assert!(serde_json::from_slice::<Value>(line).is_err());
        assert_eq!(
            scan_envelope(line),
            Envelope {
                id: Some(json!(7)),
                has_method: false,
                is_answer: true
            }
        );
        let late = br#"{"jsonrpc":"2.0","result":{"a":[1,{"b":"}"}]},"id":"x-1"}"#;
        assert_eq!(scan_envelope(late).id, Some(json!("x-1")));
        let cut = br#"{"jsonrpc":"2.0","result":{"text":"aaaa"#;
        assert_eq!(
            scan_envelope(cut),
            Envelope {
                is_answer: true,
                ..Envelope::default()
            }
        );
        let log = br#"{"level":"info","msg":"\ud800 starting"}"#;
        assert_eq!(scan_envelope(log), Envelope::default());
        let note = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"x":"\ud800"}}"#;
        assert!(scan_envelope(note).has_method);
        assert_eq!(scan_envelope(b"not json"), Envelope::default());
        assert_eq!(
            scan_envelope(br#"{"id": 12 , "x": true}"#).id,
            Some(json!(12))
        );
    }
}
