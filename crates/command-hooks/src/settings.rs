//! The hooks of a settings file, in Claude Code's shape:
//!
//! ```json
//! {"hooks": {
//!   "PreToolUse":  [{"matcher": "write_file|edit_file",
//!                    "hooks": [{"type": "command", "command": "./check.sh", "timeout": 30}]}],
//!   "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "./audit.sh"}]}]
//! }}
//! ```
//!
//! Other top-level keys of a settings file are ignored, so a user's existing
//! `.claude/settings.json` works as it is. Other hook events and hook types other than
//! `command` are skipped with a warning. `fail_closed: true` in a hook object (a dsh
//! extension) makes a hook that fails or times out deny the call instead of being ignored.

use crate::error::CommandHooksError;
use crate::matcher::Matcher;
use crate::name::HookName;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A hook's deadline when it does not give one (Claude Code's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The two events dsh runs hooks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookEvent {
    /// Before the tool runs (`tools/pre-execute`).
    PreToolUse,
    /// After it ran successfully (`tools/post-execute`).
    PostToolUse,
}

impl HookEvent {
    /// The event's name in the protocol.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
        }
    }
}

/// One configured command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    /// Run with `sh -c`, the workspace as its working directory.
    pub command: String,
    /// Killed after this long.
    pub timeout: Duration,
    /// When it fails or times out: deny (true) or carry on (false, the default).
    pub fail_closed: bool,
}

/// A `matcher` with its hooks.
#[derive(Debug, Clone)]
pub struct MatcherGroup {
    /// The matcher as written.
    pub matcher_text: String,
    /// The matcher.
    pub matcher: Matcher,
    /// Its commands, in order.
    pub hooks: Vec<HookCommand>,
}

/// The `PreToolUse` and `PostToolUse` hooks of a settings file.
///
/// ```
/// use dsh_command_hooks::{HookEvent, HookSettings};
/// let settings = HookSettings::from_json(r#"{"model": "x", "hooks": {"PreToolUse": [
///     {"matcher": "write_file", "hooks": [{"type": "command", "command": "exit 0", "timeout": 5}]}
/// ]}}"#).unwrap();
/// assert_eq!(settings.matching(HookEvent::PreToolUse, "write_file").count(), 1);
/// assert_eq!(settings.matching(HookEvent::PreToolUse, "read_file").count(), 0);
/// ```
#[derive(Debug, Clone, Default)]
pub struct HookSettings {
    pre_tool_use: Vec<MatcherGroup>,
    post_tool_use: Vec<MatcherGroup>,
}

fn entry_error(event: &str, index: usize, reason: impl Into<String>) -> CommandHooksError {
    CommandHooksError::Entry {
        event: event.to_string(),
        index,
        reason: reason.into(),
    }
}

fn timeout_of(
    hook: &Map<String, Value>,
    event: &str,
    index: usize,
) -> Result<Duration, CommandHooksError> {
    match hook.get("timeout") {
        None | Some(Value::Null) => Ok(DEFAULT_TIMEOUT),
        Some(v) => match v.as_f64() {
            Some(secs) if secs > 0.0 && secs.is_finite() && secs <= 86_400.0 => {
                Ok(Duration::from_secs_f64(secs))
            }
            _ => Err(entry_error(
                event,
                index,
                format!("`timeout` must be a number of seconds above 0 (at most a day), not {v}"),
            )),
        },
    }
}

fn parse_hook(
    hook: &Value,
    event: &str,
    index: usize,
) -> Result<Option<HookCommand>, CommandHooksError> {
    let Some(hook) = hook.as_object() else {
        return Err(entry_error(
            event,
            index,
            "each of `hooks` must be an object",
        ));
    };
    match hook.get("type").and_then(Value::as_str) {
        Some("command") => {}
        Some(other) => {
            tracing::warn!(
                event,
                index,
                kind = other,
                "hook type other than `command` ignored"
            );
            return Ok(None);
        }
        None => {
            return Err(entry_error(
                event,
                index,
                "a hook needs `\"type\": \"command\"`",
            ));
        }
    }
    let command = match hook.get("command").and_then(Value::as_str) {
        Some(c) if !c.trim().is_empty() => c.to_string(),
        _ => {
            return Err(entry_error(
                event,
                index,
                "a command hook needs a non-empty `command` string",
            ));
        }
    };
    let fail_closed = match hook.get("fail_closed").or_else(|| hook.get("failClosed")) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(entry_error(
                event,
                index,
                format!("`fail_closed` must be true or false, not {other}"),
            ));
        }
    };
    Ok(Some(HookCommand {
        command,
        timeout: timeout_of(hook, event, index)?,
        fail_closed,
    }))
}

