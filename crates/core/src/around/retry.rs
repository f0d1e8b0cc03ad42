//! The retry wrapper: opt-in per tool, bounded, and only for failures the tool marks retryable.

use super::{Around, DispatchOutcome, DispatchRequest, Next};
use async_trait::async_trait;

/// Retries retryable failures of tools that have a `retry_policy`.
///
/// A cancelled call is never retried, and the backoff sleep ends early on cancellation.
#[derive(Debug, Clone, Default)]
pub struct RetryLayer;

#[async_trait]
impl Around for RetryLayer {
    fn name(&self) -> &str {
        "retry"
    }

    async fn around(&self, mut req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        let Some(policy) = req.tool.retry_policy() else {
            return next.run(req).await;
        };
        let attempts = policy.max_attempts.max(1);
        let mut backoff = policy.backoff;
        loop {
            let out = next.run(req.clone()).await;
            match &out {
                Err(f) if f.retryable && req.attempt < attempts && !req.signal.is_cancelled() => {
                    tracing::debug!(tool = req.tool.name(), attempt = req.attempt, error = %f, "retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = req.signal.cancelled() => return out,
                    }
                    backoff = backoff.saturating_mul(2);
                    req.attempt += 1;
                }
                _ => return out,
            }
        }
    }
}
