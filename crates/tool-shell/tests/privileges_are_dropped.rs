//! Test 5: `no_new_privs` is set, no capability is left, and a process outside the sandbox
//! cannot be signalled.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

#[tokio::test]
async fn no_new_privs_is_set_and_capabilities_are_gone() {
    let env = Env::new(SandboxConfig::workspace_write());
    let v = env
        .ok("grep -E '^(NoNewPrivs|CapEff|CapBnd)' /proc/self/status")
        .await;
    let out = stdout(&v);
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
}

#[tokio::test]
async fn a_process_outside_the_sandbox_cannot_be_killed() {
    let env = Env::new(SandboxConfig::workspace_write());
    let mut outside = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = outside.id();
    let v = env.ok(&format!("kill -9 {pid}; echo rc=$?")).await;
    assert_eq!(stdout(&v), "rc=1\n", "{v}");
    assert!(
        outside.try_wait().unwrap().is_none(),
        "the outside process died"
    );
    // dsh itself is out of reach too.
    let v = env
        .ok(&format!("kill -9 {}; echo rc=$?", std::process::id()))
        .await;
    assert_eq!(stdout(&v), "rc=1\n", "{v}");
    outside.kill().unwrap();
    outside.wait().unwrap();
}
