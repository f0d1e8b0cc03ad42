//! Claude Code's hook protocol: what a hook reads on stdin, and what its exit code and
//! stdout mean.
//!
//! - exit 0: stdout, if it is a JSON object, is read (`continue`, `stopReason`, `decision`,
//!   `reason`, `hookSpecificOutput` with `permissionDecision`, `permissionDecisionReason`,
//!   `updatedInput`, `additionalContext`); other stdout is ignored.
//! - exit 2: blocks: `PreToolUse` denies the call, `PostToolUse` blocks the result; stderr is
//!   the reason.
//! - any other exit, a signal, a timeout, or stdout that starts like JSON but is not: a
//!   non-blocking error, logged; with `fail_closed` it denies (or blocks) instead.

use crate::runner::Ran;
use crate::settings::{HookCommand, HookEvent};
use dsh_core::PreToolDecision;
use serde_json::{Map, Value};

/// What one hook asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Verdict {
    /// `PreToolUse`: allow, deny or ask.
    pub decision: Option<PreToolDecision>,
    /// `PreToolUse`: replacement input.
    pub updated_input: Option<Value>,
    /// `PostToolUse`: block with this reason.
    pub block: Option<String>,
    /// `PostToolUse`: context for the model's next turn.
    pub additional_context: Option<String>,
}

/// Who said it, for reasons and logs: the first line of the command, cut short.
pub(crate) fn label(hook: &HookCommand) -> String {
    let first = hook.command.lines().next().unwrap_or_default().trim();
    let mut label: String = first.chars().take(60).collect();
    if label.len() < first.len() || hook.command.lines().count() > 1 {
        label.push('…');
    }
    label
}

fn stop(event: HookEvent, reason: String) -> Verdict {
    match event {
        HookEvent::PreToolUse => Verdict {
            decision: Some(PreToolDecision::Deny(reason)),
            ..Verdict::default()
        },
        HookEvent::PostToolUse => Verdict {
            block: Some(reason),
            ..Verdict::default()
        },
    }
}

/// A failed hook: ignored, or a denial when it is configured `fail_closed`.
fn failed(event: HookEvent, hook: &HookCommand, what: String) -> Verdict {
    tracing::warn!(event = event.as_str(), hook = %label(hook), "command hook failed: {what}");
    if hook.fail_closed {
        stop(
            event,
            format!(
                "hook `{}` failed ({what}) and is configured to fail closed",
                label(hook)
            ),
        )
    } else {
        Verdict::default()
    }
}

