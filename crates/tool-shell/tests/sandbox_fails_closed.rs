//! Test 11: where the sandbox cannot be set up (here: a kernel without Landlock, simulated),
//! the call is `DENIED` naming what is missing, and the command does not run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_core::ErrorCode;
use dsh_tool_shell::SandboxConfig;

#[tokio::test]
async fn a_missing_landlock_denies_the_call() {
    for sandbox in [
        SandboxConfig::workspace_write().pretend_landlock_is_missing(),
        SandboxConfig::read_only().pretend_landlock_is_missing(),
    ] {
        let env = Env::new(sandbox);
        let failure = env.run("touch ran.txt").await.unwrap_err();
        assert_eq!(failure.code, ErrorCode::Denied);
        assert!(failure.message.contains("Landlock"), "{}", failure.message);
        assert!(!env.path("ran.txt").exists(), "the command ran unsandboxed");
    }
    // `full` asks for no sandbox, so nothing is missing.
    let env = Env::new(SandboxConfig::full().pretend_landlock_is_missing());
    let v = env.ok("touch ran.txt").await;
    assert_eq!(code(&v), 0);
}
