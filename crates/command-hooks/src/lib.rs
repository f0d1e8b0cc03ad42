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
//! - A hook's exit decides as soon as it exits: its pipes then get a short grace
//!   ([`DEFAULT_OUTPUT_GRACE`]) for output still in flight, and its whole process group (each
//!   hook runs in one of its own) is killed, so that nothing it started outlives it or holds
//!   its answer up. The group is also killed at the hook's `timeout`, when the call's future
//!   is dropped (the call was cancelled, the pipeline shut down), and by
//!   [`CommandHooks::kill_all`].
//! - A hook that exits with another code than 0 or 2, cannot start, is ended by a signal, or
//!   outlives its `timeout` (seconds, default 60) is a non-blocking error: a warning, and
//!   otherwise ignored, unless the hook sets `"fail_closed": true`, which makes the failure
//!   deny the call (or block the result).
//! - An answer that cannot be read (stdout that starts like JSON but does not parse, stdout
//!   cut at the 1 MiB output cap, a decision this crate does not know, a hook stopped by
//!   [`CommandHooks::kill_all`]) denies the call before the tool, since the hook may have
//!   denied it; after the tool it is a warning (a block with `fail_closed`). It is never read
//!   as an allow.
//! - Reasons and warnings name a hook by its event, position and matcher
//!   (`PreToolUse hook #2 (matcher "write_file|edit_file")`), never by its command line,
//!   which may carry secrets. Warnings go to the sink given to [`CommandHooks::with_warnings`],
//!   one line each (by default to `tracing` at WARN level); the library prints nothing.
//! - [`HookSettings::script_paths`] lists the files the hook commands run, for a host that
//!   protects them from the tools.
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
mod name;
mod protocol;
mod runner;
mod scripts;
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
use runner::{Limits, LiveGroups};
use serde_json::{Value, json};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a hook's stdout and stderr may still be read after it exited, by default.
///
/// Everything the hook itself printed is in its pipes by then; only a child it left behind
/// can keep them open, and that child is killed when the grace ends.
pub const DEFAULT_OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// Where warnings go: one line per event, for the user.
pub type WarningSink = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone, Default)]
struct Warnings(Option<WarningSink>);

impl Warnings {
    fn emit(&self, line: &str) {
        match &self.0 {
            Some(sink) => sink(line),
            None => tracing::warn!("{line}"),
        }
    }
}

impl fmt::Debug for Warnings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Warnings(sink)"
        } else {
            "Warnings(tracing)"
        })
    }
}

#[derive(Debug, Clone)]
struct Inner {
    settings: HookSettings,
    workspace: PathBuf,
    session_id: String,
    transcript_path: Option<PathBuf>,
    warnings: Warnings,
    grace: Duration,
    /// Shared by every clone, and by the handlers made before a `with_…` call.
    live: Arc<LiveGroups>,
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
                warnings: Warnings::default(),
                grace: DEFAULT_OUTPUT_GRACE,
                live: Arc::default(),
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

    /// Where warnings go: one line each time a hook fails, gives an answer that cannot be
    /// read, or answers in a way that is ignored. Without it they go to `tracing` (WARN).
    /// A command-line host prints them on stderr; the lines never quote a hook's command.
    pub fn with_warnings(mut self, sink: WarningSink) -> CommandHooks {
        Arc::make_mut(&mut self.inner).warnings = Warnings(Some(sink));
        self
    }

    /// How long a hook's output may still be read after it exited (by default
    /// [`DEFAULT_OUTPUT_GRACE`]); then its process group is killed.
    pub fn with_output_grace(mut self, grace: Duration) -> CommandHooks {
        Arc::make_mut(&mut self.inner).grace = grace;
        self
    }

    /// Kills the process group of every hook running now, and starts no hook from then on:
    /// for a host that is about to exit (SIGINT, SIGTERM) without dropping the calls in
    /// flight. Returns how many groups it killed.
    ///
    /// Dropping a call's future already kills its hooks; but a process that exits at once
    /// drops nothing, and hooks run in process groups of their own, so a terminal's Ctrl-C
    /// does not reach them either. A `PreToolUse` hook killed or not started this way denies
    /// its call (it never answered); a `PostToolUse` one is a warning (a block when it fails
    /// closed). It affects every clone of these hooks and every handler made from them.
    /// Safe to call from any thread, more than once.
    pub fn kill_all(&self) -> usize {
        self.inner.live.kill_all()
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
    /// Dropping the future kills every hook it started (with what they started).
    async fn run(&self, event: HookEvent, tool: &str, input: Value) -> Vec<Verdict> {
        let hooks: Vec<_> = self.settings.matching_named(event, tool).collect();
        if hooks.is_empty() {
            return Vec::new();
        }
        let mut bytes = input.to_string().into_bytes();
        bytes.push(b'\n');
        let bytes = &bytes;
        futures::future::join_all(hooks.into_iter().map(|(name, hook)| async move {
            let limits = Limits {
                timeout: hook.timeout,
                grace: self.grace,
            };
            let ran = runner::run(&hook.command, &self.workspace, bytes, limits, &self.live).await;
            let verdict = interpret(event, &name, hook, ran);
            for line in &verdict.warnings {
                self.warnings.emit(&protocol::one_line(line, 1000));
            }
            verdict
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
