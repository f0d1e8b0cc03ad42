//! The metrics wrapper: per-tool counts and latencies, as `tracing` events and as a snapshot.

use super::{Around, DispatchOutcome, DispatchRequest, Next};
use async_trait::async_trait;
use dashmap::DashMap;
use std::sync::Arc;
use std::time::Instant;

/// Counts and latencies of one tool's dispatches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolStats {
    /// Dispatches that ended.
    pub calls: u64,
    /// Of those, the ones that failed.
    pub errors: u64,
    /// Total time inside the rest of the chain, in microseconds.
    pub total_us: u64,
    /// The slowest, in microseconds.
    pub max_us: u64,
}

/// Records every dispatch. Clones share the same table.
///
/// ```
/// let metrics = dsh_core::around::MetricsLayer::default();
/// assert!(metrics.snapshot().is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct MetricsLayer {
    table: Arc<DashMap<String, ToolStats>>,
}

impl MetricsLayer {
    /// The stats so far, by tool name, sorted by name.
    pub fn snapshot(&self) -> Vec<(String, ToolStats)> {
        let mut out: Vec<_> = self
            .table
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[async_trait]
impl Around for MetricsLayer {
    fn name(&self) -> &str {
        "metrics"
    }

    async fn around(&self, req: DispatchRequest, next: Next<'_>) -> DispatchOutcome {
        let tool = req.tool.name().to_string();
        let started = Instant::now();
        let out = next.run(req).await;
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let failed = out.is_err();
        {
            let mut stats = self.table.entry(tool.clone()).or_default();
            stats.calls += 1;
            stats.errors += u64::from(failed);
            stats.total_us = stats.total_us.saturating_add(us);
            stats.max_us = stats.max_us.max(us);
        }
        tracing::debug!(target: "dsh::metrics", tool = %tool, latency_us = us, failed, "dispatch");
        out
    }
}