fn text_field(object: &Map<String, Value>, key: &str) -> Option<String> {
    object
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Reads the JSON a hook printed on a zero exit.
fn read_output(event: HookEvent, hook: &HookCommand, out: &Map<String, Value>) -> Verdict {
    let who = label(hook);
    if out.get("continue") == Some(&Value::Bool(false)) {
        let reason = text_field(out, "stopReason")
            .unwrap_or_else(|| format!("hook `{who}` stopped the call"));
        return stop(event, reason);
    }
    if let Some(message) = text_field(out, "systemMessage") {
        tracing::info!(hook = %who, "hook message: {message}");
    }
    let specific = match out.get("hookSpecificOutput").and_then(Value::as_object) {
        Some(s) => match s.get("hookEventName").and_then(Value::as_str) {
            Some(name) if name != event.as_str() => {
                tracing::warn!(hook = %who, "hookSpecificOutput for {name} ignored in {}", event.as_str());
                None
            }
            _ => Some(s),
        },
        None => None,
    };
    let reason = text_field(out, "reason");
    let mut verdict = Verdict::default();
    match event {
        HookEvent::PreToolUse => {
            let said = specific.and_then(|s| s.get("permissionDecision").and_then(Value::as_str));
            let why = specific
                .and_then(|s| text_field(s, "permissionDecisionReason"))
                .or(reason);
            verdict.decision = match (said, out.get("decision").and_then(Value::as_str)) {
                (Some("allow"), _) | (None, Some("approve")) => Some(PreToolDecision::Allow),
                (Some("deny"), _) | (None, Some("block")) => Some(PreToolDecision::Deny(
                    why.unwrap_or_else(|| format!("denied by hook `{who}`")),
                )),
                (Some("ask"), _) => {
                    Some(PreToolDecision::Ask(why.unwrap_or_else(|| {
                        format!("hook `{who}` asks for confirmation")
                    })))
                }
                (Some(other), _) => {
                    return failed(event, hook, format!("unknown permissionDecision `{other}`"));
                }
                (None, _) => None,
            };
            if !matches!(verdict.decision, Some(PreToolDecision::Deny(_))) {
                verdict.updated_input = specific.and_then(|s| s.get("updatedInput")).cloned();
            }
        }
        HookEvent::PostToolUse => {
            if out.get("decision").and_then(Value::as_str) == Some("block") {
                verdict.block = Some(reason.unwrap_or_else(|| format!("blocked by hook `{who}`")));
            }
            verdict.additional_context = specific.and_then(|s| text_field(s, "additionalContext"));
        }
    }
    verdict
}

/// What a finished hook run means.
pub(crate) fn interpret(event: HookEvent, hook: &HookCommand, ran: Ran) -> Verdict {
    match ran {
        Ran::TimedOut => failed(
            event,
            hook,
            format!("killed after its timeout of {:?}", hook.timeout),
        ),
        Ran::CouldNotRun(why) => failed(event, hook, why),
        Ran::Exited { code: None, .. } => failed(event, hook, "ended by a signal".into()),
        Ran::Exited {
            code: Some(2),
            stderr,
            ..
        } => {
            let reason = stderr.trim();
            stop(
                event,
                if reason.is_empty() {
                    format!("hook `{}` blocked the call (exit code 2)", label(hook))
                } else {
                    reason.to_string()
                },
            )
        }
        Ran::Exited {
            code: Some(0),
            stdout,
            ..
        } => {
            let text = stdout.trim();
            if !text.starts_with('{') {
                if !text.is_empty() {
                    tracing::debug!(hook = %label(hook), "hook output (not JSON): {text}");
                }
                return Verdict::default();
            }
            match serde_json::from_str::<Map<String, Value>>(text) {
                Ok(out) => read_output(event, hook, &out),
                Err(e) => failed(event, hook, format!("its JSON output is invalid: {e}")),
            }
        }
        Ran::Exited {
            code: Some(code),
            stderr,
            ..
        } => failed(event, hook, format!("exit code {code}: {}", stderr.trim())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hook(fail_closed: bool) -> HookCommand {
        HookCommand {
            command: "./check.sh".into(),
            timeout: Duration::from_secs(1),
            fail_closed,
        }
    }

    fn exit0(stdout: &str) -> Ran {
        Ran::Exited {
            code: Some(0),
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    #[test]
    fn hook_specific_output_for_another_event_is_ignored() {
        let v = interpret(
            HookEvent::PreToolUse,
            &hook(false),
            exit0(
                r#"{"hookSpecificOutput": {"hookEventName": "PostToolUse", "permissionDecision": "deny"}}"#,
            ),
        );
        assert_eq!(v, Verdict::default());
    }

    #[test]
    fn plain_text_output_is_ignored_and_broken_json_is_a_failure() {
        assert_eq!(
            interpret(HookEvent::PreToolUse, &hook(true), exit0("all good\n")),
            Verdict::default()
        );
        let v = interpret(HookEvent::PreToolUse, &hook(true), exit0("{oops"));
        assert!(
            matches!(&v.decision, Some(PreToolDecision::Deny(r)) if r.contains("invalid")),
            "{v:?}"
        );
        assert_eq!(
            interpret(HookEvent::PreToolUse, &hook(false), exit0("{oops")),
            Verdict::default()
        );
    }

    #[test]
    fn a_deny_drops_the_updated_input() {
        let v = interpret(
            HookEvent::PreToolUse,
            &hook(false),
            exit0(
                r#"{"hookSpecificOutput": {"permissionDecision": "deny", "updatedInput": {"a": 1}}}"#,
            ),
        );
        assert_eq!(v.updated_input, None);
        assert!(matches!(v.decision, Some(PreToolDecision::Deny(r)) if r.contains("check.sh")));
    }

    #[test]
    fn labels_are_short() {
        let long = HookCommand {
            command: format!("{}\nsecond line", "x".repeat(100)),
            ..hook(false)
        };
        let l = label(&long);
        assert_eq!(l.chars().count(), 61);
        assert!(l.ends_with('…'));
        assert_eq!(label(&hook(false)), "./check.sh");
    }
}
