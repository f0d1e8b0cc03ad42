//! What a guard is and what it sees.

use serde_json::Value;
use std::fmt;

/// The call as a guard sees it (after pre-execute rewrote it, if it did).
#[derive(Debug, Clone, PartialEq)]
pub struct GuardCall {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The agent that made the call.
    pub agent: String,
    /// The arguments the body would run with.
    pub arguments: Value,
    /// The parent call (code mode).
    pub parent: Option<String>,
}

impl GuardCall {
    /// A call by the `main` agent.
    ///
    /// ```
    /// let call = dsh_guards::GuardCall::new("c1", "write_file", serde_json::json!({"path": "a"}));
    /// assert_eq!(call.agent, "main");
    /// ```
    pub fn new(call_id: impl Into<String>, tool: impl Into<String>, arguments: Value) -> Self {
        GuardCall {
            call_id: call_id.into(),
            tool: tool.into(),
            agent: "main".into(),
            arguments,
            parent: None,
        }
    }
}

/// A guard's answer: it can only deny or abstain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardVerdict {
    /// No objection.
    Abstain,
    /// A final denial; the reason is shown to the model.
    Deny(String),
}

/// A monotonic guard. It cannot allow anything: a yes from a human or a hook never overrules
/// it. A guard that panics counts as a denial.
pub trait Guard: Send + Sync + 'static {
    /// Its identity: unique in a guard set, and protected (only the owner replaces it). Read
    /// once, when the guard is registered (or a replacement offered); the set keeps that
    /// answer, so what `id()` says later changes nothing.
    fn id(&self) -> &str;
    /// Looks at one call.
    fn check(&self, call: &GuardCall) -> GuardVerdict;
    /// Whether [`Guard::check`] may block: do I/O, wait on a lock or a channel, or compute for
    /// long. `true` unless overridden, the safe answer: a snapshot holding such a guard is
    /// evaluated on the guard set's own pool of threads, so it never stalls an async worker nor
    /// takes tokio's blocking pool, and the
    /// evaluation timeout can deny while it is still running.
    ///
    /// A guard that only inspects the call (matches a tool name, a path, an argument) should
    /// answer `false`: a snapshot of such guards is evaluated in the calling task, which
    /// saves the two thread handoffs of the pool (tens of microseconds a call). If it blocks
    /// anyway it holds a worker meanwhile, and an evaluation that took longer than the
    /// timeout is still a denial once it returns.
    fn may_block(&self) -> bool {
        true
    }
}

/// A guard made of a closure.
///
/// [`FnGuard::new`] may block (it runs on the guard set's pool); [`FnGuard::non_blocking`] is
/// for a closure that only inspects the call, and runs in the calling task.
///
/// ```
/// use dsh_guards::{FnGuard, Guard, GuardCall, GuardVerdict};
/// let g = FnGuard::new("abstain", |_c: &GuardCall| GuardVerdict::Abstain);
/// assert_eq!(g.id(), "abstain");
/// assert!(g.may_block());
/// let quick = FnGuard::non_blocking("no-rm", |c: &GuardCall| {
///     if c.arguments["command"].as_str().is_some_and(|s| s.contains("rm -rf")) {
///         GuardVerdict::Deny("no rm -rf".into())
///     } else {
///         GuardVerdict::Abstain
///     }
/// });
/// assert!(!quick.may_block());
/// ```
pub struct FnGuard<F> {
    id: String,
    check: F,
    may_block: bool,
}

impl<F> FnGuard<F>
where
    F: Fn(&GuardCall) -> GuardVerdict + Send + Sync + 'static,
{
    /// A guard with this id and check, which may block (see [`Guard::may_block`]).
    pub fn new(id: impl Into<String>, check: F) -> Self {
        FnGuard {
            id: id.into(),
            check,
            may_block: true,
        }
    }

    /// A guard whose check never blocks (see [`Guard::may_block`]): it runs in the task that
    /// evaluates the call.
    pub fn non_blocking(id: impl Into<String>, check: F) -> Self {
        FnGuard {
            id: id.into(),
            check,
            may_block: false,
        }
    }
}

impl<F> fmt::Debug for FnGuard<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnGuard").field("id", &self.id).finish()
    }
}

impl<F> Guard for FnGuard<F>
where
    F: Fn(&GuardCall) -> GuardVerdict + Send + Sync + 'static,
{
    fn id(&self) -> &str {
        &self.id
    }

    fn check(&self, call: &GuardCall) -> GuardVerdict {
        (self.check)(call)
    }

    fn may_block(&self) -> bool {
        self.may_block
    }
}
