//! `tools/execute`: around-wrappers in the spirit of tower's layers.
//!
//! A wrapper gets the dispatch request and a [`Next`] that runs the rest of the chain (and
//! finally the body). It may change the request (a new signal, say), run `next` zero, one or
//! several times, and shape the outcome. The body always also sees the caller's original
//! signal: the leaf fuses it back in, so no wrapper can shield the body from a cancel.

mod metrics;
mod retry;
mod timeout;

pub use metrics::{MetricsLayer, ToolStats};
pub use retry::RetryLayer;
pub use timeout::{DEFAULT_OWNED_GRACE, TimeoutLayer, deadline};

use crate::signal::Signal;
use crate::tool::{ToolDefinition, ToolFailure};
use async_trait::async_trait;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// What travels down the around chain.
#[derive(Clone)]
pub struct DispatchRequest {
    /// The tool being dispatched.
    pub tool: Arc<dyn ToolDefinition>,
    /// The validated arguments.
    pub arguments: Value,
    /// The call's id.
    pub call_id: String,
    /// The agent that made the call.
    pub agent: String,
    /// The parent call (code mode).
    pub parent: Option<String>,
    /// The signal handed inward; wrappers may replace it.
    pub signal: Signal,
    /// 1 for the first attempt.
    pub attempt: u32,
}

impl fmt::Debug for DispatchRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DispatchRequest")
            .field("tool", &self.tool.name())
            .field("call_id", &self.call_id)
            .field("attempt", &self.attempt)
            .finish()
    }
}

/// The body's canonical value, or why there is none.
pub type DispatchOutcome = Result<Value, ToolFailure>;

/// An around-wrapper of `tools/execute`.
///
/// ```
/// use async_trait::async_trait;
/// use dsh_core::around::{Around, DispatchOutcome, DispatchRequest, Next};
///
/// /// Counts attempts, and otherwise changes nothing.
/// struct Count(std::sync::atomic::AtomicUsize);
///
/// #[async_trait]
/// impl Around for Count {
///     fn name(&self) -> &str { "count" }
///     async fn around(&self, req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         next.run(req).await
///     }
/// }
/// ```
#[async_trait]
pub trait Around: Send + Sync {
    /// A name for logs and errors.
    fn name(&self) -> &str;
    /// Wraps the rest of the chain.
    async fn around(&self, req: DispatchRequest, next: Next<'_>) -> DispatchOutcome;
}

/// The end of the chain: runs the body. Implemented by the pipeline's dispatch stage.
#[async_trait]
pub trait Leaf: Send + Sync {
    /// Runs the body for this request.
    async fn dispatch(&self, req: DispatchRequest) -> DispatchOutcome;
}

/// The rest of the chain, from a wrapper's point of view. Copy it to run it again (retries).
#[derive(Clone, Copy)]
pub struct Next<'a> {
    chain: &'a [Arc<dyn Around>],
    leaf: &'a dyn Leaf,
}

impl<'a> Next<'a> {
    /// The whole chain `chain` ending in `leaf`.
    pub fn new(chain: &'a [Arc<dyn Around>], leaf: &'a dyn Leaf) -> Next<'a> {
        Next { chain, leaf }
    }

    /// Runs the next wrapper, or the leaf.
    pub async fn run(self, req: DispatchRequest) -> DispatchOutcome {
        match self.chain.split_first() {
            Some((first, rest)) => {
                first
                    .around(
                        req,
                        Next {
                            chain: rest,
                            leaf: self.leaf,
                        },
                    )
                    .await
            }
            None => self.leaf.dispatch(req).await,
        }
    }
}
