//! A log another writer holds (a `dsh serve` still finishing, as when a client starts a new
//! server for every session) is waited for a bounded time (`--lock-wait-ms`); past it, a stdio
//! `dsh serve` answers its client's requests with the reason instead of closing the
//! connection without a word.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::stdio::Client;
use common::{message, run, transcript};
use serde_json::json;
use std::time::{Duration, Instant};

/// Holds the log's lock, as another dsh writing it does, until the returned handle is joined.
fn hold(log: &std::path::Path, for_how_long: Duration) -> std::thread::JoinHandle<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    file.lock().unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(for_how_long);
        drop(file);
    })
}

#[test]
fn a_run_waits_for_a_writer_that_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let log = dir.path().join("session.jsonl");
    let holder = hold(&log, Duration::from_millis(1500));
    let read = message(&[("r1", "read_file", json!({"path": "a.txt"}))]);
    let started = Instant::now();
    let out = run(&transcript(dir.path(), "t.jsonl", &[&read]), &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(started.elapsed() >= Duration::from_millis(1000));
    holder.join().unwrap();
}

#[test]
fn serve_tells_its_client_why_when_the_log_stays_held() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let log = dir.path().join("session.jsonl");
    let holder = hold(&log, Duration::from_secs(2));
    let mut client = Client::start(&[
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
        "--lock-wait-ms".as_ref(),
        "300".as_ref(),
    ]);
    let answer = client.exchange(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "0"}}),
    );
    let said = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("in use by another writer") && said.contains("waiting"),
        "{answer}"
    );
    assert_ne!(client.finish(), 0, "dsh serve did not start");
    holder.join().unwrap();
}
