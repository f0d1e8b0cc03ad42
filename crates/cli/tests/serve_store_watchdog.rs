//! Stdio `dsh serve --store`: an owner frozen past its lease (a paused VM or container) kills
//! its own tools when it resumes, writes nothing more, and stops serving with an error, as
//! `dsh run` does; and `dsh store migrate` brings a new store's schema up to date.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::pg::{export, psql, wait_for_a_call};
use common::procs::{freeze_tree, resume_and_expect_tools_killed};
use common::stdio::Client;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn a_served_owner_frozen_past_its_lease_kills_its_tools_when_it_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let url = pg::url();
    let session = pg::session_id("served-frozen-owner");
    let mut served = Client::start(&[
        "--workspace",
        ws.to_str().unwrap(),
        "--approve",
        "allow",
        "--store",
        &url,
        "--session",
        &session,
        "--lease-ms",
        "2000",
    ]);
    served.initialize();
    // Six seconds of work, then a mark on the shared workspace; not waited for here.
    let work = "for i in $(seq 1 60); do sleep 0.1; done; echo late > a-finished";
    served.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": {"name": "shell", "arguments": {"command": work}}}));
    wait_for_a_call(&url, &session);
    std::thread::sleep(Duration::from_millis(300));

    let pid = served.child.id();
    let tree = freeze_tree(pid);
    assert!(
        tree.len() >= 2,
        "no tool processes found under dsh: {tree:?}"
    );
    std::thread::sleep(Duration::from_millis(2500));

    // Another node takes the session over and runs its own call.
    let step = json!({"role": "assistant", "tool_calls": [{"id": "b0", "type": "function",
        "function": {"name": "shell", "arguments": json!({"command": "echo b > b-ran"}).to_string()}}]})
    .to_string();
    let t = transcript(dir.path(), "b.jsonl", &[&step]);
    let second = dsh(&[
        "run",
        t.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
        "--approve",
        "allow",
        "--store",
        &url,
        "--session",
        &session,
        "--lease-ms",
        "2000",
    ]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    let after_takeover = export(&url, &session);

    // The old owner resumes: its tools are killed at once, and it stops with an error.
    resume_and_expect_tools_killed(pid, &tree);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = served.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the fenced server kept serving"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3), "{status:?}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!ws.join("a-finished").exists());
    assert!(ws.join("b-ran").exists());
    assert_eq!(export(&url, &session), after_takeover);
    let checked = dsh(&["check", "--store", &url, "--session", &session]);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
}

#[test]
fn store_migrate_creates_a_new_stores_schema_and_then_has_nothing_to_do() {
    let url = pg::url();
    let db = format!("dsh_migrate_{}", std::process::id());
    psql(&url, &format!("DROP DATABASE IF EXISTS {db}"));
    psql(&url, &format!("CREATE DATABASE {db}"));
    let (base, _) = url.rsplit_once('/').unwrap();
    let fresh = format!("{base}/{db}");

    let first = dsh(&["store", "migrate", "--store", &fresh]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(
        first.stderr.contains("from version 0 to 2"),
        "{}",
        first.stderr
    );
    let again = dsh(&["store", "migrate", "--store", &fresh]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stderr.contains("up to date"), "{}", again.stderr);
    // The tables are there: the store lists (no session yet).
    let listed = dsh(&["sessions", "--store", &fresh]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_eq!(listed.stdout.trim(), "");
    // An unreachable store fails, its password masked.
    let unreachable = dsh(&[
        "store",
        "migrate",
        "--store",
        "postgres://dsh:Sup3rSECRETpw@127.0.0.1:1/dsh",
    ]);
    assert_ne!(unreachable.code, 0);
    assert!(
        !unreachable.stderr.contains("Sup3rSECRETpw"),
        "{}",
        unreachable.stderr
    );
    psql(&url, &format!("DROP DATABASE IF EXISTS {db}"));
}
