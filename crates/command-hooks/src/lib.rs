//! # dsh-command-hooks
//!
//! Command hooks compatible with Claude Code's hook protocol, so that a user's existing
//! `PreToolUse` / `PostToolUse` hooks guard dsh's tool calls as they are.
//!
//! - [`HookSettings`] reads the `hooks` of a settings file in Claude Code's shape (other keys
//!   are ignored). Matchers are matched against dsh's tool names.
//! - [`CommandHooks::pre_tool_use`] is a `tools/pre-execute` handler and
//!   [`CommandHooks::post_tool_use`] a `tools/post-execute` handler; [`CommandHooks::install`]
//!   adds both.
//! - Every hook whose matcher matches runs (all at once), with `sh -c`, the workspace as its
//!   working directory and `CLAUDE_PROJECT_DIR`, and the event's JSON on stdin
//!   (`session_id`, `transcript_path`, `cwd`, `permission_mode`, `hook_event_name`,
//!   `tool_name`, `tool_input`, `tool_use_id`, and `tool_response` after the tool).
//! - Their answers combine as deny > ask > allow. In dsh, `allow` means "no objection": the
//!   pre-execute decision only tightens, so it cannot overrule a permission rule that asks or
//!   denies. `ask` goes to the harness's approval responder (and is denied without one).
//!   `updatedInput` is validated again against the tool's schema; when several hooks rewrite,
//!   the last configured wins. `additionalContext` after the tool reaches the model as a
//!   `user/message` after the step's results.
//! - A hook that exits with another code than 0 or 2, prints broken JSON, cannot start, or
//!   outlives its `timeout` (seconds, default 60; it is killed with everything it started) is
//!   a non-blocking error: logged and ignored, unless the hook sets `"fail_closed": true`,
//!   which makes the failure deny the call (or block the result).
//!
//! ```
//! use dsh_command_hooks::{CommandHooks, HookSettings};
//! use dsh_core::Hooks;
//! let settings = HookSettings::from_json(r#"{"hooks": {"PreToolUse": [{"matcher": "write_file",
//!     "hooks": [{"type": "command", "command": "./no-secrets.sh", "timeout": 10}]}]}}"#).unwrap();
//! let mut hooks = Hooks::new();
//! CommandHooks::new(settings, "/path/to/workspace").with_session_id("s1").install(&mut hooks);
//! assert_eq!(hooks.pre_execute_handlers().len(), 1);
//! assert_eq!(hooks.post_execute_handlers().len(), 1);
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod error;
mod matcher;
mod protocol;
mod runner;
mod settings;

pub use error::CommandHooksError;
pub use matcher::Matcher;
pub use settings::{DEFAULT_TIMEOUT, HookCommand, HookEvent, HookSettings, MatcherGroup};

use async_trait::async_trait;
use dsh_core::{
    HookError, Hooks, PostExecuteContext, PostExecuteHandler, PostExecuteOutcome,
    PreExecuteContext, PreExecuteHandler, PreExecuteOutcome, PreToolDecision,
};
use protocol::{Verdict, interpret};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct Inner {
    settings: HookSettings,
    workspace: PathBuf,
    session_id: String,
    transcript_path: Option<PathBuf>,
}

/// Configured command hooks, ready to be installed in a harness's [`Hooks`].
#[derive(Debug, Clone)]
pub struct CommandHooks {
    inner: Arc<Inner>,
}

impl CommandHooks {
    /// Hooks that run in `workspace` (their working directory and `CLAUDE_PROJECT_DIR`).
    pub fn new(settings: HookSettings, workspace: impl Into<PathBuf>) -> CommandHooks {
        CommandHooks {
            inner: Arc::new(Inner {
                settings,
                workspace: workspace.into(),
                session_id: format!("dsh-{}", std::process::id()),
                transcript_path: None,
            }),
        }
    }

    /// The `session_id` hooks receive (by default `dsh-<process id>`).
    pub fn with_session_id(mut self, id: impl Into<String>) -> CommandHooks {
        Arc::make_mut(&mut self.inner).session_id = id.into();
        self
    }

    /// The `transcript_path` hooks receive: the session log (absent by default).
    pub fn with_transcript_path(mut self, path: impl Into<PathBuf>) -> CommandHooks {
        Arc::make_mut(&mut self.inner).transcript_path = Some(path.into());
        self
    }

    /// The settings.
    pub fn settings(&self) -> &HookSettings {
        &self.inner.settings
    }

    /// The `tools/pre-execute` handler running the `PreToolUse` hooks.
    pub fn pre_tool_use(&self) -> PreToolUseHooks {
        PreToolUseHooks {
            inner: self.inner.clone(),
        }
    }

