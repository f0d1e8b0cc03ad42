//! An answer dsh cannot read (cut at the output cap, or not JSON although it starts like JSON,
//! or a decision it does not know) from a hook that may deny is a denial before the tool, and
//! a visible warning after it; never an allow, never silent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Rig, code, command, post, pre};
use dsh_command_hooks::CommandHooks;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// At most the first 300 characters of `text`, for failure messages.
fn short(text: &str) -> String {
    text.chars().take(300).collect()
}

/// Hooks whose warnings are kept.
fn warned(hooks: CommandHooks) -> (CommandHooks, Arc<Mutex<Vec<String>>>) {
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = lines.clone();
    let hooks = hooks.with_warnings(Arc::new(move |line: &str| {
        sink.lock().unwrap().push(line.to_string());
    }));
    (hooks, lines)
}

/// A PreToolUse hook that denies every call, quoting its whole input in the reason (escaped
/// for a JSON string, as a careful script would).
fn quoting_denier(rig: &Rig) -> Value {
    command(&rig.script(
        "quote.sh",
        r#"input=$(cat)
esc=$(printf '%s' "$input" | sed 's/\\/\\\\/g; s/"/\\"/g')
printf '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "refused: %s"}}\n' "$esc""#,
    ))
}

#[tokio::test]
async fn a_deny_that_quotes_a_large_input_still_denies() {
    let rig = Rig::new();
    let (hooks, warnings) = warned(rig.hooks(&pre(vec![quoting_denier(&rig)])));

    // The hook works: a small input is refused with its own reason.
    let r = rig.call_with(&hooks, json!({"text": "small"})).await;
    assert_eq!(code(&r), "DENIED", "{}", short(&r.text()));
    assert!(
        r.text().contains("refused: ") && r.text().contains("small"),
        "{}",
        short(&r.text())
    );

    // 1.1 MB of input makes its answer pass the output cap: it is cut, and still a denial.
    let big = "y".repeat(1_100_000);
    let r = rig.call_with(&hooks, json!({"text": big})).await;
    assert_eq!(code(&r), "DENIED", "{}", short(&r.text()));
    assert!(
        r.text().contains("PreToolUse hook #1"),
        "{}",
        short(&r.text())
    );
    assert!(r.text().contains("cut"), "says why: {}", short(&r.text()));
    assert!(rig.ran().is_empty(), "the tool never ran");
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("PreToolUse hook #1"), "{warnings:?}");
    assert!(!warnings[0].contains('\n'), "one line");
}

#[tokio::test]
async fn an_answer_is_known_to_be_cut_even_when_a_child_holds_the_pipe_open() {
    let rig = Rig::new();
    let m = common::Marker::new();
    // The pipe never reaches its end while the hook's child lives: the cut must still show.
    let hook = command(&rig.script(
        "quote.sh",
        &format!(
            r#"(sleep {m} &)
input=$(cat)
printf '{{"decision": "block", "reason": "%s"}}\n' "$input""#
        ),
    ));
    let (hooks, _warnings) = warned(rig.hooks(&pre(vec![hook])));
    let r = rig
        .call_with(&hooks, json!({"text": "q".repeat(1_100_000)}))
        .await;
    assert_eq!(code(&r), "DENIED", "{}", short(&r.text()));
    assert!(r.text().contains("cut"), "{}", short(&r.text()));
    assert!(rig.ran().is_empty());
    assert!(common::survivors(m.as_str()).is_empty());
}

