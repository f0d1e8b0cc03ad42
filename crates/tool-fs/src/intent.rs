//! The `fs/write-intent` and `fs/edit-intent` hook points: what a mutating tool announces
//! before it changes a file, and the handlers that may refuse it.

use crate::hash::ContentHash;
use async_trait::async_trait;
use dsh_core::{ErrorCode, ToolFailure};
use futures::FutureExt;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};

/// Which hook point an intent goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentKind {
    /// `fs/write-intent`: a whole file is created, replaced or deleted.
    Write,
    /// `fs/edit-intent`: part of an existing file is changed.
    Edit,
}

impl IntentKind {
    /// The hook point's name.
    ///
    /// ```
    /// assert_eq!(dsh_tool_fs::IntentKind::Edit.hook_point(), "fs/edit-intent");
    /// ```
    pub fn hook_point(self) -> &'static str {
        match self {
            IntentKind::Write => "fs/write-intent",
            IntentKind::Edit => "fs/edit-intent",
        }
    }
}

/// What the mutation does to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsOp {
    /// A new file.
    Create,
    /// An existing file's whole content is replaced.
    Overwrite,
    /// Part of an existing file changes.
    Edit,
    /// An existing file is removed (also the source of a move).
    Delete,
}

impl FsOp {
    /// The hook point this operation announces itself at.
    pub fn kind(self) -> IntentKind {
        match self {
            FsOp::Edit => IntentKind::Edit,
            FsOp::Create | FsOp::Overwrite | FsOp::Delete => IntentKind::Write,
        }
    }
}

/// One announced mutation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsIntent {
    /// What happens to the file.
    pub op: FsOp,
    /// The tool about to do it.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// The agent that made the call.
    pub agent: String,
    /// The file, relative to the workspace root, symlinks resolved.
    pub path: String,
    /// The hash of the file as the tool found it; `None` when it does not exist yet.
    pub current: Option<ContentHash>,
}

impl FsIntent {
    /// The hook point.
    pub fn kind(&self) -> IntentKind {
        self.op.kind()
    }
}

/// A handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntentVerdict {
    /// No objection.
    Allow,
    /// Refused; the reason is shown to the model.
    Deny(String),
}

/// A handler of `fs/write-intent` and `fs/edit-intent`. Registered on the toolset with
/// [`crate::FsToolset::on_intent`]; the fs-intent monitor's read-before-edit rule is always
/// the first one.
///
/// ```
/// use async_trait::async_trait;
/// use dsh_tool_fs::{FsIntent, FsIntentHandler, IntentVerdict};
///
/// struct NoLockfiles;
///
/// #[async_trait]
/// impl FsIntentHandler for NoLockfiles {
///     fn name(&self) -> &str { "no-lockfiles" }
///     async fn check(&self, intent: &FsIntent) -> IntentVerdict {
///         if intent.path.ends_with(".lock") {
///             IntentVerdict::Deny("lock files are generated; do not edit them".into())
///         } else {
///             IntentVerdict::Allow
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait FsIntentHandler: Send + Sync {
    /// A name for messages and logs.
    fn name(&self) -> &str;
    /// Looks at one intent.
    async fn check(&self, intent: &FsIntent) -> IntentVerdict;
}

/// The handlers, in the order they run. Shared by the tools and the toolset.
#[derive(Default)]
pub(crate) struct IntentHandlers {
    list: RwLock<Vec<Arc<dyn FsIntentHandler>>>,
}

impl fmt::Debug for IntentHandlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.snapshot().iter().map(|h| h.name().to_string()))
            .finish()
    }
}

impl IntentHandlers {
    pub(crate) fn push(&self, handler: Arc<dyn FsIntentHandler>) {
        self.list
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(handler);
    }

    fn snapshot(&self) -> Vec<Arc<dyn FsIntentHandler>> {
        self.list.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs every handler; the first refusal is the tool's `DENIED` failure. A handler that
    /// panics refuses (fail-closed).
    pub(crate) async fn check(&self, intent: &FsIntent) -> Result<(), ToolFailure> {
        for handler in self.snapshot() {
            let verdict = AssertUnwindSafe(handler.check(intent))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!(handler = handler.name(), "fs-intent handler panicked");
                    IntentVerdict::Deny(format!(
                        "handler `{}` failed while checking the change",
                        handler.name()
                    ))
                });
            if let IntentVerdict::Deny(reason) = verdict {
                return Err(ToolFailure::with_code(
                    ErrorCode::Denied,
                    format!(
                        "{reason} ({} denied by `{}`)",
                        intent.kind().hook_point(),
                        handler.name()
                    ),
                ));
            }
        }
        Ok(())
    }
}
