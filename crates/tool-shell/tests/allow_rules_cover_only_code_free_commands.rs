//! Issue 28, break 8: an `allow` rule covers a command only when every word is known not to
//! run code. Expansions that run code the parser never sees as a command (arithmetic on a
//! name, `${x@P}`, `${!x}`, a parameter operator holding a substitution) leave the command
//! uncovered, and so under `default = "deny"` it does not run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::{SubjectKind, ToolDefinition};
use dsh_guards::{PermissionRules, RuleClass};
use dsh_tool_shell::SandboxConfig;
use serde_json::json;

/// The transcripts of the issue, each writing `pwned` when its hidden code runs.
const HIDDEN_CODE: &[&str] = &[
    "git status ${x:-`touch pwned`}",
    "git status ${x:='a[$(touch pwned)]'} $((x))",
    "git status ${x:='$(touch pwned)'} ${x@P}",
    "git status ${x:='a[$(touch pwned)]'} ${y[x]}",
    "git status ${x:='a[$(touch pwned)]'} ${PATH:x}",
    "x='a[$(touch pwned)]'; git status; ((x))",
    "x='a[$(touch pwned)]'; git status; [[ x -eq 1 ]]",
    "x='a[$(touch pwned)]'; git status; a[x]=1",
    "git status ${x:='$(touch pwned)'} \"${x@E}\"",
    "git status ${x:=pwned} ${!x}",
    "x='$(touch pwned)'; git status <<EOF\n${x@P}\nEOF",
    "x='a[$(touch pwned)]'; git status <<< $((x))",
];

fn rules() -> PermissionRules {
    PermissionRules::from_toml(
        r#"
        default = "deny"
        allow = ["shell(git status*)"]
        "#,
    )
    .unwrap()
}

#[tokio::test]
async fn hidden_code_is_real_and_leaves_the_command_uncovered() {
    let rules = rules();
    for command in HIDDEN_CODE {
        // The attack is real: run unchecked, the hidden code writes `pwned` (`@E` and
        // indirection only read values here: they are covered by classification alone).
        let env = Env::new(SandboxConfig::workspace_write());
        let subjects = env.tool.permission_subjects(&json!({ "command": command }));
        let class = rules
            .classify_kind("shell", SubjectKind::Command, &subjects)
            .map(|(c, _)| c);
        assert_eq!(class, None, "`{command}` is covered: {subjects:?}");
        if !command.contains("${!x}") && !command.contains("@E") {
            env.ok(command).await;
            assert!(
                exists(&env.path("pwned")),
                "`{command}` ran no hidden code, so the test proves nothing"
            );
        }
    }
}

#[test]
fn every_deny_rule_matches_hidden_code() {
    let env = Env::new(SandboxConfig::workspace_write());
    let rules = PermissionRules::from_toml(
        r#"
        allow = ["shell"]
        deny = ["shell(touch*)"]
        "#,
    )
    .unwrap();
    for command in HIDDEN_CODE {
        let subjects = env.tool.permission_subjects(&json!({ "command": command }));
        let class = rules
            .classify_kind("shell", SubjectKind::Command, &subjects)
            .map(|(c, _)| c);
        assert_eq!(class, Some(RuleClass::Deny), "`{command}`: {subjects:?}");
    }
}

#[test]
fn expansions_that_run_nothing_stay_covered() {
    let env = Env::new(SandboxConfig::workspace_write());
    let rules = rules();
    for command in [
        "git status $x",
        "git status \"${HOME}\"",
        "git status ${x:-src}",
        "git status ${#x} ${x%%.*} ${a[0]} ${x:1:2}",
        "git status $((1 + 2))",
    ] {
        let subjects = env.tool.permission_subjects(&json!({ "command": command }));
        let class = rules
            .classify_kind("shell", SubjectKind::Command, &subjects)
            .map(|(c, _)| c);
        assert_eq!(class, Some(RuleClass::Allow), "`{command}`: {subjects:?}");
    }
}
