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

/// Applies `ToolDefinition::timeout_ms_for` (or a default) to every dispatch. (`dsh-scheduler`'s
/// `HarnessBuilder` installs one innermost by default; see its `timeout` method.)
///
/// After the deadline the body is told (its signal fires) and given `grace` to return; then
/// the wrapper stops waiting and the body's late output is discarded. Either way the result is
/// `TOOL_TIMEOUT`.
///
/// A tool that keeps its own deadline ([`crate::ToolDefinition::owns_deadline`]: it kills what
/// it runs at the deadline and answers `TOOL_TIMEOUT` with the output so far) is not cut at the
/// deadline: the wrapper waits the deadline plus `owned_grace` for the body's own answer and
/// keeps it, whatever it is. Only a body still running past that is told and then cut as
/// above, so a tool that fails to keep its deadline is bounded all the same.
#[derive(Debug, Clone)]
pub struct TimeoutLayer {
    default_ms: Option<u64>,
    cap_ms: Option<u64>,
    grace: Duration,
    owned_grace: Duration,
}

/// How long past its deadline a tool that owns its deadline may take to answer by default:
/// time to stop what it runs (a polite signal, a grace, a kill) and gather its output.
pub const DEFAULT_OWNED_GRACE: Duration = Duration::from_secs(5);

impl Default for TimeoutLayer {
    fn default() -> Self {
        TimeoutLayer {
            default_ms: None,
            cap_ms: None,
            grace: Duration::from_millis(100),
            owned_grace: DEFAULT_OWNED_GRACE,
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

    /// No tool runs longer than `ms`, whatever its own timeout: the smaller of the two wins.
    /// A tool that keeps its own deadline is cut at the cap like any other when the cap is the
    /// smaller.
    ///
    /// ```
    /// let layer = dsh_core::around::TimeoutLayer::default().with_cap_ms(5_000);
    /// ```
    pub fn with_cap_ms(mut self, ms: u64) -> Self {
        self.cap_ms = Some(ms);
        self
    }

    /// How long a body may take to return after its deadline fired.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long past its deadline a tool that owns its deadline may take to give its own answer.
    pub fn with_owned_grace(mut self, grace: Duration) -> Self {
        self.owned_grace = grace;
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
        let own = req.tool.timeout_ms_for(&req.arguments).or(self.default_ms);
        let (ms, capped) = match (own, self.cap_ms) {
            (Some(own), Some(cap)) if cap < own => (cap, true),
            (None, Some(cap)) => (cap, true),
            (Some(own), _) => (own, false),
            (None, None) => return next.run(req).await,
        };
        // A tool that keeps its own deadline answers by itself; the wrapper only backs it up.
        // Under a smaller cap the tool does not know the deadline: the wrapper keeps it.
        let cut_after = if req.tool.owns_deadline() && !capped {
            Duration::from_millis(ms).saturating_add(self.owned_grace)
        } else {
            Duration::from_millis(ms)
        };
        let (timer, signal) = deadline(&req.signal);
        req.signal = signal;
        let inner = next.run(req);
        tokio::pin!(inner);
        tokio::select! {
            out = &mut inner => out,
            _ = tokio::time::sleep(cut_after) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ContentBlock;
    use crate::around::{Leaf, Next};
    use crate::tool::{ToolContext, ToolDefinition};
    use serde_json::{Value, json};
    use std::sync::Arc;

    /// Sleeps `ms` (from its input), then answers `TOOL_TIMEOUT` with its output so far when
    /// it owns its deadline, or a value otherwise; its deadline is `deadline` in its input.
    struct Slow {
        owns: bool,
    }

    #[async_trait]
    impl ToolDefinition for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn description(&self) -> &str {
            "sleeps"
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn timeout_ms(&self) -> Option<u64> {
            Some(60_000)
        }
        fn timeout_ms_for(&self, input: &Value) -> Option<u64> {
            input["deadline"].as_u64().or(self.timeout_ms())
        }
        fn owns_deadline(&self) -> bool {
            self.owns
        }
        async fn execute(&self, _: Value, _: ToolContext) -> Result<Value, ToolFailure> {
            Ok(Value::Null)
        }
    }

    /// The body: sleeps `ms`, then answers like `Slow` says.
    struct SleepLeaf;

    #[async_trait]
    impl Leaf for SleepLeaf {
        async fn dispatch(&self, req: DispatchRequest) -> DispatchOutcome {
            let ms = req.arguments["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if req.tool.owns_deadline() {
                Err(
                    ToolFailure::with_code(ErrorCode::ToolTimeout, "killed at its deadline")
                        .with_content(vec![ContentBlock::text("output so far")]),
                )
            } else {
                Ok(json!("done"))
            }
        }
    }

    fn request(owns: bool, arguments: Value) -> DispatchRequest {
        DispatchRequest {
            tool: Arc::new(Slow { owns }),
            arguments,
            call_id: "c1".into(),
            agent: "main".into(),
            parent: None,
            signal: Signal::never(),
            attempt: 1,
        }
    }

    async fn run(layer: TimeoutLayer, req: DispatchRequest) -> DispatchOutcome {
        let chain: Vec<Arc<dyn Around>> = vec![Arc::new(layer)];
        Next::new(&chain, &SleepLeaf).run(req).await
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_deadline_comes_from_the_input() {
        let out = run(
            TimeoutLayer::default(),
            request(false, json!({"deadline": 50, "ms": 1_000})),
        )
        .await;
        let failure = out.unwrap_err();
        assert_eq!(failure.code, ErrorCode::ToolTimeout);
        assert!(failure.message.contains("50 ms"), "{}", failure.message);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_tool_that_owns_its_deadline_reports_its_partial_result() {
        let out = run(
            TimeoutLayer::default(),
            request(true, json!({"deadline": 50, "ms": 1_000})),
        )
        .await;
        let failure = out.unwrap_err();
        assert_eq!(failure.code, ErrorCode::ToolTimeout);
        assert_eq!(failure.message, "killed at its deadline");
        assert_eq!(failure.content.unwrap()[0].as_text(), Some("output so far"));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_tool_that_owns_its_deadline_is_still_cut_past_its_grace() {
        let layer = TimeoutLayer::default().with_owned_grace(Duration::from_millis(100));
        let started = tokio::time::Instant::now();
        let out = run(layer, request(true, json!({"deadline": 50, "ms": 60_000}))).await;
        let failure = out.unwrap_err();
        assert_eq!(failure.code, ErrorCode::ToolTimeout);
        assert!(failure.content.is_none(), "the wrapper's own answer");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_cap_shortens_every_tool_and_never_lengthens_one() {
        let capped = TimeoutLayer::default()
            .with_default_ms(30_000)
            .with_cap_ms(5);
        let started = tokio::time::Instant::now();
        // The tool's own 60 s, and an owned deadline alike, are cut at the cap.
        for owns in [false, true] {
            let out = run(capped.clone(), request(owns, json!({"ms": 60_000}))).await;
            let failure = out.unwrap_err();
            assert_eq!(failure.code, ErrorCode::ToolTimeout);
            assert!(failure.message.contains("5 ms"), "{}", failure.message);
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        // A tool whose own deadline is shorter keeps it.
        let out = run(
            TimeoutLayer::default().with_cap_ms(10_000),
            request(false, json!({"deadline": 50, "ms": 1_000})),
        )
        .await;
        assert!(out.unwrap_err().message.contains("50 ms"));
    }
}
