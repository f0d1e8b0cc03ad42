//! A session continued from its log by a new process (`dsh run` again, stdio `dsh serve` on
//! the same log: what LangChain's default adapters do for every call) remembers the reads the
//! log records: an edit of a file read by an earlier process passes read-before-edit, one of a
//! file never read is refused, and the steps go on after the log's last.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::stdio::Client;
use common::{check, message, run, transcript};
use serde_json::json;

#[test]
fn a_new_process_on_the_log_edits_what_an_earlier_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join("b.txt"), "one\n").unwrap();
    let log = dir.path().join("session.jsonl");

    let read = message(&[("r1", "read_file", json!({"path": "a.txt"}))]);
    let first = run(
        &transcript(dir.path(), "t1.jsonl", &[&read]),
        &ws,
        &log,
        &[],
    );
    assert_eq!(first.code, 0, "{}", first.stderr);

    let edit = message(&[(
        "e1",
        "edit_file",
        json!({"path": "a.txt", "old_string": "one", "new_string": "two"}),
    )]);
    let second = run(
        &transcript(dir.path(), "t2.jsonl", &[&edit]),
        &ws,
        &log,
        &[],
    );
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(second.stderr.contains("at step 2"), "{}", second.stderr);
    assert!(
        second.stdout.contains("Edited `a.txt`"),
        "the edit passes: {}",
        second.stdout
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "two\n");

    // A third process, stdio `dsh serve`, continues the same log.
    let mut client = Client::start(&[
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
    ]);
    client.initialize();
    let (is_error, text) = client.call(
        "edit_file",
        json!({"path": "a.txt", "old_string": "two", "new_string": "three"}),
    );
    assert!(!is_error, "the first edit's write is remembered: {text}");
    let (is_error, text) = client.call(
        "edit_file",
        json!({"path": "b.txt", "old_string": "one", "new_string": "two"}),
    );
    assert!(
        is_error && text.starts_with("DENIED") && text.contains("has not been read"),
        "{text}"
    );
    assert_eq!(client.finish(), 0);
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "three\n"
    );
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "one\n");
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    let steps: Vec<u64> = common::log_events(&log)
        .iter()
        .map(|e| e["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps.first(), Some(&1));
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    assert!(
        steps.iter().skip(4).all(|s| *s >= 3),
        "serve's steps come after the two runs': {steps:?}"
    );
}
