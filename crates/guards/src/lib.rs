//! # dsh-guards
//!
//! Policy that must hold whatever the hooks say:
//!
//! - [`GuardSet`]: the registered monotonic guards, owned by one actor. A guard only denies or
//!   abstains; registering returns a [`GuardOwner`], and only that owner can replace or remove
//!   the guard. Each evaluation takes the actor's current [`GuardSnapshot`] and runs the
//!   guards for that call alone (guards that may block on the set's own bounded pool of
//!   threads, never on tokio's blocking pool), so a slow guard delays only its own call. When
//!   the actor cannot answer, the verdict is a denial (fail-closed); so is a guard's panic,
//!   and so is an evaluation that finds every thread of the pool stuck.
//! - [`PermissionRules`]: a `tools/pre-execute` handler loaded from TOML (`allow`, `ask`,
//!   `deny` lists of `tool` or `tool(glob)` rules, `.gitignore`-like: a folder's rule covers
//!   what is inside it; deny beats ask beats allow).
//!
//! ```
//! use dsh_guards::{GuardCall, GuardSet, GuardVerdict, FnGuard};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let guards = GuardSet::spawn(None).await.unwrap();
//! let owner = guards
//!     // It only looks at the call, so it runs in the evaluating task (`Guard::may_block`).
//!     .register(FnGuard::non_blocking("no-rm", |call: &GuardCall| {
//!         if call.tool == "rm" { GuardVerdict::Deny("never".into()) } else { GuardVerdict::Abstain }
//!     }))
//!     .await
//!     .unwrap();
//! let verdict = guards.evaluate(GuardCall::new("c1", "rm", serde_json::json!({}))).await;
//! assert!(matches!(verdict, GuardVerdict::Deny(_)));
//! owner.unregister().await.unwrap();
//! guards.shutdown().await;
//! # });
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod error;
mod guard;
mod net_policy;
mod permissions;
mod set;
mod shell_policy;

pub use error::GuardsError;
pub use guard::{FnGuard, Guard, GuardCall, GuardVerdict};
pub use permissions::{KnownTools, PermissionRules, Rule, RuleClass};
pub use set::{
    DEFAULT_EVALUATION_TIMEOUT, DEFAULT_POOL_THREADS, GuardOwner, GuardSet, GuardSetMsg,
    GuardSnapshot,
};
pub use shell_policy::{ShellPolicy, is_env_name};
