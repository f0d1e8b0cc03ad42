//! `HookSettings::script_paths`: every existing file the configured hook commands name, so
//! that a host can keep the tools from rewriting what its hooks run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_command_hooks::HookSettings;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn settings(pre: &[&str], post: &[&str]) -> HookSettings {
    let hooks = |commands: &[&str]| -> Value {
        json!([{"matcher": "*", "hooks": commands.iter()
            .map(|c| json!({"type": "command", "command": c})).collect::<Vec<_>>()}])
    };
    HookSettings::from_json(
        &json!({"hooks": {"PreToolUse": hooks(pre), "PostToolUse": hooks(post)}}).to_string(),
    )
    .unwrap()
}

fn file(path: &Path) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, "#!/bin/sh\nexit 0\n").unwrap();
    path.canonicalize().unwrap()
}

#[test]
fn every_file_a_hook_command_names_is_listed_canonical() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    let outside = dir.path().join("elsewhere");
    let audit = file(&root.join("audit.sh"));
    let check = file(&root.join(".claude/hooks/check.py"));
    let config = file(&root.join("hooks config/rules.json"));
    let lint = file(&root.join("tools/lint.sh"));
    let sub = file(&root.join("sub/run.sh"));
    let abs = file(&outside.join("global.sh"));
    let opt = file(&root.join("opt.toml"));
    let nested = file(&root.join("nested.sh"));
    std::fs::create_dir_all(root.join("a-directory")).unwrap();
    let s = settings(
        &[
            // A secret in the environment, a relative program.
            "AUDIT_TOKEN=sk-live-secret ./audit.sh --mode strict",
            // An interpreter with a script under $CLAUDE_PROJECT_DIR, a quoted path with a space.
            r#"python3 "$CLAUDE_PROJECT_DIR/.claude/hooks/check.py" --config 'hooks config/rules.json'"#,
            // Braces, `--opt=file`, a directory and a missing file (neither listed).
            "${CLAUDE_PROJECT_DIR}/tools/lint.sh --rules=opt.toml a-directory missing.sh",
        ],
        &[
            // An absolute path outside the workspace; a script run after `cd`.
            &format!("{} && (cd sub && ./run.sh)", abs.display()),
            // A command inside a quoted `sh -c` argument.
            "sh -c 'true && ./nested.sh --fast'",
        ],
    );
    let mut paths = s.script_paths(&root);
    paths.sort();
    let mut expected = vec![audit, check, config, lint, sub, abs, opt, nested];
    expected.sort();
    assert_eq!(paths, expected);
    assert!(paths.iter().all(|p| p.is_absolute()));
}

#[test]
fn a_script_behind_a_symbolic_link_is_listed_as_the_link_and_as_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let target = file(&root.join("real/guard.sh"));
    std::os::unix::fs::symlink(&target, root.join("guard.sh")).unwrap();
    let s = settings(&["./guard.sh"], &[]);
    let mut paths = s.script_paths(&root);
    paths.sort();
    let mut expected = vec![root.join("guard.sh"), target];
    expected.sort();
    assert_eq!(paths, expected);
}

#[test]
fn no_hooks_no_paths() {
    let dir = tempfile::tempdir().unwrap();
    assert!(settings(&[], &[]).script_paths(dir.path()).is_empty());
    assert!(
        settings(&["echo hi", "true"], &["exit 0"])
            .script_paths(dir.path())
            .is_empty()
    );
}
