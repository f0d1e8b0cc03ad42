//! The agent frameworks people use drive `dsh serve` unchanged: fastmcp's `Client`, LangChain's
//! `langchain-mcp-adapters`, the OpenAI Agents SDK and pydantic-ai, each with its own fake or
//! scripted model (no LLM), over stdio and over streamable HTTP with a bearer token. Each
//! program (`tests/frameworks/*.py`) lists and converts every tool, runs an agent turn that
//! reads, edits, runs `shell` and meets a denial, sees a hook's context through the
//! framework's own path, and makes a strict-mode call with null or empty optionals; then the
//! logs pass `dsh check`. The frameworks are installed by `scripts/frameworks.sh` (pinned);
//! one that cannot be installed fails its suite, never skips it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::check;
use common::serve::{HttpServe, repo};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const TOKEN: &str = "framework-suite-token";

/// Each framework's interpreter, from `scripts/frameworks.sh` (installed once per binary).
fn python(framework: &str) -> String {
    static INSTALLED: OnceLock<String> = OnceLock::new();
    let text = INSTALLED.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo().join("scripts/frameworks.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("bash runs scripts/frameworks.sh");
        assert!(
            out.status.success(),
            "scripts/frameworks.sh could not install the frameworks (see above)"
        );
        String::from_utf8(out.stdout).unwrap()
    });
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{framework}=")))
        .unwrap_or_else(|| panic!("scripts/frameworks.sh printed no {framework}: {text}"))
        .to_string()
}

/// A workspace, a file outside it, and a hooks file whose PostToolUse hook gives every
/// `read_file` a context for the model.
fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("b.txt"), "two\n").unwrap();
    std::fs::write(dir.join("outside.txt"), "secret\n").unwrap();
    let output = serde_json::json!({"hookSpecificOutput": {
        "hookEventName": "PostToolUse", "additionalContext": "HOOK-CONTEXT-7f3a"}})
    .to_string();
    let hooks = serde_json::json!({"hooks": {"PostToolUse": [{"matcher": "read_file",
        "hooks": [{"type": "command", "command": format!("printf '%s' '{output}'")}]}]}});
    let file = dir.join("hooks.json");
    std::fs::write(&file, hooks.to_string()).unwrap();
    (ws, file)
}

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/frameworks")
        .join(name)
}

/// Runs `script` with the framework's interpreter and `env`; it must print `OK` and exit 0.
fn drive(framework: &str, script: &str, env: &[(&str, &Path)]) {
    let mut command = Command::new(python(framework));
    command
        .arg(program(script))
        .current_dir(program(""))
        .env("OPENAI_API_KEY", "unused-no-request-is-made")
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{framework} ({script}) failed: {stdout}"
    );
}

fn assert_checks(log: &Path) {
    let checked = check(log);
    assert_eq!(checked.code, 0, "{}: {}", log.display(), checked.stderr);
}

fn over_stdio(framework: &str, script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (ws, hooks) = setup(dir.path());
    let log = dir.path().join("session.jsonl");
    let dsh = PathBuf::from(env!("CARGO_BIN_EXE_dsh"));
    drive(
        framework,
        script,
        &[
            ("DSH_BIN", &dsh),
            ("DSH_WORKSPACE", &ws),
            ("DSH_LOG", &log),
            ("DSH_HOOKS", &hooks),
        ],
    );
    assert_checks(&log);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("outside.txt")).unwrap(),
        "secret\n"
    );
}

fn over_http(framework: &str, script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (ws, hooks) = setup(dir.path());
    let logs = dir.path().join("sessions");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
        .args(["serve", "--http", "127.0.0.1:0", "--shell-sandbox", "full"])
        .arg("--workspace")
        .arg(&ws)
        .arg("--log")
        .arg(&logs)
        .arg("--token-file")
        .arg(&tokens)
        .arg("--hooks")
        .arg(&hooks);
    let mut served = HttpServe::spawn(command);
    let url = PathBuf::from(served.url());
    drive(
        framework,
        script,
        &[("DSH_URL", &url), ("DSH_TOKEN", Path::new(TOKEN))],
    );
    served.terminate();
    let mut checked = 0;
    for entry in std::fs::read_dir(&logs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            assert_checks(&path);
            checked += 1;
        }
    }
    assert!(checked >= 1, "no session log in {}", logs.display());
}

#[test]
fn fastmcp_client_over_stdio() {
    over_stdio("fastmcp", "fastmcp_client.py");
}

#[test]
fn fastmcp_client_over_http() {
    over_http("fastmcp", "fastmcp_client.py");
}

#[test]
fn langchain_over_stdio() {
    over_stdio("langchain", "langchain_agent.py");
}

#[test]
fn langchain_over_http() {
    over_http("langchain", "langchain_agent.py");
}

#[test]
fn openai_agents_over_stdio() {
    over_stdio("openai-agents", "openai_agents_agent.py");
}

#[test]
fn openai_agents_over_http() {
    over_http("openai-agents", "openai_agents_agent.py");
}

#[test]
fn pydantic_ai_over_stdio() {
    over_stdio("pydantic-ai", "pydantic_ai_agent.py");
}

#[test]
fn pydantic_ai_over_http() {
    over_http("pydantic-ai", "pydantic_ai_agent.py");
}
