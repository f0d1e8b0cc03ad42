//! Issue 31: the next call's cgroups are made, and joined by a standby process, while a call
//! runs (a cgroup join waits for an RCU grace period); the next call's processes are forked
//! from the standby. Each call is still in cgroups of its own, made for it alone, and nothing
//! of the standby outlives the tool: no process, no cgroup. (CI runs as root, where dsh makes
//! a cgroup per call.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

/// The tests look for what this process left behind: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The call's own cgroups (`dsh-shell-…`) for `memory` and `pids`, from `/proc/self/cgroup`
/// as the command read it.
fn call_cgroups(v: &serde_json::Value) -> Vec<String> {
    let mut found: Vec<String> = stdout(v)
        .lines()
        .filter(|l| {
            let controllers = l.split(':').nth(1).unwrap_or("");
            controllers.split(',').any(|c| c == "memory" || c == "pids")
                || (controllers.is_empty() && l.starts_with("0::"))
        })
        .filter_map(|l| l.rsplit('/').next())
        .filter(|name| name.starts_with("dsh-shell-"))
        .map(String::from)
        .collect();
    found.sort();
    found
}

/// Every `dsh-shell-PID-*` cgroup folder of this process under `/sys/fs/cgroup`.
fn cgroups_left() -> Vec<String> {
    let prefix = format!("dsh-shell-{}-", std::process::id());
    let mut left = Vec::new();
    let mut stack = vec![std::path::PathBuf::from("/sys/fs/cgroup")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                left.push(entry.path().display().to_string());
            } else if dir.components().count() < 8 {
                stack.push(entry.path());
            }
        }
    }
    left
}

#[tokio::test]
async fn each_call_has_cgroups_of_its_own_and_the_standby_goes_with_the_tool() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = Env::new(SandboxConfig::workspace_write());
    let mut seen: Vec<Vec<String>> = Vec::new();
    for _ in 0..4 {
        let v = env.ok("cat /proc/self/cgroup").await;
        assert_eq!(code(&v), 0, "{v}");
        assert_eq!(
            v["meta"]["limits"]["processes"]["heldBy"]
                .as_str()
                .unwrap_or("")
                .split(' ')
                .next(),
            Some("cgroup"),
            "no cgroup held the call's processes (CI runs as root): {v}"
        );
        let cgroups = call_cgroups(&v);
        assert!(
            !cgroups.is_empty(),
            "the command is in no cgroup of its own: {}",
            stdout(&v)
        );
        assert!(
            !seen.contains(&cgroups),
            "two calls shared the cgroups {cgroups:?}"
        );
        seen.push(cgroups);
    }
    drop(env);
    let left = cgroups_left();
    assert!(left.is_empty(), "cgroups outlived the tool: {left:?}");
    let helpers = helpers_left();
    assert!(
        helpers.is_empty(),
        "the tool's helper processes (keepers, standbys) outlived it: {helpers:?}"
    );
}

/// This process's children that are the shell tool's helpers (a keeper or a standby, named
/// after the spawner thread that made them), running or not yet reaped.
fn helpers_left() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("", |(_, n)| n);
        let ppid = rest.split_whitespace().nth(1).unwrap_or("");
        if ppid == me && name.starts_with("dsh-shell") {
            left.push(stat);
        }
    }
    left
}

/// Calls made back to back, then the tool dropped at once: the work left for after each call
/// (reaping its keeper, removing its cgroups) and the standbys made ahead all go with the tool.
#[tokio::test]
async fn back_to_back_calls_leave_nothing_once_the_tool_goes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = Env::new(SandboxConfig::workspace_write());
    for _ in 0..5 {
        let v = env.ok("true").await;
        assert_eq!(code(&v), 0, "{v}");
    }
    drop(env);
    let left = cgroups_left();
    assert!(left.is_empty(), "cgroups outlived the tool: {left:?}");
    let helpers = helpers_left();
    assert!(helpers.is_empty(), "helpers outlived the tool: {helpers:?}");
}
