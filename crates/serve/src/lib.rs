//! # dsh-serve
//!
//! dsh as an MCP server: a live agent (Claude Code, Codex, any MCP client) calls dsh's tools,
//! and each call passes dsh's pipeline (policy, hooks, guards, read-before-edit, sandbox,
//! timeouts) and lands in the session log, write-ahead, where `dsh check` and `dsh replay`
//! read it.
//!
//! - `tools/list`: every tool of the session's registry, sorted by name, with its input schema,
//!   its `outputSchema` when it has one, and annotations: `readOnlyHint` for tools that run in
//!   parallel (safe), `destructiveHint` for the exclusive ones (writers).
//! - `tools/call`: one call pushed into the client's open step ([`dsh_scheduler::OpenStep`]):
//!   concurrent safe calls run in parallel, exclusive ones wait for the calls before them. The
//!   step closes when none of its calls is in flight; the next request opens the next step.
//!   A call's `additionalContexts` end its own result (SPEC.md's "Deferred context without a
//!   next message"). An error result is `isError: true` with its code first in the text;
//!   `structuredContent` is the value of a tool that declares an output schema.
//! - `notifications/cancelled` cancels the call (`ABORTED`, or `ABORTED_BEFORE_DISPATCH`).
//! - A request with a progress token gets a progress notification every
//!   [`ServeConfig::progress_every`] while its call runs.
//! - A policy `ask` becomes an elicitation to the client when it declared the capability
//!   (accept: allowed once; decline or cancel: `DENIED`), and `DENIED` when it did not
//!   ([`ElicitingApprover`], the harness's approval responder).
//!
//! Over stdio one client is served on one session ([`serve_stdio`]); a line that is not a
//! JSON-RPC message gets a `-32700` (not JSON) or `-32600` (not a message) reply with id `null`
//! and the next line is served. Over MCP's streamable
//! HTTP transport ([`serve_http`]) every client session (its `Mcp-Session-Id`) gets its own
//! [`DshServer::per_client`], which opens a session of one shared harness on its first call
//! (one log per client session); every request passes the [`HttpGuard`] (Host, Origin, bearer
//! token) before anything of it is read. Requests of the stateless 2026-07-28 era (no
//! `initialize`) are served on the same port by the session they name ([`SESSION_META_KEY`]
//! or [`SESSION_HEADER`]), scoped to their token ([`SessionScope`]), kept in
//! [`StatelessSessions`]; their `ask` is an `InputRequiredResult` whose `requestState` is
//! signed (HMAC-SHA256) for its call, session, tool and arguments.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod admission;
mod approval;
mod error;
pub mod fleet;
mod fleet_forward;
mod fleet_names;
mod http;
pub mod http_guard;
mod limits;
mod server;
mod stateless;
mod stdio_lines;
mod tools;
mod view;

pub use admission::{MCP_PATH, SESSION_LIMIT_CODE};
pub use approval::ElicitingApprover;
pub use error::ServeError;
pub use fleet::{FleetConfig, SESSION_BUSY_CODE, StateSecret, release_idle_sessions};
pub use http::{serve_http, serve_http_bounded};
pub use http_guard::{HttpGuard, SessionScope};
pub use limits::{ServeLimits, SessionTable};
pub use server::{APPROVAL_INPUT, DshServer, ServeConfig, serve_stdio, session_file_id};
pub use stateless::{
    MAX_SESSION_NAME, SESSION_HEADER, SESSION_META_KEY, StatelessSessions, valid_session_name,
};
pub use tools::{CONTEXT_FIELD, mcp_result, mcp_tools};
pub use view::{RELOAD_SECS, VIEW_COOKIE, serve_view};
