//! Knowing when a tool's synchronous methods are dsh's own default implementations, so the
//! pipeline may call them inline instead of handing them to the user-code pool.
//!
//! The pipeline calls `present`, `result_meta` and `finalize_content` on the user-code pool
//! under a deadline, because a tool's own versions of them may block. dsh's default versions
//! never do (they copy or format what they are given), and most tools keep them; but a trait
//! object cannot say whether a method was overridden. So the default versions say so when they
//! run: each notes, in a thread-local list, the concrete type it ran for
//! ([`ToolDefinition::concrete_type`]) and which method it was. The first calls of a tool
//! run on the pool as before, inside [`defaults_seen`]; when every method of a group ran its
//! default *for the tool's own type* (a wrapper that delegates to an inner tool's default
//! notes the inner type, not its own), [`crate::RegisteredTool`] learns it, and from then on
//! that group is called inline. A tool's override of a method can never note that method for
//! its own type (an override cannot run the default it replaces), so a tool whose code may
//! block is never called inline by mistake.
//!
//! A tool whose own versions never block says so instead
//! ([`ToolDefinition::user_code_may_block`] answering `false`, as dsh's MCP tools and
//! `run_code` do): they are called inline from its first call.
//!
//! ```
//! use async_trait::async_trait;
//! use dsh_core::inline::{self, PRESENT, RESULT_META};
//! use dsh_core::{ContentBlock, ToolContext, ToolDefinition, ToolFailure};
//! use serde_json::{Value, json};
//!
//! struct Plain;
//! #[async_trait]
//! impl ToolDefinition for Plain {
//!     fn name(&self) -> &str { "plain" }
//!     fn description(&self) -> &str { "keeps the defaults" }
//!     fn input_schema(&self) -> Value { json!({"type": "object"}) }
//!     async fn execute(&self, _: Value, _: ToolContext) -> Result<Value, ToolFailure> {
//!         Ok(Value::Null)
//!     }
//! }
//! struct Own;
//! #[async_trait]
//! impl ToolDefinition for Own {
//!     fn name(&self) -> &str { "own" }
//!     fn description(&self) -> &str { "presents its own way" }
//!     fn input_schema(&self) -> Value { json!({"type": "object"}) }
//!     async fn execute(&self, _: Value, _: ToolContext) -> Result<Value, ToolFailure> {
//!         Ok(Value::Null)
//!     }
//!     fn present(&self, _: &Value) -> Vec<ContentBlock> { vec![ContentBlock::text("mine")] }
//! }
//! let plain: &dyn ToolDefinition = &Plain;
//! let (_, seen) = inline::defaults_seen(plain.concrete_type(), || {
//!     (plain.present(&Value::Null), plain.result_meta(&Value::Null))
//! });
//! assert_eq!(seen, PRESENT | RESULT_META);
//! let own: &dyn ToolDefinition = &Own;
//! let (_, seen) = inline::defaults_seen(own.concrete_type(), || {
//!     (own.present(&Value::Null), own.result_meta(&Value::Null))
//! });
//! assert_eq!(seen, RESULT_META);
//! ```
//!
//! [`ToolDefinition::concrete_type`]: crate::ToolDefinition::concrete_type
//! [`ToolDefinition::user_code_may_block`]: crate::ToolDefinition::user_code_may_block

use std::any::TypeId;
use std::cell::RefCell;

/// [`crate::ToolDefinition::present`] ran its default.
pub const PRESENT: u8 = 1;
/// [`crate::ToolDefinition::result_meta`] ran its default.
pub const RESULT_META: u8 = 2;
/// [`crate::ToolDefinition::finalize_content`] ran its default.
pub const FINALIZE: u8 = 4;

/// At most this many notes are kept between two [`defaults_seen`] (a tool called outside
/// one, in a loop, must not grow the list).
const MAX_NOTES: usize = 16;

thread_local! {
    static NOTES: RefCell<Vec<(TypeId, u8)>> = const { RefCell::new(Vec::new()) };
}

/// Called by the default implementations: the default `method` ran for the type `T`.
pub(crate) fn note<T: ?Sized + 'static>(method: u8) {
    NOTES.with(|notes| {
        if let Ok(mut notes) = notes.try_borrow_mut()
            && notes.len() < MAX_NOTES
        {
            notes.push((TypeId::of::<T>(), method));
        }
    });
}

/// Runs `f` (which calls a tool's synchronous methods on this thread) and answers what it
/// answered with the methods (bits of [`PRESENT`], [`RESULT_META`], [`FINALIZE`]) that ran
/// their default implementation for the type `tool` (the tool's
/// [`crate::ToolDefinition::concrete_type`]).
pub fn defaults_seen<R>(tool: TypeId, f: impl FnOnce() -> R) -> (R, u8) {
    NOTES.with(|notes| notes.borrow_mut().clear());
    let out = f();
    let seen = NOTES.with(|notes| {
        notes
            .borrow_mut()
            .drain(..)
            .filter(|(t, _)| *t == tool)
            .fold(0, |bits, (_, method)| bits | method)
    });
    (out, seen)
}
