//! `dsh run` killed with SIGKILL at random moments, over a long transcript of writes and
//! edits under `--durability batch`. After each kill: the log recovers and passes `dsh check`,
//! no workspace file is half-written, no temporary file of a cut-short write is left, and every file change that happened has its `tool/call`
//! in the log (write-ahead).
//!
//! 10 kills run by default; `cargo test -p dsh-cli --test kill_recovery -- --ignored` runs 100.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const FILES: usize = 6;
const LINES: usize = 3_000;

fn content(step: usize) -> String {
    (0..LINES)
        .map(|j| format!("step {step} line {j}\n"))
        .collect()
}

fn call_line(id: &str, tool: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": tool, "arguments": args.to_string()}})
}

/// Steps alternate between a write of a whole file and a read followed by an edit.
fn long_transcript(dir: &Path) -> std::path::PathBuf {
    let mut lines = Vec::new();
    for step in 0..80 {
        let file = format!("f{}.txt", step % FILES);
        let calls = if step % 3 == 2 {
            vec![
                call_line(
                    &format!("r{step}"),
                    "read_file",
                    json!({"path": file, "limit": 1}),
                ),
                call_line(
                    &format!("e{step}"),
                    "edit_file",
                    json!({"path": file, "old_string": "line 1\n", "new_string": "line 1 edited\n"}),
                ),
            ]
        } else {
            vec![call_line(
                &format!("w{step}"),
                "write_file",
                json!({"path": file, "content": content(step)}),
            )]
        };
        lines.push(json!({"role": "assistant", "tool_calls": calls}).to_string());
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    transcript(dir, "long.jsonl", &refs)
}

/// The step whose write a file's content is, if the content is whole (edited or not).
fn whole_write(text: &str) -> Option<usize> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.len() != LINES {
        return None;
    }
    let step: usize = lines[0]
        .strip_prefix("step ")?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    let plain = content(step);
    let edited = plain.replacen(
        &format!("step {step} line 1\n"),
        &format!("step {step} line 1 edited\n"),
        1,
    );
    (text == plain || text == edited).then_some(step)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The size of the log of an uninterrupted run, so kill points can spread over all of it.
fn full_log_size() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let log = dir.path().join("session.jsonl");
    let t = long_transcript(dir.path());
    let out = run(&t, &ws, &log, &["--durability", "batch"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    std::fs::metadata(&log).unwrap().len()
}

/// Runs one trial; answers whether the kill landed before the run finished.
fn one_trial(seed: u64, trial: usize, full: u64) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let log = dir.path().join("session.jsonl");
    let t = long_transcript(dir.path());
    // Kill when the log has grown past a random point of a full run's size, so kills land
    // all along the run whatever the machine's speed; at the latest after 5 s.
    let threshold = splitmix(seed ^ splitmix(trial as u64)) % full.max(1);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "run".as_ref(),
            t.as_os_str(),
            "--workspace".as_ref(),
            ws.as_os_str(),
        ])
        .args([
            "--log".as_ref(),
            log.as_os_str(),
            "--durability".as_ref(),
            "batch".as_ref(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let size = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        if size >= threshold {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    let ctx = format!("seed {seed}, trial {trial}, killed at {threshold} log bytes");

    // Recover the log by continuing it with an empty transcript, then check it.
    let empty = transcript(dir.path(), "empty.jsonl", &[]);
    let resumed = run(&empty, &ws, &log, &[]);
    assert_eq!(resumed.code, 0, "{ctx}: {}", resumed.stderr);
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{ctx}: {}", checked.stderr);
    // Recovery removed the temporary files of the writes the kill cut short.
    let leftovers: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".dsh-") && name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{ctx}: left behind: {leftovers:?}");

    // Every change on disk was announced in the log before it happened.
    let events = log_events(&log);
    let calls: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool/call").collect();
    for n in 0..FILES {
        let path = ws.join(format!("f{n}.txt"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let step = whole_write(&text).unwrap_or_else(|| panic!("{ctx}: f{n}.txt is half-written"));
        let write_id = format!("w{step}");
        assert!(
            calls
                .iter()
                .any(|c| c["data"]["callId"] == write_id.as_str()),
            "{ctx}: f{n}.txt holds step {step}'s write but its tool/call is not in the log"
        );
        if text.contains("edited") {
            let announced = calls.iter().any(|c| {
                c["data"]["name"] == "edit_file"
                    && c["data"]["arguments"]["path"] == format!("f{n}.txt").as_str()
                    && c["seq"].as_u64()
                        > calls
                            .iter()
                            .find(|w| w["data"]["callId"] == write_id.as_str())
                            .and_then(|w| w["seq"].as_u64())
            });
            assert!(
                announced,
                "{ctx}: f{n}.txt was edited but no edit_file call follows its write"
            );
        }
    }
    let all_calls = 80 + 80 / 3;
    calls.len() < all_calls
}

fn trials(n: usize) {
    let seed = std::env::var("DSH_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("kill trials with DSH_KILL_SEED={seed}");
    let full = full_log_size();
    let interrupted = (0..n).filter(|&trial| one_trial(seed, trial, full)).count();
    eprintln!("{interrupted} of {n} kills landed mid-run (seed {seed})");
    // Otherwise the test proved nothing: the kills must land while dsh is working.
    assert!(
        interrupted * 2 >= n,
        "only {interrupted} of {n} kills landed mid-run (seed {seed})"
    );
}

#[test]
fn ten_random_kills_lose_nothing() {
    trials(10);
}

#[test]
#[ignore = "long: 100 kills"]
fn a_hundred_random_kills_lose_nothing() {
    trials(100);
}
