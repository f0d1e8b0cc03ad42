//! # dsh-scheduler
//!
//! Where a call lives. The [`Harness`] holds the pipeline (SPEC.md's chain, one stage per
//! file under `pipeline/`); each [`Session`] is a scheduler actor that runs steps, placing
//! calls as barriers or in a rolling pool, with one call-lifecycle actor per call. Cancellation
//! reaches a call as a supervisor signal (`stop`), which is what produces the `ABORTED`
//! variants; calls a step never reached get a synthesized `tool/call` + `tool/result` pair.
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use dsh_core::{ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
//! use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
//! use dsh_session::SessionLog;
//! use serde_json::{json, Value};
//!
//! struct Echo;
//! #[async_trait]
//! impl ToolDefinition for Echo {
//!     fn name(&self) -> &str { "echo" }
//!     fn description(&self) -> &str { "echo" }
//!     fn input_schema(&self) -> Value { json!({"type": "object"}) }
//!     async fn execute(&self, input: Value, _: ToolContext) -> Result<Value, ToolFailure> {
//!         Ok(input)
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let registry = Arc::new(ToolRegistry::new());
//! registry.register(Echo).unwrap();
//! let harness = HarnessBuilder::new(registry).build().await.unwrap();
//! let log = SessionLog::memory().await.unwrap();
//! let session = harness.open(log.clone(), SchedulerConfig::default(), None).await.unwrap();
//! let outcome = session
//!     .run_step(StepRequest::new(vec![ToolCall::new("c1", "echo", json!({"x": 1}))]))
//!     .await
//!     .unwrap();
//! assert_eq!(outcome.results[0].text(), r#"{"x":1}"#);
//! assert_eq!(log.snapshot().await.unwrap().len(), 2); // tool/call + tool/result
//! session.shutdown().await;
//! # harness.shutdown().await;
//! # });
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod call;
mod error;
pub mod pipeline;
mod scheduler;
mod session;
mod step;
mod subcall;
mod telemetry;

/// The name of code mode's tool: sub-calls may not call it again.
pub const RUN_CODE: &str = dsh_core::dispatcher::RUN_CODE;

pub use error::SchedulerError;
pub use pipeline::{Judgement, Pipeline, PipelineConfig};
pub use scheduler::{SchedulerConfig, prepare_step_calls};
pub use session::{
    CallCanceller, Harness, HarnessBuilder, HarnessShutdownReport, OpenStep, OpenedSession,
    PendingCall, Session, SessionStore, ShutdownReport,
};
pub use step::{
    CancelTarget, DeferredContext, RenamedCallId, SiblingPolicy, StepOutcome, StepRequest,
};
pub use subcall::{SubCallLimits, is_derived_call_id};
