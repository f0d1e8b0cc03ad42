//! `dsh run` when the disk fills up under it: a real write failure from the OS, reached
//! through the real file backend. The file-size limit (`ulimit -f`, with `SIGXFSZ` ignored so
//! the write returns `EFBIG` instead of killing the process) stands in for a full disk.
//!
//! The run must stop with a clear error and exit code 3, not crash; every result it printed
//! is in the log; every workspace change has its `tool/call` in the log; the log recovers and
//! passes `dsh check`; and the next run continues it.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};

const STEPS: usize = 200;
const FILES: usize = 4;

fn content(step: usize) -> String {
    (0..30).map(|j| format!("step {step} line {j}\n")).collect()
}

fn write_step(step: usize) -> String {
    let args = json!({"path": format!("f{}.txt", step % FILES), "content": content(step)});
    json!({"role": "assistant", "tool_calls": [{
        "id": format!("w{step}"),
        "type": "function",
        "function": {"name": "write_file", "arguments": args.to_string()},
    }]})
    .to_string()
}

/// `dsh ARGS` with files limited to `blocks` 512-byte blocks.
fn dsh_on_a_small_disk(blocks: u32, args: &[&std::ffi::OsStr]) -> Run {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            r#"trap "" XFSZ; ulimit -f {blocks}; exec "$0" "$@""#
        ))
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .stdin(Stdio::null())
        .env_remove("RUST_LOG");
    finish(cmd.output().unwrap())
}

fn call_ids_in(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| e["data"]["callId"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_full_disk_stops_the_run_cleanly_and_the_log_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let log = dir.path().join("log.jsonl");
    let lines: Vec<String> = (0..STEPS).map(write_step).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let long = transcript(dir.path(), "t.jsonl", &refs);

    let filled = dsh_on_a_small_disk(
        64,
        &[
            "run".as_ref(),
            long.as_os_str(),
            "--workspace".as_ref(),
            ws.as_os_str(),
            "--log".as_ref(),
            log.as_os_str(),
        ],
    );
    assert_eq!(filled.code, 3, "stderr: {}", filled.stderr);
    assert!(
        filled.stderr.contains("session log I/O failed") && filled.stderr.contains("writing step"),
        "the error says what failed: {}",
        filled.stderr
    );

    // What the model was shown is in the log, word for word.
    let before = log_events(&log);
    let printed: Vec<Value> = filled
        .messages()
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert!(
        !printed.is_empty() && printed.len() < STEPS,
        "some steps ran before the disk filled: {}",
        printed.len()
    );
    for message in &printed {
        let id = message["tool_call_id"].as_str().unwrap();
        let result = before
            .iter()
            .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == id)
            .unwrap_or_else(|| panic!("{id} was printed but has no tool/result in the log"));
        assert_eq!(result["data"]["message"][0]["text"], message["content"]);
    }

    // Every change on disk was recorded first.
    let calls = call_ids_in(&before);
    for f in 0..FILES {
        let Ok(text) = std::fs::read_to_string(ws.join(format!("f{f}.txt"))) else {
            continue;
        };
        let step = (0..STEPS)
            .find(|s| content(*s) == text)
            .unwrap_or_else(|| panic!("f{f}.txt is not any step's whole content"));
        assert!(
            calls.contains(&format!("w{step}")),
            "f{f}.txt holds step {step}'s write, whose tool/call is not in the log"
        );
    }

    // The log is either whole or needs only recovery; then it passes the checker.
    let checked = check(&log);
    assert!(checked.code == 0 || checked.code == 1, "{}", checked.stderr);
    if checked.code == 1 {
        assert!(
            checked.stderr.contains("needs recovery"),
            "{}",
            checked.stderr
        );
    }
    let recovered = dsh(&["recover".as_ref(), log.as_os_str()]);
    assert_eq!(recovered.code, 0, "{}", recovered.stderr);
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);

    // With room again, the next run continues the same log.
    // (A new process knows of no earlier read, so it reads the file before replacing it.)
    let read = json!({"role": "assistant", "tool_calls": [{
        "id": "r", "type": "function",
        "function": {"name": "read_file", "arguments": json!({"path": format!("f{}.txt", STEPS % FILES)}).to_string()},
    }]})
    .to_string();
    let more = transcript(dir.path(), "more.jsonl", &[&read, &write_step(STEPS)]);
    let next = run(&more, &ws, &log, &[]);
    assert_eq!(next.code, 0, "{}", next.stderr);
    assert_eq!(check(&log).code, 0);
    let after = log_events(&log);
    assert_eq!(
        after.last().unwrap()["data"]["callId"],
        format!("w{STEPS}"),
        "the new step is appended after the recovered ones"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(format!("f{}.txt", STEPS % FILES))).unwrap(),
        content(STEPS)
    );
}
