//! Claude Code's hook protocol: what a hook reads on stdin, and what its exit code and
//! stdout mean.
//!
//! - exit 0: stdout, if it is a JSON object, is read (`continue`, `stopReason`, `decision`,
//!   `reason`, `hookSpecificOutput` with `permissionDecision`, `permissionDecisionReason`,
//!   `updatedInput`, `additionalContext`); other stdout is ignored.
//! - exit 2: blocks: `PreToolUse` denies the call, `PostToolUse` blocks the result; stderr is
//!   the reason.
//! - any other exit, a signal, or a timeout: a non-blocking error, a warning; with
//!   `fail_closed` it denies (or blocks) instead.
//! - an answer that cannot be read (stdout that starts like JSON but does not parse, one cut
//!   at the output cap, a decision this reader does not know, a hook stopped before it
//!   answered): a `PreToolUse` hook may deny, so it denies (fail closed, whatever
//!   `fail_closed` says); after the tool it is a warning (a block with `fail_closed`).
//!   Never read as an allow, never silent.

use crate::name::HookName;
use crate::runner::{MAX_OUTPUT, Output, Ran};
use crate::settings::{HookCommand, HookEvent};
use dsh_core::PreToolDecision;
use serde_json::{Map, Value};

/// The most of a hook's stderr quoted in a failure's message.
const STDERR_QUOTED: usize = 300;

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
    /// One line each, for the user (the warning sink), never for the model.
    pub warnings: Vec<String>,
}

/// `text` on one line (control characters as spaces), at most `max` characters.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let mut line = String::new();
    for (i, c) in text.trim().chars().enumerate() {
        if i == max {
            line.push('…');
            break;
        }
        line.push(if c.is_control() { ' ' } else { c });
    }
    line
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

/// What a stop means, for warnings.
fn stopped_what(event: HookEvent) -> &'static str {
    match event {
        HookEvent::PreToolUse => "the call is denied",
        HookEvent::PostToolUse => "the result is blocked",
    }
}

/// A failed hook (a non-blocking error): ignored, or a denial when it is configured
/// `fail_closed`; a warning either way.
fn failed(event: HookEvent, name: &HookName, hook: &HookCommand, what: &str) -> Verdict {
    if hook.fail_closed {
        let mut verdict = stop(
            event,
            format!("{name} failed ({what}) and is configured to fail closed"),
        );
        verdict
            .warnings
            .push(format!("{name} failed ({what}); {}", stopped_what(event)));
        verdict
    } else {
        Verdict {
            warnings: vec![format!("{name} failed ({what}); ignored")],
            ..Verdict::default()
        }
    }
}

/// An answer that cannot be read: a denial before the tool (the hook may have denied), a
/// warning after it (a block when the hook fails closed).
fn unreadable(event: HookEvent, name: &HookName, hook: &HookCommand, why: &str) -> Verdict {
    let deny = match event {
        HookEvent::PreToolUse => true,
        HookEvent::PostToolUse => hook.fail_closed,
    };
    if deny {
        let mut verdict = stop(
            event,
            format!("{name} gave an answer that cannot be read ({why}), so it counts as a refusal"),
        );
        verdict.warnings.push(format!(
            "{name}: its answer cannot be read ({why}); {}",
            stopped_what(event)
        ));
        verdict
    } else {
        Verdict {
            warnings: vec![format!(
                "{name}: its answer cannot be read ({why}); ignored"
            )],
            ..Verdict::default()
        }
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

/// Reads the JSON a hook printed on a zero exit; `Err` says why it cannot be read.
fn read_output(
    event: HookEvent,
    name: &HookName,
    out: &Map<String, Value>,
) -> Result<Verdict, String> {
    match out.get("continue") {
        None | Some(Value::Null) | Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            let reason =
                text_field(out, "stopReason").unwrap_or_else(|| format!("{name} stopped the call"));
            return Ok(stop(event, reason));
        }
        Some(other) => return Err(format!("`continue` is {other}, not true or false")),
    }
    if let Some(message) = text_field(out, "systemMessage") {
        tracing::info!(hook = %name, "hook message: {message}");
    }
    let mut verdict = Verdict::default();
    let specific = match out.get("hookSpecificOutput") {
        None | Some(Value::Null) => None,
        Some(Value::Object(s)) => match s.get("hookEventName").and_then(Value::as_str) {
            Some(other) if other != event.as_str() => {
                verdict.warnings.push(format!(
                    "{name}: its hookSpecificOutput is for {}, not {}; ignored",
                    one_line(other, 40),
                    event.as_str()
                ));
                None
            }
            _ => Some(s),
        },
        Some(_) => return Err("`hookSpecificOutput` is not an object".into()),
    };
    let reason = text_field(out, "reason");
    let decision = match out.get("decision") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.as_str()),
        Some(other) => return Err(format!("`decision` is {other}, not a string")),
    };
    match event {
        HookEvent::PreToolUse => {
            let said = match specific.and_then(|s| s.get("permissionDecision")) {
                None | Some(Value::Null) => None,
                Some(Value::String(d)) => Some(d.as_str()),
                Some(other) => {
                    return Err(format!("`permissionDecision` is {other}, not a string"));
                }
            };
            let why = specific
                .and_then(|s| text_field(s, "permissionDecisionReason"))
                .or(reason);
            verdict.decision = match (said, decision) {
                (Some("allow"), _) | (None, Some("approve")) => Some(PreToolDecision::Allow),
                (Some("deny"), _) | (None, Some("block")) => Some(PreToolDecision::Deny(
                    why.unwrap_or_else(|| format!("denied by {name}")),
                )),
                (Some("ask"), _) => Some(PreToolDecision::Ask(
                    why.unwrap_or_else(|| format!("{name} asks for confirmation")),
                )),
                (Some(other), _) => {
                    return Err(format!(
                        "unknown permissionDecision \"{}\"",
                        one_line(other, 40)
                    ));
                }
                (None, Some(other)) => {
                    return Err(format!("unknown decision \"{}\"", one_line(other, 40)));
                }
                (None, None) => None,
            };
            if !matches!(verdict.decision, Some(PreToolDecision::Deny(_))) {
                verdict.updated_input = specific.and_then(|s| s.get("updatedInput")).cloned();
            }
        }
        HookEvent::PostToolUse => {
            match decision {
                None => {}
                Some("block") => {
                    verdict.block = Some(reason.unwrap_or_else(|| format!("blocked by {name}")));
                }
                Some(other) => {
                    return Err(format!("unknown decision \"{}\"", one_line(other, 40)));
                }
            }
            verdict.additional_context = specific.and_then(|s| text_field(s, "additionalContext"));
        }
    }
    Ok(verdict)
}

