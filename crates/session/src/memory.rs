//! The in-memory backend.

use crate::backend::LogBackend;
use crate::error::SessionError;
use dsh_core::SessionEvent;

/// Keeps events in a `Vec`. Nothing survives the process; `sync` is free.
///
/// ```
/// use dsh_session::{LogBackend, MemoryBackend};
/// let backend = MemoryBackend::default();
/// assert!(backend.read_all().unwrap().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct MemoryBackend {
    events: Vec<SessionEvent>,
}

impl MemoryBackend {
    /// A backend that starts with `events` (a resumed session).
    pub fn with_events(events: Vec<SessionEvent>) -> MemoryBackend {
        MemoryBackend { events }
    }
}

impl LogBackend for MemoryBackend {
    fn commit(&mut self, mut events: Vec<SessionEvent>, _sync: bool) -> Result<(), SessionError> {
        self.events.append(&mut events);
        Ok(())
    }

    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        Ok(self.events.clone())
    }

    fn blocks(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}
