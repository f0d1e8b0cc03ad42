//! Parts of a harness that keep memory a session's log can rebuild.

use crate::event::SessionEvent;
use async_trait::async_trait;

/// Something that remembers what happened in a session (the fs-intent monitor's reads and the
/// hashes they showed) and can rebuild that memory from the session's log. A harness given one
/// (`HarnessBuilder::resumes` in `dsh-scheduler`) hands it every event of a log a session
/// continues from, in order, before the session's first step: so a session resumed from its
/// log (a new `dsh run` or `dsh serve` process, an HTTP session opened again) remembers what
/// the one that wrote the log knew.
///
/// ```
/// use async_trait::async_trait;
/// use dsh_core::{ResumeFromLog, SessionEvent};
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// struct Counter(AtomicUsize);
///
/// #[async_trait]
/// impl ResumeFromLog for Counter {
///     fn name(&self) -> &str { "counter" }
///     async fn resume(&self, events: &[SessionEvent]) -> Result<(), String> {
///         self.0.fetch_add(events.len(), Ordering::SeqCst);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait ResumeFromLog: Send + Sync {
    /// A name for logs.
    fn name(&self) -> &str;
    /// Rebuilds what `events` (a whole log, in seq order) say. An error is reported, and the
    /// session opens all the same: whatever was not rebuilt must then make the checks that
    /// depend on it refuse, never allow.
    async fn resume(&self, events: &[SessionEvent]) -> Result<(), String>;
}