/// The reason an exit 2 gives: its stderr, or dsh's words when it said nothing.
fn exit_2_reason(name: &HookName, stderr: &Output) -> String {
    let reason = stderr.text.trim();
    if reason.is_empty() {
        return format!("{name} blocked the call (exit code 2)");
    }
    if stderr.cut {
        format!("{reason} […]")
    } else {
        reason.to_string()
    }
}

/// Reads what a hook printed on a zero exit.
fn read_stdout(event: HookEvent, name: &HookName, hook: &HookCommand, stdout: &Output) -> Verdict {
    // A byte-order mark is not whitespace to `trim`, but it is no answer either.
    let text = stdout
        .text
        .trim()
        .trim_start_matches('\u{feff}')
        .trim_start();
    let looks_like_json = text.starts_with('{');
    if stdout.cut && (looks_like_json || text.is_empty()) {
        return unreadable(
            event,
            name,
            hook,
            &format!(
                "its output passed the {} MiB cap and was cut",
                MAX_OUTPUT / (1024 * 1024)
            ),
        );
    }
    if !looks_like_json {
        if !text.is_empty() {
            tracing::debug!(hook = %name, "hook output (not JSON): {}", one_line(text, 200));
        }
        return Verdict::default();
    }
    match serde_json::from_str::<Map<String, Value>>(text) {
        Ok(out) => match read_output(event, name, &out) {
            Ok(verdict) => verdict,
            Err(why) => unreadable(event, name, hook, &why),
        },
        Err(e) => unreadable(event, name, hook, &format!("it is not valid JSON: {e}")),
    }
}

