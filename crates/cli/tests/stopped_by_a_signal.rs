//! SIGINT or SIGTERM stops `dsh run` the way the library shuts down: what runs is cancelled
//! and recorded, the log is closed clean (no recovery needed), later lines do not run, and
//! nothing the run started (hook processes) is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn openai_line(id: &str, tool: &str, args: serde_json::Value) -> String {
    json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": tool, "arguments": args.to_string()}}]})
    .to_string()
}

fn spawn_run(transcript: &Path, ws: &Path, log: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("run")
        .arg(transcript)
        .arg("--workspace")
        .arg(ws)
        .arg("--log")
        .arg(log)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap()
}

/// Waits until the log holds a `tool/call` for `id`.
fn wait_for_call(log: &Path, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().any(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .is_ok_and(|e| e["type"] == "tool/call" && e["data"]["callId"] == id)
        }) {
            return;
        }
        assert!(Instant::now() < deadline, "the call {id} never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn send(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the child, failing the test if it does not end in time.
fn finish_within(child: Child, limit: Duration) -> Run {
    let started = Instant::now();
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if started.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("dsh did not stop within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    finish(waiter.join().unwrap())
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[test]
fn sigterm_cancels_the_running_call_records_it_and_closes_the_log_clean() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(
        dir.path(),
        "busy.jsonl",
        &[
            &openai_line("busy", "run_code", json!({"code": "while (true) {}"})),
            &openai_line(
                "later",
                "write_file",
                json!({"path": "later.txt", "content": "x"}),
            ),
        ],
    );
    let child = spawn_run(&t, &ws, &log, &["--timeout-ms", "120000"]);
    wait_for_call(&log, "busy");
    send(&child, "-TERM");
    let out = finish_within(child, Duration::from_secs(20));
    assert_eq!(out.code, 143, "{}", out.stderr);
    assert!(out.stderr.contains("SIGTERM"), "{}", out.stderr);
    assert!(
        !ws.join("later.txt").exists(),
        "no line runs after the signal"
    );

    let c = check(&log);
    assert_eq!(c.code, 0, "closed clean, no recovery needed: {}", c.stderr);
    let events = log_events(&log);
    let result = events
        .iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == "busy")
        .expect("the cancelled call has its result");
    let code = result["data"]["error"]["code"].as_str().unwrap();
    assert!(code.starts_with("ABORTED"), "{code}");
}

#[test]
fn sigint_stops_a_waiting_hook_and_leaves_no_hook_process() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let marker = "937.25";
    let hooks = dir.path().join("settings.json");
    std::fs::write(
        &hooks,
        json!({"hooks": {"PreToolUse": [{"matcher": "write_file", "hooks": [
            {"type": "command", "command": format!("sleep {marker}")}
        ]}]}})
        .to_string(),
    )
    .unwrap();
    let t = transcript(
        dir.path(),
        "hooked.jsonl",
        &[&openai_line(
            "w1",
            "write_file",
            json!({"path": "w.txt", "content": "x"}),
        )],
    );
    let child = spawn_run(&t, &ws, &log, &["--hooks", hooks.to_str().unwrap()]);
    wait_for_call(&log, "w1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while processes_with(marker).is_empty() {
        assert!(Instant::now() < deadline, "the hook never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    send(&child, "-INT");
    let out = finish_within(child, Duration::from_secs(20));
    assert_eq!(out.code, 130, "{}", out.stderr);
    assert!(!ws.join("w.txt").exists());
    assert_eq!(check(&log).code, 0, "{}", check(&log).stderr);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "hook processes outlived dsh: {:?}",
            processes_with(marker)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
