//! The timeout wrapper: reads `timeout_ms`, merges a deadline into the signal, and answers
//! `TOOL_TIMEOUT` when it passes, whether or not the body listens.

use super::{Around, DispatchOutcome, DispatchRequest, Next};
use crate::error::ErrorCode;
use crate::signal::{CancelHandle, CancelReason, Signal};
use crate::tool::ToolFailure;
use async_trait::async_trait;
use std::time::Duration;

/// The signal half of SPEC.md's `deadline(signal, ms, "TOOL_TIMEOUT")`: a signal that fires
/// when `signal` does, and also with [`CancelReason::Timeout`] when the returned handle is
/// fired. It takes no `ms` and no code: the caller owns the timer (the [`TimeoutLayer`] sleeps
/// `timeout_ms` and then fires the handle), and the code follows from the reason (the body's
/// stage reports a signal that fired with [`CancelReason::Timeout`] as `TOOL_TIMEOUT`).
///
/// ```
/// use dsh_core::around::deadline;
/// use dsh_core::signal::{CancelReason, Signal};
/// let (timer, signal) = deadline(&Signal::never());
/// timer.cancel(CancelReason::Timeout);
/// assert!(signal.reason().unwrap().is_timeout());
/// ```
pub fn deadline(signal: &Signal) -> (CancelHandle, Signal) {
    CancelHandle::child_of(signal)
}

/// Applies `ToolDefinition::timeout_ms` (or a default) to every dispatch. (`dsh-scheduler`'s
/// `HarnessBuilder` installs one innermost by default; see its `timeout` method.)
///
/// After the deadline the body is told (its signal fires) and given `grace` to return; then
/// the wrapper stops waiting and the body's late output is discarded. Either way the result is
/// `TOOL_TIMEOUT`.
#[derive(Debug, Clone)]
pub struct TimeoutLayer {
    default_ms: Option<u64>,
    grace: Duration,
}

impl Default for TimeoutLayer {
    fn default() -> Self {
        TimeoutLayer {
            default_ms: None,
            grace: Duration::from_millis(100),
        }
    }
}

impl TimeoutLayer {
    /// Tools without their own `timeout_ms` get `ms`.
    ///
    /// ```
    /// let layer = dsh_core::around::TimeoutLayer::default().with_default_ms(30_000);
    /// ```
    pub fn with_default_ms(mut self, ms: u64) -> Self {
        self.default_ms = Some(ms);
        self
    }

    /// How long a body may take to return after its deadline fired.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

fn timed_out(ms: u64) -> ToolFailure {
    ToolFailure::with_code(
        ErrorCode::ToolTimeout,
        format!("the tool did not finish within its timeout of {ms} ms"),
    )
}

#[async_trait]
impl Around for TimeoutLayer {
    fn name(&self) -> &str {
        "timeout"
    }

    async fn around(&self, mut req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        let Some(ms) = req.tool.timeout_ms().or(self.default_ms) else {
            return next.run(req).await;
        };
        let (timer, signal) = deadline(&req.signal);
        req.signal = signal;
        let inner = next.run(req);
        tokio::pin!(inner);
        tokio::select! {
            out = &mut inner => out,
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                timer.cancel(CancelReason::Timeout);
                match tokio::time::timeout(self.grace, inner).await {
                    // An outcome that already says why it ended (a caller's abort that raced
                    // the deadline) is kept; anything else is the timeout.
                    Ok(Err(f)) if f.code == ErrorCode::Aborted => Err(f),
                    _ => Err(timed_out(ms)),
                }
            }
        }
    }
}
