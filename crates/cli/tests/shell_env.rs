//! Issue 28, break 6, end to end: `dsh run` gives `shell` commands the core environment and
//! the variables named by `--shell-env` and the policy's `[shell] env`, nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::json;

const PROBE: &str = "for n in PGPASSWORD DATABASE_URL SSH_AUTH_SOCK VIRTUAL_ENV JAVA_HOME CARGO_HOME; do echo \"$n=${!n-unset}\"; done";

fn run_with_env(extra: &[&str]) -> (Run, String) {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let call = json!({"id": "e1", "type": "function",
                      "function": {"name": "shell", "arguments": json!({ "command": PROBE }).to_string()}});
    let line = json!({"role": "assistant", "content": "", "tool_calls": [call]}).to_string();
    let t = transcript(dir.path(), "t.jsonl", &[&line]);
    let log = dir.path().join("s.jsonl");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "allow = [\"shell\"]\n\n[shell]\nenv = [\"JAVA_HOME\"]\n",
    )
    .unwrap();
    let mut args: Vec<std::ffi::OsString> = vec![
        "run".into(),
        t.into(),
        "--workspace".into(),
        ws.into(),
        "--log".into(),
        log.clone().into(),
        "--policy".into(),
        policy.into(),
    ];
    args.extend(extra.iter().map(Into::into));
    let r = dsh_with(&args, |cmd| {
        cmd.env("PGPASSWORD", "hunter2")
            .env("DATABASE_URL", "postgres://app:hunter2@db/app")
            .env("SSH_AUTH_SOCK", "/run/agent.sock")
            .env("VIRTUAL_ENV", "/opt/venv")
            .env("JAVA_HOME", "/opt/jdk")
            .env("CARGO_HOME", "/opt/cargo");
    });
    let content = r.tool_content("e1");
    (r, content)
}

#[test]
fn the_flag_and_the_policy_table_name_what_commands_see() {
    let (r, content) = run_with_env(&["--shell-env", "VIRTUAL_ENV", "--shell-env", "CARGO_*"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for line in [
        "PGPASSWORD=unset",
        "DATABASE_URL=unset",
        "SSH_AUTH_SOCK=unset",
        "VIRTUAL_ENV=/opt/venv",
        "JAVA_HOME=/opt/jdk",
        "CARGO_HOME=/opt/cargo",
    ] {
        assert!(content.contains(line), "{line} missing in {content}");
    }
}

#[test]
fn unnamed_variables_stay_out() {
    let (r, content) = run_with_env(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(content.contains("VIRTUAL_ENV=unset"), "{content}");
    assert!(content.contains("CARGO_HOME=unset"), "{content}");
    assert!(content.contains("JAVA_HOME=/opt/jdk"), "{content}");
}

#[test]
fn a_name_that_is_no_variable_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let t = transcript(dir.path(), "t.jsonl", &[]);
    let log = dir.path().join("s.jsonl");
    let r = run(&t, &ws, &log, &["--shell-env", "*"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("not a variable name"), "{}", r.stderr);
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[shell]\nenv = [\"A B\"]\n").unwrap();
    let r = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("not a variable name"), "{}", r.stderr);
}
