//! The in-memory backend.

use crate::backend::LogBackend;
use crate::error::SessionError;
use dsh_core::SessionEvent;

/// Bytes per storage block. A block is allocated once at this size and never moved, so the
/// log grows without copying what it already holds.
const BLOCK: usize = 1 << 20;

/// Keeps events in memory, encoded as the JSON lines a file log would hold. Nothing survives
/// the process; `sync` is free.
///
/// Why encoded and not as [`SessionEvent`] values: a decoded event is a tree of small
/// allocations (several times its JSON size), and a long session held that way spent most of
/// each append faulting in fresh pages for it. The encoding is also the file log's, so an
/// event the file backend could not store is refused here too, and [`LogBackend::read_all`]
/// reads back exactly what a file would.
///
/// ```
/// use dsh_core::event::{EventBody, SessionEvent, UserMessageData};
/// use dsh_session::{LogBackend, MemoryBackend};
/// let mut backend = MemoryBackend::default();
/// let body = EventBody::UserMessage(UserMessageData { content: "hi".into(), origin: "c1".into() });
/// backend.commit(vec![SessionEvent { at: None, seq: 1, step: 1, body }], false).unwrap();
/// assert_eq!(backend.read_all().unwrap()[0].seq, 1);
/// ```
#[derive(Debug, Default)]
pub struct MemoryBackend {
    /// Blocks of whole lines, each ending in `\n`; only the last one is written to.
    blocks: Vec<Vec<u8>>,
    events: usize,
    scratch: Vec<u8>,
}

impl MemoryBackend {
    /// A backend that starts with `events` (a resumed session).
    pub fn with_events(events: Vec<SessionEvent>) -> MemoryBackend {
        let mut backend = MemoryBackend::default();
        // An event that was read from a log can be written again; one that cannot is dropped
        // with the error logged rather than failing the resume.
        if let Err(e) = backend.commit(events, false) {
            tracing::error!(error = %e, "an event of the resumed session could not be kept");
        }
        backend
    }

    /// How many events are stored.
    pub fn len(&self) -> usize {
        self.events
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    fn put(&mut self, line: &[u8]) {
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= line.len());
        if !fits {
            self.blocks.push(Vec::with_capacity(BLOCK.max(line.len())));
        }
        if let Some(block) = self.blocks.last_mut() {
            block.extend_from_slice(line);
        }
    }
}

impl LogBackend for MemoryBackend {
    fn commit(&mut self, events: Vec<SessionEvent>, _sync: bool) -> Result<(), SessionError> {
        // Encode the whole group first: a group that cannot be stored leaves nothing behind.
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let mut ends = Vec::with_capacity(events.len());
        for event in &events {
            if let Err(e) = serde_json::to_writer(&mut scratch, event) {
                self.scratch = scratch;
                return Err(SessionError::Io {
                    context: format!("encoding event {}", event.seq),
                    message: e.to_string(),
                });
            }
            scratch.push(b'\n');
            ends.push(scratch.len());
        }
        let mut start = 0;
        for end in ends {
            self.put(&scratch[start..end]);
            start = end;
        }
        self.events += events.len();
        if scratch.capacity() > BLOCK {
            scratch = Vec::new();
        }
        self.scratch = scratch;
        Ok(())
    }

    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        let mut all = Vec::with_capacity(self.events);
        for block in &self.blocks {
            for line in block.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let event = serde_json::from_slice::<SessionEvent>(line).map_err(|e| {
                    SessionError::Corrupt {
                        line: all.len() + 1,
                        reason: e.to_string(),
                    }
                })?;
                all.push(event);
            }
        }
        Ok(all)
    }

    fn blocks(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::EventBody;
    use dsh_core::event::UserMessageData;

    fn user(seq: u64, content: String) -> SessionEvent {
        SessionEvent {
            at: None,
            seq,
            step: 1,
            body: EventBody::UserMessage(UserMessageData {
                content,
                origin: "c".into(),
            }),
        }
    }

    #[test]
    fn events_read_back_in_commit_order_across_blocks() {
        let mut b = MemoryBackend::with_events(vec![user(1, "a".into())]);
        // Larger than a block on its own, then enough small ones to fill several blocks.
        b.commit(vec![user(2, "x".repeat(BLOCK + 10))], false)
            .unwrap();
        b.commit(Vec::new(), false).unwrap();
        let small: Vec<_> = (3..20_003)
            .map(|s| user(s, format!("m{s} {}", "y".repeat(90))))
            .collect();
        b.commit(small, true).unwrap();
        let got = b.read_all().unwrap();
        let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..20_003).collect::<Vec<_>>());
        assert_eq!(b.len(), 20_002);
        assert!(b.blocks.len() >= 3, "{} blocks", b.blocks.len());
        assert_eq!(got[1], user(2, "x".repeat(BLOCK + 10)));
        assert_eq!(got[500], user(501, format!("m501 {}", "y".repeat(90))));
    }
}