/// What a finished hook run means.
pub(crate) fn interpret(
    event: HookEvent,
    name: &HookName,
    hook: &HookCommand,
    ran: Ran,
) -> Verdict {
    match ran {
        Ran::TimedOut => failed(
            event,
            name,
            hook,
            &format!("killed after its timeout of {:?}", hook.timeout),
        ),
        Ran::CouldNotRun(why) => failed(event, name, hook, &why),
        Ran::Stopped => unreadable(
            event,
            name,
            hook,
            "it was stopped before it answered: the hooks were shut down",
        ),
        Ran::Exited { code: None, .. } => failed(event, name, hook, "ended by a signal"),
        Ran::Exited {
            code: Some(2),
            stderr,
            ..
        } => stop(event, exit_2_reason(name, &stderr)),
        Ran::Exited {
            code: Some(0),
            stdout,
            ..
        } => read_stdout(event, name, hook, &stdout),
        Ran::Exited {
            code: Some(code),
            stderr,
            ..
        } => {
            let said = one_line(&stderr.text, STDERR_QUOTED);
            let what = if said.is_empty() {
                format!("exit code {code}")
            } else {
                format!("exit code {code}: {said}")
            };
            failed(event, name, hook, &what)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hook(fail_closed: bool) -> HookCommand {
        HookCommand {
            command: "SECRET=x ./check.sh".into(),
            timeout: Duration::from_secs(1),
            fail_closed,
        }
    }

    fn name(event: HookEvent) -> HookName {
        HookName {
            event,
            position: 1,
            matcher: "alpha".into(),
        }
    }

    fn exit0(stdout: &str) -> Ran {
        Ran::Exited {
            code: Some(0),
            stdout: Output {
                text: stdout.into(),
                cut: false,
            },
            stderr: Output::default(),
        }
    }

    fn pre(fail_closed: bool, ran: Ran) -> Verdict {
        let event = HookEvent::PreToolUse;
        interpret(event, &name(event), &hook(fail_closed), ran)
    }

    fn post(fail_closed: bool, ran: Ran) -> Verdict {
        let event = HookEvent::PostToolUse;
        interpret(event, &name(event), &hook(fail_closed), ran)
    }

    fn denied(v: &Verdict) -> &str {
        match &v.decision {
            Some(PreToolDecision::Deny(r)) => r,
            other => panic!("not a denial: {other:?}"),
        }
    }

    #[test]
    fn hook_specific_output_for_another_event_is_ignored_with_a_warning() {
        let v = pre(
            false,
            exit0(
                r#"{"hookSpecificOutput": {"hookEventName": "PostToolUse", "permissionDecision": "deny"}}"#,
            ),
        );
        assert_eq!(v.decision, None);
        assert_eq!(v.updated_input, None);
        assert_eq!(v.warnings.len(), 1, "{v:?}");
        assert!(v.warnings[0].contains("for PostToolUse"), "{v:?}");
    }

    #[test]
    fn plain_text_output_is_ignored_and_broken_json_denies_before_the_tool() {
        assert_eq!(pre(true, exit0("all good\n")), Verdict::default());
        for fail_closed in [false, true] {
            let v = pre(fail_closed, exit0("{oops"));
            assert!(denied(&v).contains("not valid JSON"), "{v:?}");
            assert_eq!(v.warnings.len(), 1);
        }
        let v = post(false, exit0("{oops"));
        assert_eq!((v.block.as_deref(), v.warnings.len()), (None, 1), "{v:?}");
        let v = post(true, exit0("{oops"));
        assert!(v.block.is_some_and(|r| r.contains("not valid JSON")));
    }

    #[test]
    fn a_cut_answer_is_never_parsed() {
        // What was kept happens to be a whole, harmless object: it is still not the answer.
        let cut = Ran::Exited {
            code: Some(0),
            stdout: Output {
                text: r#"{"hookSpecificOutput": {"permissionDecision": "allow"}}"#.into(),
                cut: true,
            },
            stderr: Output::default(),
        };
        assert!(denied(&pre(false, cut.clone())).contains("cut"));
        let v = post(false, cut);
        assert_eq!(v.block, None);
        assert!(v.warnings[0].contains("cut"), "{v:?}");
    }

    #[test]
    fn a_byte_order_mark_does_not_hide_an_answer() {
        let v = pre(
            false,
            exit0("\u{feff}{\"decision\": \"block\", \"reason\": \"no\"}"),
        );
        assert_eq!(denied(&v), "no");
    }

    #[test]
    fn a_deny_drops_the_updated_input() {
        let v = pre(
            false,
            exit0(
                r#"{"hookSpecificOutput": {"permissionDecision": "deny", "updatedInput": {"a": 1}}}"#,
            ),
        );
        assert_eq!(v.updated_input, None);
        assert_eq!(
            denied(&v),
            r#"denied by PreToolUse hook #1 (matcher "alpha")"#
        );
    }

    #[test]
    fn failures_quote_stderr_on_one_bounded_line_and_never_the_command() {
        let ran = Ran::Exited {
            code: Some(3),
            stdout: Output::default(),
            stderr: Output {
                text: format!("first\nsecond\r\n{}", "x".repeat(5000)),
                cut: false,
            },
        };
        let v = pre(true, ran);
        let reason = denied(&v);
        assert!(reason.contains("exit code 3: first second"), "{reason}");
        assert!(reason.len() < 1000, "{}", reason.len());
        assert!(!reason.contains("SECRET") && !reason.contains("check.sh"));
        assert!(!v.warnings[0].contains('\n') && !v.warnings[0].contains('\r'));
    }

    #[test]
    fn names_say_event_position_and_matcher() {
        let mut n = name(HookEvent::PostToolUse);
        n.position = 4;
        assert_eq!(n.to_string(), r#"PostToolUse hook #4 (matcher "alpha")"#);
        n.matcher = String::new();
        assert_eq!(n.to_string(), "PostToolUse hook #4 (no matcher)");
        n.matcher = format!("a\"b\n{}", "c".repeat(100));
        let shown = n.to_string();
        assert!(
            shown.contains(r#"a\"b\n"#) && shown.contains('…'),
            "{shown}"
        );
        assert!(!shown.contains('\n'));
    }
}
