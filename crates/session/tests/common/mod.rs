//! Event builders and backend wrappers shared by this crate's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_core::event::{CodeDispatchData, ToolCallData, ToolResultData, UserMessageData};
use dsh_core::{ContentBlock, ErrorCode, EventBody, SessionEvent, ToolError};
use dsh_session::{LogBackend, SessionError};
use serde_json::json;
use std::sync::{Arc, Mutex};

pub fn call_body(id: &str) -> EventBody {
    EventBody::ToolCall(ToolCallData {
        call_id: id.into(),
        name: "echo".into(),
        arguments: json!({ "id": id }),
        arguments_text: None,
        agent: "main".into(),
        parent: None,
    })
}

pub fn result_body(id: &str, call_seq: u64) -> EventBody {
    EventBody::result(
        ToolResultData {
            started_at: None,
            call_id: id.into(),
            message: vec![ContentBlock::text(format!("done {id}"))],
            error: None,
            meta: None,
        },
        call_seq,
    )
}

pub fn error_result_body(id: &str, call_seq: u64, code: ErrorCode) -> EventBody {
    EventBody::result(
        ToolResultData {
            started_at: None,
            call_id: id.into(),
            message: vec![ContentBlock::text("failed")],
            error: Some(ToolError::new(code, "failed")),
            meta: None,
        },
        call_seq,
    )
}

pub fn dispatch_body(id: &str, parent: &str) -> EventBody {
    EventBody::CodeDispatch(CodeDispatchData {
        call_id: id.into(),
        parent_call_id: parent.into(),
        name: "echo".into(),
        arguments: json!({}),
        message: vec![ContentBlock::text("sub")],
        error: None,
    })
}

pub fn user_body(text: &str, origin: &str) -> EventBody {
    EventBody::UserMessage(UserMessageData {
        content: text.into(),
        origin: origin.into(),
    })
}

pub fn ev(seq: u64, step: u64, body: EventBody) -> SessionEvent {
    SessionEvent {
        at: None,
        seq,
        step,
        body,
    }
}

pub fn call(seq: u64, step: u64, id: &str) -> SessionEvent {
    ev(seq, step, call_body(id))
}

pub fn result(seq: u64, step: u64, id: &str, call_seq: u64) -> SessionEvent {
    ev(seq, step, result_body(id, call_seq))
}

pub fn dispatch(seq: u64, step: u64, id: &str, parent: &str) -> SessionEvent {
    ev(seq, step, dispatch_body(id, parent))
}

pub fn user(seq: u64, step: u64, text: &str) -> SessionEvent {
    ev(seq, step, user_body(text, "c1"))
}

/// The events as a JSON Lines file's bytes.
pub fn jsonl(events: &[SessionEvent]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        out.extend_from_slice(e.to_json_line().as_bytes());
        out.push(b'\n');
    }
    out
}

/// A well-formed two-step log: parallel calls answered out of order, a code dispatch, an
/// error, and deferred context.
pub fn sample_log() -> Vec<SessionEvent> {
    vec![
        call(1, 1, "a"),
        call(2, 1, "b"),
        dispatch(3, 1, "a.1", "a"),
        result(4, 1, "b", 2),
        result(5, 1, "a", 1),
        user(6, 1, "note"),
        call(7, 2, "c"),
        ev(8, 2, error_result_body("c", 7, ErrorCode::ToolError)),
    ]
}

/// What a [`Recording`] backend saw.
#[derive(Debug, Default)]
pub struct Record {
    /// Every commit: (events, sync requested).
    pub commits: Vec<(usize, bool)>,
    /// Events that a synced commit made durable: (seq, type, call id).
    pub durable: Vec<(u64, &'static str, Option<String>)>,
}

impl Record {
    pub fn durable_call(&self, call_id: &str) -> bool {
        self.durable
            .iter()
            .any(|(_, ty, id)| *ty == "tool/call" && id.as_deref() == Some(call_id))
    }

    pub fn is_durable(&self, seq: u64) -> bool {
        self.durable.iter().any(|(s, _, _)| *s == seq)
    }
}

/// Passes commits through and records which events each synced commit made durable.
pub struct Recording {
    pub inner: Box<dyn LogBackend>,
    pub record: Arc<Mutex<Record>>,
}

impl LogBackend for Recording {
    fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        let seen: Vec<_> = events
            .iter()
            .map(|e| (e.seq, e.body.type_str(), e.call_id().map(str::to_string)))
            .collect();
        self.inner.commit(events, sync)?;
        let mut r = self.record.lock().unwrap();
        r.commits.push((seen.len(), sync));
        if sync {
            r.durable.extend(seen);
        }
        Ok(())
    }

    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        self.inner.read_all()
    }

    fn blocks(&self) -> bool {
        self.inner.blocks()
    }

    fn describe(&self) -> String {
        format!("recording {}", self.inner.describe())
    }
}
pub mod pg;
