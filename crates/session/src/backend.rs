//! Where events go: the storage behind the session writer.

use crate::error::SessionError;
use dsh_core::SessionEvent;

/// How hard the writer works to make an append survive a crash before acknowledging it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync before acknowledging each append.
    Always,
    /// Group commit: appends that arrive while a sync runs share the next one; nothing is
    /// acknowledged before it is on disk.
    #[default]
    Batch,
    /// Hand the bytes to the OS and acknowledge; no fsync.
    None,
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(Durability::Always),
            "batch" => Ok(Durability::Batch),
            "none" => Ok(Durability::None),
            other => Err(format!(
                "unknown durability `{other}` (use always, batch or none)"
            )),
        }
    }
}

/// Storage for session events. Called only from the writer actor, one call at a time.
pub trait LogBackend: Send + 'static {
    /// Appends `events` in order and, when `sync` is true, makes them durable before
    /// returning. On error the backend must either be left exactly as before the call, or
    /// answer [`SessionError::Poisoned`]. The events are handed over so a backend that keeps
    /// them need not copy them.
    fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError>;

    /// Every event stored so far, in order.
    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError>;

    /// True when `commit` may block on I/O: the writer then runs syncing commits off the
    /// async workers (a write without a sync runs in place; it only reaches the page cache).
    fn blocks(&self) -> bool {
        true
    }

    /// True when `commit` must run off the async workers even without a sync (a backend that
    /// waits on the network for every commit). By default: a syncing commit of a backend that
    /// [`blocks`](LogBackend::blocks).
    fn commit_blocks(&self, sync: bool) -> bool {
        sync && self.blocks()
    }

    /// A short description for logs (`memory`, a file path).
    fn describe(&self) -> String;
}