    /// The `tools/post-execute` handler running the `PostToolUse` hooks.
    pub fn post_tool_use(&self) -> PostToolUseHooks {
        PostToolUseHooks {
            inner: self.inner.clone(),
        }
    }

    /// Adds both handlers after the ones already in `hooks`.
    pub fn install(&self, hooks: &mut Hooks) {
        hooks.pre_execute(self.pre_tool_use());
        hooks.post_execute(self.post_tool_use());
    }
}

impl Inner {
    fn input(&self, event: HookEvent, tool: &str, call_id: &str, tool_input: &Value) -> Value {
        let mut input = json!({
            "session_id": self.session_id,
            "cwd": self.workspace,
            "permission_mode": "default",
            "hook_event_name": event.as_str(),
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": call_id,
        });
        if let (Some(path), Some(map)) = (&self.transcript_path, input.as_object_mut()) {
            map.insert("transcript_path".into(), json!(path));
        }
        input
    }

    /// Runs every matching hook at once; the verdicts come back in configuration order.
    async fn run(&self, event: HookEvent, tool: &str, input: Value) -> Vec<Verdict> {
        let hooks: Vec<&HookCommand> = self.settings.matching(event, tool).collect();
        if hooks.is_empty() {
            return Vec::new();
        }
        let mut bytes = input.to_string().into_bytes();
        bytes.push(b'\n');
        let bytes = &bytes;
        futures::future::join_all(hooks.into_iter().map(|hook| async move {
            let ran = runner::run(&hook.command, &self.workspace, bytes, hook.timeout).await;
            interpret(event, hook, ran)
        }))
        .await
    }
}

/// The `PreToolUse` hooks as a `tools/pre-execute` handler.
#[derive(Debug, Clone)]
pub struct PreToolUseHooks {
    inner: Arc<Inner>,
}

/// deny > ask > allow; several reasons of the winning kind are joined.
fn combine_pre(verdicts: Vec<Verdict>) -> PreExecuteOutcome {
    let (mut denies, mut asks, mut allowed, mut rewrite) = (Vec::new(), Vec::new(), false, None);
    for v in verdicts {
        match v.decision {
            Some(PreToolDecision::Deny(r)) => denies.push(r),
            Some(PreToolDecision::Ask(p)) => asks.push(p),
            Some(PreToolDecision::Allow) => allowed = true,
            None => {}
        }
        if let Some(input) = v.updated_input {
            if rewrite.is_some() {
                tracing::warn!("several PreToolUse hooks rewrote the input; the last one wins");
            }
            rewrite = Some(input);
        }
    }
    if !denies.is_empty() {
        return PreExecuteOutcome::deny(denies.join("; "));
    }
    PreExecuteOutcome {
        decision: if !asks.is_empty() {
            Some(PreToolDecision::Ask(asks.join("; ")))
        } else if allowed {
            Some(PreToolDecision::Allow)
        } else {
            None
        },
        rewrite,
    }
}

#[async_trait]
impl PreExecuteHandler for PreToolUseHooks {
    fn name(&self) -> &str {
        "command-hooks:PreToolUse"
    }

    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        let tool = call.tool.name();
        let input = self
            .inner
            .input(HookEvent::PreToolUse, tool, call.call_id, call.arguments);
        let verdicts = self.inner.run(HookEvent::PreToolUse, tool, input).await;
        Ok(combine_pre(verdicts))
    }
}

/// The `PostToolUse` hooks as a `tools/post-execute` handler.
#[derive(Debug, Clone)]
pub struct PostToolUseHooks {
    inner: Arc<Inner>,
}

#[async_trait]
impl PostExecuteHandler for PostToolUseHooks {
    fn name(&self) -> &str {
        "command-hooks:PostToolUse"
    }

    async fn post_execute(
        &self,
        call: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        let tool = call.tool.name();
        let mut input =
            self.inner
                .input(HookEvent::PostToolUse, tool, call.call_id, call.arguments);
        if let Some(map) = input.as_object_mut() {
            map.insert("tool_response".into(), call.value.clone());
        }
        let verdicts = self.inner.run(HookEvent::PostToolUse, tool, input).await;
        let mut outcome = PostExecuteOutcome::accept();
        let mut blocks = Vec::new();
        for v in verdicts {
            blocks.extend(v.block);
            outcome.additional_contexts.extend(v.additional_context);
        }
        if !blocks.is_empty() {
            outcome.block = Some(blocks.join("; "));
        }
        Ok(outcome)
    }
}
