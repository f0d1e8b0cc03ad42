//! Issue 28, break 10, through `dsh run`: `--shell-limits` bounds each call, and the process
//! limit holds for an ordinary user too, where no cgroup can be made (CI runs as root: the
//! test then also runs dsh as `nobody`, whose limit is `RLIMIT_NPROC` in the call's user
//! namespace). The log's result names the limit hit and the mechanism that held it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::path::Path;

const FORK_BOMB: &str = "perl -e 'for (1..200) { my $p = fork; die \"fork: $!\\n\" unless defined $p; if (!$p) { sleep 5; exit } } print \"all started\\n\"'";

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

/// Runs the fork bomb through `dsh run --shell-limits processes=40` as `uid`; answers the
/// text the model read and the result's meta from the log.
fn bounded_run(uid: Option<u32>) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let call = json!({"id": "c0", "type": "function",
        "function": {"name": "shell", "arguments": json!({"command": FORK_BOMB}).to_string()}});
    let line = json!({"role": "assistant", "content": "", "tool_calls": [call]}).to_string();
    let t = transcript(dir.path(), "t.jsonl", &[&line]);
    let log = dir.path().join("s.jsonl");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "allow = [\"shell\"]\n").unwrap();
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
        "--shell-limits".as_ref(),
        "processes=40,memory=1G".as_ref(),
    ];
    let r = dsh_with(&args, |cmd| {
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
    });
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = r.tool_content("c0");
    let log_text = std::fs::read_to_string(&log).unwrap();
    let meta = log_text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|e| {
            let text = e.to_string();
            (text.contains("limitHit") || text.contains("limitMayHaveHit"))
                .then(|| find_key(&e, "limits").cloned())
                .flatten()
                .map(|limits| json!({"limits": limits, "event": e}))
        })
        .unwrap_or(Value::Null);
    (text, meta)
}

fn find_key<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(map) => map
            .get(key)
            .or_else(|| map.values().find_map(|v| find_key(v, key))),
        Value::Array(items) => items.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}

fn assert_bounded(text: &str, meta: &Value, mechanism: &str, who: &str) {
    assert!(
        !text.contains("all started"),
        "{who}: 200 processes started: {text}"
    );
    assert!(
        text.contains("limit on processes"),
        "{who}: the model reads which limit: {text}"
    );
    let held = meta["limits"]["processes"]["heldBy"].as_str().unwrap_or("");
    assert!(held.contains(mechanism), "{who}: held by {held}: {meta}");
    assert_eq!(meta["limits"]["processes"]["max"], 40, "{who}: {meta}");
}

#[test]
fn the_process_limit_holds_as_root_and_as_an_ordinary_user() {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    let (text, meta) = bounded_run(None);
    if uid == 0 {
        // As root dsh makes a cgroup per call (v1 or v2, whichever holds `pids` here).
        assert_bounded(&text, &meta, "cgroup", "root");
        let (text, meta) = bounded_run(Some(65534));
        assert_bounded(&text, &meta, "RLIMIT_NPROC", "nobody");
    } else {
        assert_bounded(&text, &meta, "", "this user");
    }
}
