//! Issue 28, break 11: nothing of a call remains after it, as root and as an ordinary user
//! (CI runs as root: the test then also runs dsh as `nobody`). A command that locks data
//! away in its `$TMPDIR` (a read-only or mode-000 folder, a deep tree) leaves nothing either.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::Path;

const LOCK_AWAY: &str = "cd \"$TMPDIR\" && mkdir -p ro/deep locked && echo data > ro/deep/f && echo data > locked/f \
    && chmod 555 ro/deep ro && chmod 000 locked \
    && (for i in $(seq 60); do mkdir aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa && cd aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa || exit 1; done; echo x > f; chmod 500 .) \
    && echo locked-away";

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

/// Runs two shell calls through `dsh run` as `uid` (None: as the test runs) with `TMPDIR`
/// set to a fresh folder; returns what is left in that folder.
fn leftovers(uid: Option<u32>) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    // A hidden path: its stand-in is a mode-000 file in the call's private folder.
    std::fs::create_dir_all(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/key"), "k").unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "allow = [\"shell\"]\ndeny = [\"read_file(secrets/**)\"]\n",
    )
    .unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let calls: Vec<_> = [LOCK_AWAY, "ls secrets; echo plain"]
        .iter()
        .enumerate()
        .map(|(i, command)| {
            json!({"id": format!("c{i}"), "type": "function",
                   "function": {"name": "shell", "arguments": json!({"command": command}).to_string()}})
        })
        .collect();
    let line = json!({"role": "assistant", "content": "", "tool_calls": calls}).to_string();
    let t = transcript(dir.path(), "t.jsonl", &[&line]);
    let log = dir.path().join("s.jsonl");
    if let Some(uid) = uid {
        chown_tree(dir.path(), uid);
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
        cmd.env("TMPDIR", &tmp);
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
    });
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.tool_content("c0").contains("locked-away"),
        "{}",
        r.tool_content("c0")
    );
    assert!(
        r.tool_content("c1").contains("plain"),
        "{}",
        r.tool_content("c1")
    );
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // Let the tempdir go even where a failing run left locked folders.
    let _ = std::process::Command::new("chmod")
        .args(["-R", "u+rwx"])
        .arg(dir.path())
        .status();
    left
}

#[test]
fn a_call_leaves_nothing_as_root_and_as_an_ordinary_user() {
    assert_eq!(leftovers(None), Vec::<String>::new(), "as the test's user");
    // As root (CI), run dsh again as `nobody` (65534).
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    if uid == 0 {
        assert_eq!(leftovers(Some(65534)), Vec::<String>::new(), "as nobody");
    }
}
