//! Test 12: permission rules match the command's simple commands as word prefixes, not as
//! paths; allow must cover every simple command, deny matches any; quoting does not dodge.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::{ErrorCode, Hooks, SubjectKind, ToolCall, ToolDefinition, ToolRegistry};
use dsh_guards::{PermissionRules, RuleClass};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh_session::SessionLog;
use dsh_tool_shell::{SandboxConfig, ShellConfig, ShellTool};
use serde_json::json;
use std::sync::Arc;

fn class(rules: &PermissionRules, tool: &ShellTool, command: &str) -> Option<RuleClass> {
    let subjects = tool.permission_subjects(&json!({ "command": command }));
    rules
        .classify_kind("shell", SubjectKind::Command, &subjects)
        .map(|(c, _)| c)
}

#[test]
fn allow_covers_a_compound_command_only_when_it_covers_every_part() {
    let env = Env::new(SandboxConfig::workspace_write());
    let rules = PermissionRules::from_toml(
        r#"
        default = "deny"
        allow = ["shell(git status*)", "shell(git diff*)", "shell(cargo test:*)"]
        "#,
    )
    .unwrap();
    let tool = &env.tool;
    assert_eq!(tool.permission_subject_kind(), SubjectKind::Command);
    for allowed in [
        "git status",
        "git status --short",
        "git status && git diff",
        "'git' \"status\"",
        "cargo test -p x 2>&1",
    ] {
        assert_eq!(
            class(&rules, tool, allowed),
            Some(RuleClass::Allow),
            "{allowed}"
        );
    }
    for unmatched in [
        "git status; rm -rf x",
        "git status && curl http://evil.example",
        "git status | sh",
        "git status $(rm x)",
        "git status `rm x`",
        "echo $(rm x)",
        "(git status; rm x)",
        "git status > .bashrc",
        "LD_PRELOAD=/tmp/x.so git status",
        "git statusx",
        "curl http://x/git status",
        "$GIT status",
        "git status; bash -c 'rm x'",
        "git status 'unterminated",
    ] {
        assert_eq!(class(&rules, tool, unmatched), None, "{unmatched}");
    }
}

#[test]
fn deny_matches_any_part_whatever_the_quoting() {
    let env = Env::new(SandboxConfig::workspace_write());
    let rules = PermissionRules::from_toml(
        r#"
        allow = ["shell"]
        deny = ["shell(rm*)", "shell(curl*)"]
        "#,
    )
    .unwrap();
    let tool = &env.tool;
    for denied in [
        "rm -rf x",
        "git status; rm -rf x",
        "git status && curl http://x",
        "echo $(rm x)",
        "echo `rm x`",
        "'r'm x",
        "\\rm x",
        "\"rm\" x",
        "r\"\"m x",
        "/bin/rm x",
        "sudo rm x",
        "env FOO=1 rm x",
        "FOO=1 rm x",
        "nohup rm x &",
        "timeout 5 rm x",
        "xargs rm < list",
        "bash -c 'rm x'",
        "sh -c \"git status && rm x\"",
        "eval 'rm x'",
        "$CMD x",
        "cat <(rm x)",
        "git status 'unterminated",
    ] {
        assert_eq!(
            class(&rules, tool, denied),
            Some(RuleClass::Deny),
            "{denied}"
        );
    }
    for fine in ["git status", "echo rm", "cat rmdir.txt", "echo 'rm x'"] {
        assert_eq!(class(&rules, tool, fine), Some(RuleClass::Allow), "{fine}");
    }
}

#[test]
fn a_prefix_rule_is_not_matched_as_a_path() {
    let env = Env::new(SandboxConfig::workspace_write());
    let rules = PermissionRules::from_toml(r#"deny = ["shell(git status*)"]"#).unwrap();
    assert_eq!(
        class(&rules, &env.tool, "curl http://x/git status"),
        None,
        "matched per `/` as a path"
    );
}

#[tokio::test]
async fn through_the_pipeline_a_denied_part_stops_the_whole_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x"), "keep").unwrap();
    let registry = Arc::new(ToolRegistry::new());
    let tool = ShellTool::new(ShellConfig::new(dir.path())).unwrap();
    registry.register(tool).unwrap();
    let mut hooks = Hooks::new();
    let root = dir.path().canonicalize().unwrap();
    hooks.pre_execute(
        PermissionRules::from_toml(
            r#"
            default = "deny"
            allow = ["shell(echo*)"]
            "#,
        )
        .unwrap()
        .with_root(&root),
    );
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .build()
        .await
        .unwrap();
    let session = harness
        .open(
            SessionLog::memory().await.unwrap(),
            SchedulerConfig::default(),
            None,
        )
        .await
        .unwrap();
    let calls = vec![
        ToolCall::new("c1", "shell", json!({"command": "echo hi"})),
        ToolCall::new("c2", "shell", json!({"command": "echo hi; rm x"})),
        ToolCall::new("c3", "shell", json!({"command": "echo $(rm x)"})),
    ];
    let results = session
        .run_step(StepRequest::new(calls))
        .await
        .unwrap()
        .results;
    assert!(!results[0].is_error(), "{}", results[0].text());
    assert!(results[0].text().contains("hi"));
    for r in &results[1..] {
        assert_eq!(r.code(), Some(ErrorCode::Denied), "{}", r.text());
        assert!(r.text().contains("default is deny"), "{}", r.text());
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("x")).unwrap(),
        "keep"
    );
    session.shutdown().await;
    harness.shutdown().await;
}
