//! `--print-plan` on `dsh run` and `dsh serve`: what a command line means (tools, rules,
//! hooks, MCP servers, sandbox, log, dsh's own files) on stderr, and nothing started: no log
//! opened, no server started, no tool run, the workspace untouched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::dsh;
use std::path::Path;

fn setup(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/key"), "k\n").unwrap();
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "default = \"ask\"\nallow = [\"read_file\", \"mcp__files__*\"]\ndeny = [\"read_file(secrets/**)\", \"mcp__web__*\"]\n",
    )
    .unwrap();
    let hooks = dir.join("hooks.json");
    std::fs::write(
        &hooks,
        r#"{"hooks": {"PreToolUse": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "exit 0", "timeout": 5}]}]}}"#,
    )
    .unwrap();
    (ws, policy, hooks)
}

#[test]
fn run_prints_what_its_options_mean_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, policy, hooks) = setup(dir.path());
    let log = dir.path().join("s.jsonl");
    // The transcript is never read: the plan does not run it.
    let missing = dir.path().join("no-such-transcript.jsonl");
    let r = dsh(&[
        "run".as_ref(),
        missing.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
        "--policy".as_ref(),
        policy.as_os_str(),
        "--hooks".as_ref(),
        hooks.as_os_str(),
        "--shell-network".as_ref(),
        "--timeout-ms".as_ref(),
        "5000".as_ref(),
        "--approve".as_ref(),
        "deny".as_ref(),
        "--print-plan".as_ref(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "");
    let plan = &r.stderr;
    let canonical = ws.canonicalize().unwrap();
    for expected in [
        "dsh run: the plan (nothing was started)".to_string(),
        format!("workspace  {}", canonical.display()),
        "unmatched calls: ask".into(),
        "deny   read_file(secrets/**)".into(),
        "allow  read_file".into(),
        "PreToolUse \"write_file\": exit 0 (5 s)".into(),
        "workspace-write (commands write only the workspace), network on".into(),
        format!("hidden    {}", canonical.join("secrets").display()),
        "every `ask` is denied (--approve deny)".into(),
        "every tool at most 5000 ms (--timeout-ms)".into(),
        format!("{}", log.display()),
    ] {
        assert!(plan.contains(&expected), "missing {expected:?} in\n{plan}");
    }
    assert!(!log.exists(), "no log is opened");
    let entries: Vec<_> = std::fs::read_dir(&ws).unwrap().collect();
    assert_eq!(entries.len(), 1, "the workspace is untouched");
}

#[test]
fn serve_prints_its_plan_without_starting_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, policy, _) = setup(dir.path());
    let mcp = dir.path().join("mcp.json");
    // Neither command exists: starting either server would fail.
    std::fs::write(
        &mcp,
        r#"{"mcpServers": {"files": {"command": "/nonexistent/files-server"}, "web": {"command": "/nonexistent/web-server"}}}"#,
    )
    .unwrap();
    let logs = dir.path().join("logs");
    let r = dsh(&[
        "serve".as_ref(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        logs.as_os_str(),
        "--http".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--policy".as_ref(),
        policy.as_os_str(),
        "--mcp".as_ref(),
        mcp.as_os_str(),
        "--profile".as_ref(),
        "claude-code".as_ref(),
        "--read-only".as_ref(),
        "--print-plan".as_ref(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let plan = &r.stderr;
    for expected in [
        "dsh serve --http: the plan (nothing was started)",
        "one log per client session in",
        "Claude Code's: Read, Write, Edit",
        "--read-only: every change is denied",
        "files (not started, the policy denies all their tools: web)",
        "read-only (commands write nothing)",
        "`ask`s are put to the MCP client (elicitation)",
    ] {
        assert!(plan.contains(expected), "missing {expected:?} in\n{plan}");
    }
    assert!(!plan.contains("serving"), "nothing served:\n{plan}");
    assert!(!logs.exists(), "the log folder is not made");
}

#[test]
fn a_plan_that_cannot_be_made_fails_as_the_run_would() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, _, _) = setup(dir.path());
    let policy = dir.path().join("bad.toml");
    std::fs::write(&policy, "deny = [\"write_file(\"]\n").unwrap();
    let r = dsh(&[
        "serve".as_ref(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        dir.path().join("s.jsonl").as_os_str(),
        "--policy".as_ref(),
        policy.as_os_str(),
        "--print-plan".as_ref(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("policy file"), "{}", r.stderr);
}