fn parse_groups(event: &str, groups: &Value) -> Result<Vec<MatcherGroup>, CommandHooksError> {
    let Some(groups) = groups.as_array() else {
        return Err(CommandHooksError::Invalid(format!(
            "`hooks.{event}` must be a list of matcher groups"
        )));
    };
    let mut out = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        let Some(group) = group.as_object() else {
            return Err(entry_error(
                event,
                index,
                "a matcher group must be an object",
            ));
        };
        let matcher_text = match group.get("matcher") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(entry_error(
                    event,
                    index,
                    format!("`matcher` must be a string, not {other}"),
                ));
            }
        };
        let matcher = Matcher::parse(&matcher_text).map_err(|e| entry_error(event, index, e))?;
        let Some(hooks) = group.get("hooks").and_then(Value::as_array) else {
            return Err(entry_error(
                event,
                index,
                "a matcher group needs a `hooks` list",
            ));
        };
        let mut commands = Vec::new();
        for hook in hooks {
            if let Some(command) = parse_hook(hook, event, index)? {
                commands.push(command);
            }
        }
        out.push(MatcherGroup {
            matcher_text,
            matcher,
            hooks: commands,
        });
    }
    Ok(out)
}

impl HookSettings {
    /// Reads a settings file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<HookSettings, CommandHooksError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| CommandHooksError::Read {
            path: path.display().to_string(),
            source,
        })?;
        HookSettings::from_json(&text)
    }

    /// Parses settings JSON.
    pub fn from_json(text: &str) -> Result<HookSettings, CommandHooksError> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| CommandHooksError::Invalid(format!("not JSON: {e}")))?;
        let Some(root) = root.as_object() else {
            return Err(CommandHooksError::Invalid(
                "the settings must be a JSON object".into(),
            ));
        };
        let mut settings = HookSettings::default();
        let Some(hooks) = root.get("hooks") else {
            tracing::warn!("the settings have no `hooks`; no command hooks will run");
            return Ok(settings);
        };
        let Some(hooks) = hooks.as_object() else {
            return Err(CommandHooksError::Invalid(
                "`hooks` must be an object of events".into(),
            ));
        };
        for (event, groups) in hooks {
            match event.as_str() {
                "PreToolUse" => settings.pre_tool_use = parse_groups(event, groups)?,
                "PostToolUse" => settings.post_tool_use = parse_groups(event, groups)?,
                other => {
                    tracing::warn!(
                        event = other,
                        "dsh runs only PreToolUse and PostToolUse hooks; ignored"
                    );
                }
            }
        }
        Ok(settings)
    }

    /// The groups of an event, in order.
    pub fn groups(&self, event: HookEvent) -> &[MatcherGroup] {
        match event {
            HookEvent::PreToolUse => &self.pre_tool_use,
            HookEvent::PostToolUse => &self.post_tool_use,
        }
    }

    /// The commands that run for `tool` at `event`, in order.
    pub fn matching<'a>(
        &'a self,
        event: HookEvent,
        tool: &'a str,
    ) -> impl Iterator<Item = &'a HookCommand> + 'a {
        self.groups(event)
            .iter()
            .filter(move |g| g.matcher.matches(tool))
            .flat_map(|g| g.hooks.iter())
    }

    /// The commands that run for `tool` at `event`, in order, each with its name for reasons
    /// and warnings (its position counts every command hook of the event, matching or not).
    pub(crate) fn matching_named<'a>(
        &'a self,
        event: HookEvent,
        tool: &'a str,
    ) -> impl Iterator<Item = (HookName, &'a HookCommand)> + 'a {
        self.groups(event)
            .iter()
            .scan(0usize, |before, group| {
                let first = *before;
                *before += group.hooks.len();
                Some((first, group))
            })
            .filter(move |(_, group)| group.matcher.matches(tool))
            .flat_map(move |(first, group)| {
                group.hooks.iter().enumerate().map(move |(i, hook)| {
                    let name = HookName {
                        event,
                        position: first + i + 1,
                        matcher: group.matcher_text.clone(),
                    };
                    (name, hook)
                })
            })
    }

    /// Every existing file a configured hook command names, absolute and canonical: the
    /// program when it is a path, and every word of the command (and the part after `=` of a
    /// `NAME=value` or `--option=value` word) that is a regular file, relative to `root` (the
    /// hooks' working directory) or to a directory the command `cd`s into. `$NAME` and
    /// `${NAME}` are expanded as the shell would (`CLAUDE_PROJECT_DIR` is `root`, the rest
    /// comes from this process's environment, as hooks inherit it), `~/` is `$HOME/`, and
    /// quotes and backslashes are read as the shell reads them; a quoted word that is itself
    /// a command (`sh -c './a.sh && ./b.sh'`) is read as one too. A file reached through a
    /// symbolic link is given both as the link (in its canonical directory) and as its target.
    ///
    /// It over-approximates (a word that happens to name a file counts), which is what it is
    /// for: the files a tool must not write, lest it change what a hook runs.
    ///
    /// ```
    /// use dsh_command_hooks::HookSettings;
    /// let root = tempfile::tempdir().unwrap();
    /// std::fs::create_dir(root.path().join("hooks")).unwrap();
    /// std::fs::write(root.path().join("hooks/check.sh"), "exit 0").unwrap();
    /// let settings = HookSettings::from_json(r#"{"hooks": {"PreToolUse": [{"hooks": [
    ///     {"type": "command", "command": "TOKEN=x sh \"$CLAUDE_PROJECT_DIR\"/hooks/check.sh --strict"}
    /// ]}]}}"#).unwrap();
    /// let paths = settings.script_paths(root.path());
    /// assert_eq!(paths, [root.path().join("hooks/check.sh").canonicalize().unwrap()]);
    /// ```
    pub fn script_paths(&self, root: &Path) -> Vec<PathBuf> {
        let commands = self
            .pre_tool_use
            .iter()
            .chain(&self.post_tool_use)
            .flat_map(|group| group.hooks.iter())
            .map(|hook| hook.command.as_str());
        crate::scripts::named_files(commands, root)
    }

    /// True when no command is configured for either event.
    pub fn is_empty(&self) -> bool {
        self.pre_tool_use.iter().all(|g| g.hooks.is_empty())
            && self.post_tool_use.iter().all(|g| g.hooks.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_keys_events_and_types_are_ignored() {
        let s = HookSettings::from_json(
            r#"{"permissions": {"allow": []}, "hooks": {
                "Stop": [{"hooks": [{"type": "command", "command": "x"}]}],
                "PreToolUse": [{"matcher": "", "hooks": [
                    {"type": "prompt", "prompt": "is this ok?"},
                    {"type": "command", "command": "a", "timeout": 1.5, "fail_closed": true}]}]
            }}"#,
        )
        .unwrap();
        let pre: Vec<_> = s.matching(HookEvent::PreToolUse, "t").collect();
        assert_eq!(
            pre,
            [&HookCommand {
                command: "a".into(),
                timeout: Duration::from_millis(1500),
                fail_closed: true
            }]
        );
        assert_eq!(s.matching(HookEvent::PostToolUse, "t").count(), 0);
        assert!(!s.is_empty());
        assert!(
            HookSettings::from_json(r#"{"model": "x"}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn the_default_timeout_is_a_minute() {
        let s = HookSettings::from_json(
            r#"{"hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": "a"}]}]}}"#,
        )
        .unwrap();
        let hook = s.matching(HookEvent::PostToolUse, "x").next().unwrap();
        assert_eq!(hook.timeout, DEFAULT_TIMEOUT);
        assert!(!hook.fail_closed);
    }

    #[test]
    fn bad_entries_say_where() {
        let cases = [
            ("{", "not JSON"),
            ("[]", "JSON object"),
            (r#"{"hooks": []}"#, "object of events"),
            (
                r#"{"hooks": {"PreToolUse": {}}}"#,
                "hooks.PreToolUse` must be a list",
            ),
            (
                r#"{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}"#,
                "hooks.PreToolUse[0]: matcher `(`",
            ),
            (
                r#"{"hooks": {"PostToolUse": [{"matcher": "x"}]}}"#,
                "hooks.PostToolUse[0]: a matcher group needs",
            ),
            (
                r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command"}]}]}}"#,
                "non-empty `command`",
            ),
            (
                r#"{"hooks": {"PreToolUse": [{"hooks": [{"command": "x"}]}]}}"#,
                "\"type\"",
            ),
            (
                r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "timeout": 0}]}]}}"#,
                "`timeout`",
            ),
            (
                r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "fail_closed": "yes"}]}]}}"#,
                "`fail_closed`",
            ),
            (
                r#"{"hooks": {"PreToolUse": [{"matcher": 3, "hooks": []}]}}"#,
                "`matcher` must be a string",
            ),
        ];
        for (text, needle) in cases {
            let e = HookSettings::from_json(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
