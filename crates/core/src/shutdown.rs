//! Parts a harness owns and stops with itself.

use async_trait::async_trait;

/// Something started for a harness that must be stopped with it: a toolset's actors, a
/// client of an outside server. Given to the harness (`HarnessBuilder::owns` in
/// `dsh-scheduler`), it is shut down by the harness's own shutdown, after every session, so
/// one call stops everything the harness started.
///
/// ```
/// use async_trait::async_trait;
/// use dsh_core::Shutdown;
/// use std::sync::atomic::{AtomicBool, Ordering};
///
/// struct Pool(AtomicBool);
///
/// #[async_trait]
/// impl Shutdown for Pool {
///     fn name(&self) -> &str { "pool" }
///     async fn shutdown(&self) { self.0.store(true, Ordering::SeqCst); }
/// }
/// ```
#[async_trait]
pub trait Shutdown: Send + Sync {
    /// A name for logs.
    fn name(&self) -> &str;
    /// Stops it. May be called more than once; later calls do nothing harmful.
    async fn shutdown(&self);
}
