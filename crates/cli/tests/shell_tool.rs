//! The `shell` tool through `dsh run`: the example transcript (build, test, refused writes, a
//! spilled output read back, a timeout) with `dsh check` passing on its log; `--read-only`
//! and `--shell-sandbox`; and test 10: SIGKILL of `dsh run` leaves no process of the command.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn shell_workspace(dir: &Path) -> std::path::PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for entry in std::fs::read_dir(examples().join("shell-workspace")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), ws.join(entry.file_name())).unwrap();
    }
    ws
}

#[test]
fn the_shell_example_runs_and_its_log_checks() {
    let dir = tempfile::tempdir().unwrap();
    let ws = shell_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let run = run(&examples().join("shell.jsonl"), &ws, &log, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.tool_content("call_01").contains("initialized"));
    assert!(
        run.tool_content("call_02").contains("built"),
        "{}",
        run.tool_content("call_02")
    );
    assert!(
        run.tool_content("call_03").contains("PASS"),
        "{}",
        run.tool_content("call_03")
    );
    let hook = run.tool_content("call_04");
    assert!(
        hook.contains("Read-only file system") && hook.contains("sandbox"),
        "{hook}"
    );
    let outside = run.tool_content("call_05");
    // The read-only world (issue 28, break 4) refuses it before Landlock does.
    assert!(
        outside.contains("Read-only file system") && outside.contains("sandbox"),
        "{outside}"
    );
    assert!(!dir.path().join("outside.txt").exists());
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    let long = run.tool_content("call_06");
    assert!(
        long.contains("bytes omitted") && long.contains(".dsh/spill/call_06.stdout.txt"),
        "{long}"
    );
    assert!(
        run.tool_content("call_07").contains("29999"),
        "{}",
        run.tool_content("call_07")
    );
    assert!(
        run.tool_content("call_08").contains("denied"),
        "{}",
        run.tool_content("call_08")
    );
    let spilled = std::fs::read_to_string(ws.join(".dsh/spill/call_06.stdout.txt")).unwrap();
    assert_eq!(spilled.lines().count(), 30000);
    let timeout = run.tool_content("call_09");
    assert!(
        timeout.contains("waiting") && timeout.contains("timed out"),
        "{timeout}"
    );
    let events = log_events(&log);
    let timed_out = events
        .iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == "call_09")
        .unwrap();
    assert_eq!(timed_out["data"]["error"]["code"], "TOOL_TIMEOUT");
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
}

#[test]
fn read_only_and_the_sandbox_flag_reach_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let ws = shell_workspace(dir.path());
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            r#"{"role": "assistant", "content": "", "tool_calls": [{"id": "w1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\": \"echo x > made.txt && echo wrote\"}"}}]}"#,
        ],
    );
    let r = run(&t, &ws, &dir.path().join("a.jsonl"), &["--read-only"]);
    assert!(
        r.tool_content("w1").contains("Read-only file system"),
        "{}",
        r.tool_content("w1")
    );
    assert!(!ws.join("made.txt").exists());
    let r = run(
        &t,
        &ws,
        &dir.path().join("b.jsonl"),
        &["--shell-sandbox", "read-only"],
    );
    assert!(!r.tool_content("w1").contains("wrote"));
    let r = run(&t, &ws, &dir.path().join("c.jsonl"), &[]);
    assert!(
        r.tool_content("w1").contains("wrote"),
        "{}",
        r.tool_content("w1")
    );
    assert!(ws.join("made.txt").exists());
}

#[test]
fn sigkill_of_dsh_run_leaves_no_process_of_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let ws = shell_workspace(dir.path());
    let marker = format!("dshkill{}", std::process::id());
    let command = format!(
        "(exec -a {marker}1 sleep 1000) & setsid bash -c 'exec -a {marker}2 sleep 1000' & \
         nohup bash -c 'exec -a {marker}3 sleep 1000' >/dev/null 2>&1 & exec -a {marker}4 sleep 1000"
    );
    let args = serde_json::json!({ "command": command }).to_string();
    let line = serde_json::json!({
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "k1", "type": "function", "function": {"name": "shell", "arguments": args}}]
    });
    let t = transcript(dir.path(), "k.jsonl", &[&line.to_string()]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("run")
        .arg(&t)
        .arg("--workspace")
        .arg(&ws)
        .arg("--log")
        .arg(dir.path().join("k.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while running(&marker) < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the command did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    while running(&marker) > 0 {
        // The issue's bound is 1 s; a loaded CI machine gets slack, far below the 1000 s the
        // processes would otherwise live.
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "{} processes outlived dsh",
            running(&marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("gone {:?} after SIGKILL", killed.elapsed());
}

/// Live processes whose command line starts with `marker`.
fn running(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next();
            !matches!(state, Some('Z') | Some('X') | None)
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c.starts_with(marker.as_bytes()))
                .unwrap_or(false)
        })
        .count()
}
