//! A writer killed with SIGKILL at a random moment loses nothing it acknowledged, and the log
//! it leaves recovers into one that passes the checker.
//!
//! The test binary re-runs itself (`current_exe`) with `DSH_SESSION_CRASH_CHILD` naming the
//! log: in that mode the test is the child, appending under `batch` from several concurrent
//! appenders and printing each acknowledged seq as soon as its ack arrives. The parent kills
//! it, recovers the log, and compares. `DSH_CRASH_ITERATIONS` raises the number of kills (50 by
//! default, a few seconds in all).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::{EventBody, SessionEvent};
use dsh_session::check::{check, check_file};
use dsh_session::{Durability, FileBackend, LogBackend, SessionLog, replay};
use rand::Rng;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const CHILD: &str = "DSH_SESSION_CRASH_CHILD";
const TEST: &str = "crash_recovery_keeps_every_acknowledged_append";
const APPENDERS: usize = 8;

fn ack(seq: u64, kind: &str, id: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ACK {seq} {kind} {id}").unwrap();
    out.flush().unwrap();
}

/// Runs steps until killed: in each, the appenders record calls (some with a code-mode
/// sub-call) and their results concurrently, then one deferred context message follows.
fn child(path: &Path) -> ! {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (log, recovery) = SessionLog::open_file(path, Durability::Batch, None)
            .await
            .unwrap();
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "READY {}", recovery.next_seq).unwrap();
            out.flush().unwrap();
        }
        let mut step = recovery.next_step;
        loop {
            let tasks: Vec<_> = (0..APPENDERS)
                .map(|t| {
                    let log = log.clone();
                    tokio::spawn(async move {
                        for k in 0..3 {
                            let id = format!("s{step}t{t}k{k}");
                            let c = log.append(step, call_body(&id)).await.unwrap();
                            ack(c, "tool/call", &id);
                            if k == 1 {
                                let sub = format!("{id}.sub");
                                let d = log.append(step, dispatch_body(&sub, &id)).await.unwrap();
                                ack(d, "tool/code-dispatch", &sub);
                            }
                            let r = log.append(step, result_body(&id, c)).await.unwrap();
                            ack(r, "tool/result", &id);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let u = log
                .append(step, user_body(&format!("after-{step}"), "s"))
                .await
                .unwrap();
            ack(u, "user/message", &format!("after-{step}"));
            step += 1;
        }
    })
}

struct Acked {
    seq: u64,
    kind: String,
    id: String,
}

/// libtest may print `test NAME ... ` before the child's first line: look past it.
fn parse_ack(line: &str) -> Option<Acked> {
    let mut parts = line[line.find("ACK ")? + 4..].split(' ');
    Some(Acked {
        seq: parts.next()?.parse().ok()?,
        kind: parts.next()?.to_string(),
        id: parts.next()?.to_string(),
    })
}

fn identity(event: &SessionEvent) -> String {
    match &event.body {
        EventBody::UserMessage(m) => m.content.clone(),
        _ => event.call_id().unwrap_or_default().to_string(),
    }
}

/// Starts a child, kills it after `delay` (counted from its READY line when `after_ready`),
/// and returns what it acknowledged.
fn run_child(path: &Path, delay: Duration, after_ready: bool) -> Vec<Acked> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut lines = Vec::new();
    if after_ready {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("READY ") => break,
                Ok(line) => lines.push(line),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("the child never got ready: {}", errors.join().unwrap());
                }
            }
        }
    }
    std::thread::sleep(delay);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let stderr = errors.join().unwrap();
    assert!(
        !stderr.contains("panicked"),
        "the child failed rather than being killed ({status}): {stderr}"
    );
    lines.extend(rx.try_iter());
    lines.iter().filter_map(|l| parse_ack(l)).collect()
}

/// Checks the log after a kill; answers how many calls recovery closed (when it ran on disk).
fn verify(path: &Path, acked: &[Acked], recover_on_disk: bool) -> usize {
    let mut closed = 0;
    let events = if recover_on_disk {
        let (backend, recovery) = FileBackend::open(path).unwrap();
        closed = recovery.closed_calls.len();
        check_file(path).unwrap_or_else(|v| panic!("recovered log fails the checker: {v}"));
        backend.read_all().unwrap()
    } else {
        let events = replay::read_log(path).unwrap();
        check(&events).unwrap_or_else(|v| panic!("log read as recovered fails the checker: {v}"));
        events
    };
    for a in acked {
        let event = events.get(a.seq as usize - 1).unwrap_or_else(|| {
            panic!(
                "acknowledged seq {} is lost ({} events)",
                a.seq,
                events.len()
            )
        });
        assert_eq!(event.body.type_str(), a.kind, "seq {}", a.seq);
        assert_eq!(identity(event), a.id, "seq {}", a.seq);
    }
    closed
}

#[test]
fn crash_recovery_keeps_every_acknowledged_append() {
    if let Some(path) = std::env::var_os(CHILD) {
        child(&PathBuf::from(path));
    }
    let iterations: usize = std::env::var("DSH_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut total_acked = 0;
    let mut closed_calls = 0;
    let mut path = dir.path().join("log-0.jsonl");
    for i in 0..iterations {
        // A fresh log now and then keeps each check small; the others resume a recovered one.
        if i % 10 == 0 {
            path = dir.path().join(format!("log-{i}.jsonl"));
        }
        // Most kills land while appends fly; some land while the child opens and recovers.
        let during_open = i % 7 == 3;
        let delay = if during_open {
            Duration::from_micros(rng.random_range(0..15_000))
        } else {
            Duration::from_micros(rng.random_range(0..25_000))
        };
        let acked = run_child(&path, delay, !during_open);
        total_acked += acked.len();
        if path.exists() {
            closed_calls += verify(&path, &acked, i % 2 == 0);
        } else {
            assert!(acked.is_empty());
        }
    }
    if path.exists() {
        verify(&path, &[], true);
    }
    eprintln!(
        "{iterations} kills, {total_acked} acknowledged appends, {closed_calls} calls closed by recovery"
    );
    // Proof that the kills landed mid-step, where recovery has work to do.
    assert!(
        total_acked >= iterations && closed_calls > 0,
        "{total_acked} appends acknowledged and {closed_calls} calls closed in {iterations} runs"
    );
}