#[tokio::test]
async fn broken_json_before_the_tool_denies_even_without_fail_closed() {
    let rig = Rig::new();
    let hook = command(&rig.script("bad.sh", "cat > /dev/null\necho '{\"bad json'"));
    let (hooks, warnings) = warned(rig.hooks(&pre(vec![hook])));
    let r = rig.call_with(&hooks, json!({"text": "hi"})).await;
    assert_eq!(code(&r), "DENIED", "{}", short(&r.text()));
    assert!(
        r.text().contains("PreToolUse hook #1") && r.text().contains("not valid JSON"),
        "{}",
        short(&r.text())
    );
    assert!(rig.ran().is_empty());
    assert_eq!(warnings.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn broken_json_after_the_tool_is_a_visible_warning() {
    let rig = Rig::new();
    let hook = command(&rig.script("bad.sh", "cat > /dev/null\necho '{\"bad json'"));
    let (hooks, warnings) = warned(rig.hooks(&post(vec![hook.clone()])));
    let r = rig.call_with(&hooks, json!({"text": "hi"})).await;
    assert_eq!(code(&r), "ok", "{}", short(&r.text()));
    let lines = warnings.lock().unwrap().clone();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("PostToolUse hook #1") && lines[0].contains("not valid JSON"),
        "{lines:?}"
    );

    // A hook that fails closed blocks the result instead.
    let mut strict = hook;
    strict["fail_closed"] = json!(true);
    let (hooks, warnings) = warned(rig.hooks(&post(vec![strict])));
    let r = rig.call_with(&hooks, json!({"text": "hi"})).await;
    assert_eq!(code(&r), "BLOCKED", "{}", short(&r.text()));
    assert_eq!(warnings.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_cut_answer_after_the_tool_is_a_visible_warning() {
    let rig = Rig::new();
    // A block whose reason quotes the whole (large) tool response.
    let hook = command(&rig.script(
        "block.sh",
        r#"input=$(cat)
esc=$(printf '%s' "$input" | sed 's/\\/\\\\/g; s/"/\\"/g')
printf '{"decision": "block", "reason": "%s"}\n' "$esc""#,
    ));
    let (hooks, warnings) = warned(rig.hooks(&post(vec![hook])));
    let r = rig
        .call_with(&hooks, json!({"text": "z".repeat(1_100_000)}))
        .await;
    assert_ne!(code(&r), "BLOCKED", "the block could not be read");
    let lines = warnings.lock().unwrap().clone();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("PostToolUse hook #1") && lines[0].contains("cut"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_decision_dsh_does_not_know_denies() {
    let rig = Rig::new();
    for (name, answer) in [
        (
            "capital.sh",
            r#"{"hookSpecificOutput": {"permissionDecision": "Deny"}}"#,
        ),
        (
            "number.sh",
            r#"{"hookSpecificOutput": {"permissionDecision": 0}}"#,
        ),
        ("old.sh", r#"{"decision": "deny", "reason": "no"}"#),
    ] {
        let hook = command(&rig.script(name, &format!("cat > /dev/null\necho '{answer}'")));
        let r = rig.one(pre(vec![hook])).await;
        assert_eq!(code(&r), "DENIED", "{answer}: {}", short(&r.text()));
        assert!(
            r.text().contains("PreToolUse hook #1"),
            "{}",
            short(&r.text())
        );
    }
    assert!(rig.ran().is_empty());
}

#[tokio::test]
async fn plain_text_is_not_an_answer_however_long() {
    let rig = Rig::new();
    // 2 MB of log lines on stdout and exit 0: plain text, so no answer and no objection.
    let hook = command(&rig.script(
        "chatty.sh",
        "cat > /dev/null\ni=0\nwhile [ $i -lt 40000 ]; do echo \"checked line $i of the input, all fine\"; i=$((i+1)); done\nexit 0",
    ));
    let r = rig.one(pre(vec![hook])).await;
    assert_eq!(code(&r), "ok", "{}", short(&r.text()));
    assert_eq!(rig.ran().len(), 1);
}

#[tokio::test]
async fn warnings_are_one_line_per_failed_hook() {
    let rig = Rig::new();
    let broken = command(&rig.script(
        "broken.sh",
        "cat > /dev/null\nprintf 'line one\\nline two\\n' >&2\nexit 1",
    ));
    let fine = command(&rig.script("fine.sh", "cat > /dev/null\nexit 0"));
    let (hooks, warnings) = warned(rig.hooks(&pre(vec![fine, broken])));
    let r = rig.call_with(&hooks, json!({"text": "hi"})).await;
    assert_eq!(
        code(&r),
        "ok",
        "exit 1 is a non-blocking error: {}",
        short(&r.text())
    );
    let lines = warnings.lock().unwrap().clone();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("PreToolUse hook #2") && lines[0].contains("exit code 1"),
        "{lines:?}"
    );
    assert!(!lines[0].contains('\n'), "{lines:?}");
}
