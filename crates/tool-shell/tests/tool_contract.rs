//! The shell tool's contract beyond the numbered tests: it is a barrier whatever the command,
//! its deadline defaults to 120 s and is capped at 600 s, `workdir` stays inside the workspace,
//! and the seccomp filter refuses `ptrace`, so a command cannot attach to another process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::{ErrorCode, ExecutionMode, ToolDefinition};
use dsh_tool_shell::SandboxConfig;
use serde_json::json;

#[test]
fn the_shell_is_a_barrier_whatever_the_command() {
    let env = Env::new(SandboxConfig::workspace_write());
    assert_eq!(env.tool.execution_mode(), ExecutionMode::Exclusive);
    for command in ["true", "ls", "cat README.md", "git status"] {
        assert!(
            !env.tool.is_concurrency_safe(&json!({ "command": command })),
            "`{command}` was offered to run beside other calls"
        );
    }
}

#[test]
fn the_deadline_defaults_to_120_s_and_is_capped_at_600_s() {
    let env = Env::new(SandboxConfig::workspace_write());
    let deadline = |input| env.tool.timeout_ms_for(&input);
    assert_eq!(deadline(json!({"command": "true"})), Some(120_000));
    assert_eq!(
        deadline(json!({"command": "true", "timeout_ms": 5_000})),
        Some(5_000)
    );
    assert_eq!(
        deadline(json!({"command": "true", "timeout_ms": 86_400_000u64})),
        Some(600_000)
    );
    assert!(env.tool.owns_deadline());
}

#[tokio::test]
async fn workdir_must_be_a_folder_inside_the_workspace() {
    let env = Env::new(SandboxConfig::workspace_write());
    std::fs::create_dir_all(env.path("sub/deeper")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), env.path("out")).unwrap();

    let inside = env
        .run_with(json!({"command": "pwd", "workdir": "sub/deeper"}))
        .await
        .unwrap();
    assert_eq!(
        stdout(&inside).trim(),
        env.path("sub/deeper").to_str().unwrap()
    );

    let absolute = env.path("sub").to_str().unwrap().to_string();
    let inside = env
        .run_with(json!({"command": "pwd", "workdir": absolute}))
        .await
        .unwrap();
    assert_eq!(stdout(&inside).trim(), env.path("sub").to_str().unwrap());

    for workdir in [
        "..",
        "../..",
        "/tmp",
        "out",
        "sub/../../",
        outside.path().to_str().unwrap(),
    ] {
        let err = env
            .run_with(json!({"command": "touch escaped", "workdir": workdir}))
            .await
            .expect_err(workdir);
        assert_eq!(err.code, ErrorCode::Denied, "{workdir}: {err}");
    }
    assert!(!outside.path().join("escaped").exists());
    let err = env
        .run_with(json!({"command": "true", "workdir": "README.md"}))
        .await
        .expect_err("a file is not a workdir");
    assert_eq!(err.code, ErrorCode::ToolInputError);
    let err = env
        .run_with(json!({"command": "true", "workdir": "no/such"}))
        .await
        .expect_err("a missing folder is not a workdir");
    assert_eq!(err.code, ErrorCode::ToolInputError);
}

/// `ptrace(PTRACE_TRACEME)` needs no permission at all, so only the seccomp filter can refuse it.
const TRACEME: &str = "python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); \
    r = c.ptrace(0, 0, 0, 0); print(\"ptrace\", r, ctypes.get_errno())'";

#[tokio::test]
async fn seccomp_refuses_ptrace_inside_the_sandbox() {
    let sandboxed = Env::new(SandboxConfig::workspace_write());
    let v = sandboxed.ok(TRACEME).await;
    assert_eq!(code(&v), 0, "{v}");
    assert_eq!(stdout(&v).trim(), "ptrace -1 1", "{v}");

    // The control: without the sandbox the same call succeeds, so the refusal above is the
    // filter's doing.
    let unsandboxed = Env::new(SandboxConfig::full());
    let v = unsandboxed.ok(TRACEME).await;
    assert_eq!(stdout(&v).trim(), "ptrace 0 0", "{v}");
}
