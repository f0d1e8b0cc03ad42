//! # dsh
//!
//! The tool-execution pipeline an agent harness embeds: every tool call the model asks for
//! passes one chain that records it, asks policy (hooks, permissions, sandbox, approval,
//! deny-only guards), runs it under timeouts and cancellation, validates and rewrites its
//! result, and records the one result the model will see.
//!
//! This crate re-exports the workspace's crates under one name; see `ARCHITECTURE.md` for
//! which room is which.
//!
//! ```
//! use std::sync::Arc;
//! use dsh::core::{ToolCall, ToolRegistry};
//! use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
//! use dsh::session::SessionLog;
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let harness = HarnessBuilder::new(Arc::new(ToolRegistry::new())).build().await.unwrap();
//! let session = harness
//!     .open(SessionLog::memory().await.unwrap(), SchedulerConfig::default(), None)
//!     .await
//!     .unwrap();
//! let outcome = session
//!     .run_step(StepRequest::new(vec![ToolCall::new("c1", "missing", serde_json::json!({}))]))
//!     .await
//!     .unwrap();
//! assert!(outcome.results[0].is_error());
//! session.shutdown().await;
//! # harness.shutdown().await;
//! # });
//! ```

pub use dsh_core as core;
pub use dsh_formats as formats;
pub use dsh_guards as guards;
pub use dsh_scheduler as scheduler;
pub use dsh_session as session;
pub use dsh_tool_fs as tool_fs;

/// The README's embedding example, compiled as a doctest so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The book's chapters (`docs/src/`), compiled as doctests: their Rust samples build against
/// these crates in `cargo test`, which `mdbook test` could not do. `tests/book.rs` checks the
/// links.
#[cfg(doctest)]
mod book {
    macro_rules! chapters {
        ($($name:ident: $file:literal),* $(,)?) => {
            $(
                #[doc = include_str!(concat!("../docs/src/", $file))]
                pub struct $name;
            )*
        };
    }
    chapters! {
        Introduction: "introduction.md",
        Concepts: "concepts.md",
        Policy: "policy.md",
        ShellSandbox: "shell-sandbox.md",
        Serving: "serving.md",
        PostgresSessions: "postgres-sessions.md",
        ClaudeCode: "claude-code.md",
        Operations: "operations.md",
        Benchmarks: "benchmarks.md",
        Embedding: "embedding.md",
        Design: "design.md",
        ServeLimits: "serve-limits.md",
        PostgresInPractice: "postgres.md",
        Fleet: "fleet.md",
        View: "view.md",
        ShellSandboxHardening: "shell-sandbox-hardening.md",
        Network: "network.md",
        Frameworks: "frameworks/README.md",
        FrameworkFastmcp: "frameworks/fastmcp.md",
        FrameworkLangchain: "frameworks/langchain.md",
        FrameworkOpenaiAgents: "frameworks/openai-agents.md",
        FrameworkPydanticAi: "frameworks/pydantic-ai.md",
    }
}
