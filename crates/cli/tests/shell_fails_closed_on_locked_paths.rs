//! Issue 28, break 1: where a protected or hidden path cannot be resolved (a command made
//! the folder holding it unreadable), the next call is `DENIED` naming the path, never run
//! in a sandbox with that mount left out. The attack needs an ordinary user (root resolves
//! through mode 000): as root, the test runs dsh as `nobody`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::Path;

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

#[test]
fn a_locked_folder_holding_a_protected_or_hidden_path_denies_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    // An earlier call's spill folder: dsh's own, read-only to commands (made only when a call
    // spills, so the test makes it).
    std::fs::create_dir_all(ws.join(".dsh/spill")).unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(ws.join("vault/secrets")).unwrap();
    std::fs::write(ws.join("vault/secrets/key"), "TOPSECRET-4711\n").unwrap();
    std::fs::create_dir_all(ws.join("build/gen")).unwrap();
    std::fs::write(ws.join("build/gen/a.rs"), "generated\n").unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "allow = [\"shell\"]\ndeny = [\"read_file(vault/secrets/**)\", \"write_file(build/gen/**)\"]\n",
    )
    .unwrap();
    let call = |id: &str, command: &str| {
        json!({"id": id, "type": "function",
               "function": {"name": "shell", "arguments": json!({"command": command}).to_string()}})
    };
    let lock = json!({"role": "assistant", "content": "", "tool_calls": [
        // `.git` itself is read-only (break 3); the folders holding the spill folder, a
        // hidden path and a read-only path are not.
        call("lock", "chmod 000 .git; chmod 000 .dsh vault build && echo locked"),
    ]})
    .to_string();
    let exploit = json!({"role": "assistant", "content": "", "tool_calls": [
        call("use", "chmod 755 .git .dsh vault build; cat vault/secrets/key; echo pwned > build/gen/a.rs; echo 'echo pwned' > .git/hooks/pre-commit; echo '[core] fsmonitor=x' >> .git/config; echo ran"),
    ]})
    .to_string();
    let t = transcript(dir.path(), "t.jsonl", &[&lock, &exploit]);
    let log = dir.path().join("s.jsonl");
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    if uid == 0 {
        chown_tree(dir.path(), 65534);
    }
    let args = [
        "run".as_ref(),
        t.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
        "--policy".as_ref(),
        policy.as_os_str(),
    ];
    let r = dsh_with(&args, |cmd| {
        if uid == 0 {
            cmd.uid(65534).gid(65534);
        }
    });
    let _ = std::process::Command::new("chmod")
        .args(["755"])
        .arg(ws.join(".git"))
        .arg(ws.join("vault"))
        .arg(ws.join(".dsh"))
        .arg(ws.join("build"))
        .status();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.tool_content("lock").contains("locked"),
        "{}",
        r.tool_content("lock")
    );
    let used = r.tool_content("use");
    assert!(used.contains("DENIED"), "{used}");
    assert!(
        used.contains(".dsh") || used.contains("vault") || used.contains("build"),
        "the denial names no path: {used}"
    );
    assert!(
        !used.contains("TOPSECRET"),
        "a hidden file was read: {used}"
    );
    assert!(!used.contains("ran"), "the command ran: {used}");
    assert!(
        !ws.join(".git/hooks/pre-commit").exists(),
        "a hook was planted"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
}
