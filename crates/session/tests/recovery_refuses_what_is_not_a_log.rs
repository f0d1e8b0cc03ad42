//! Recovery cuts only what a torn write leaves (a prefix of the next event lines, zero bytes
//! from a lost page), at most one group commit of it. A file that is not a dsh log (its first
//! line is no seq-1 event, nor the torn start of one) and a log followed by anything else are
//! refused, by opening, checking and reading alike, and left byte for byte as they were.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::event::MAX_EVENT_BYTES;
use dsh_session::check::{Violation, check_file};
use dsh_session::replay::{read_log, replay_file};
use dsh_session::{FileBackend, SessionError};
use std::path::Path;

/// Every way of reading or opening `path` refuses it, and the file keeps its bytes. Answers
/// what opening it said.
fn refused_untouched(path: &Path) -> String {
    let before = std::fs::read(path).unwrap();
    let opened = FileBackend::open(path);
    let err = match opened {
        Ok((_, recovery)) => panic!("opened as a log: {recovery:?}"),
        Err(e) => e,
    };
    assert!(
        matches!(err, SessionError::NotALog(_) | SessionError::Corrupt { .. }),
        "{err:?}"
    );
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "opening changed the file"
    );
    let checked = check_file(path);
    assert!(
        matches!(checked, Err(Violation::Parse { .. })),
        "check_file: {checked:?}"
    );
    assert!(read_log(path).is_err(), "read_log read it");
    assert!(replay_file(path).is_err(), "replay_file read it");
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "reading changed the file"
    );
    err.to_string()
}

fn file(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn files_that_are_not_logs_are_refused_as_not_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8]); 9] = [
        (
            "settings.json",
            b"{\n  \"editor.tabSize\": 4,\n  \"files.autoSave\": \"off\"\n}\n",
        ),
        (
            "policy.toml",
            b"[rules]\nallow = [\"read_file\"]\ndeny = [\"write_file(/etc/**)\"]\n",
        ),
        ("notes.md", b"# Notes\n\nBuy milk.\n"),
        ("one-line.json", br#"{"editor.tabSize":4}"#),
        ("cut.json", br#"{"editor.tabSize":4,"#),
        ("prose", b"no newline at the end"),
        // Looks like the start of an event, but a newline ends it: written whole, so not torn.
        ("ended", b"{\"seq\":1,\"st\n"),
        // A lost page, then text: where no event precedes, every line must be the next event
        // as far as it was written.
        ("zeros-then-text", b"\0\0\0\0\nmy notes\n"),
        ("torn-then-text", b"{\"seq\":1,\"step\":1,\0\0\0\nmy notes"),
    ];
    for (name, bytes) in cases {
        let path = file(dir.path(), name, bytes);
        let message = refused_untouched(&path);
        assert!(message.contains("not a dsh log"), "{name}: {message}");
        let checked = check_file(&path).unwrap_err().to_string();
        assert!(checked.contains("not a dsh log"), "{name}: {checked}");
    }
}

#[test]
fn text_after_a_log_is_refused_naming_its_line_never_cut() {
    let dir = tempfile::tempdir().unwrap();
    let log = jsonl(&sample_log());
    let tails: [&[u8]; 7] = [
        b"these are my notes\nabout the session\n",
        b"a note without a newline",
        // A torn write never ends a line it did not write whole.
        b"{\"seq\":9,\"st\n",
        // The next event is seq 9: a torn line is a prefix of it, not of another.
        b"{\"seq\":42,\"step\":3,\"type\":\"user/mes",
        // Bytes no log line holds (a tab) among zero pages.
        b"\0\0\0\0\n\ta\tb\n",
        // Prose after a lost page is still prose where the next event should start.
        b"TODO: \0\0\0\0 later\n",
        b"\r\n",
    ];
    for (i, tail) in tails.iter().enumerate() {
        let mut bytes = log.clone();
        bytes.extend_from_slice(tail);
        let path = file(dir.path(), &format!("log{i}.jsonl"), &bytes);
        let message = refused_untouched(&path);
        assert!(message.contains("corrupt at line 9"), "tail {i}: {message}");
    }
}

#[test]
fn a_torn_tail_longer_than_one_group_commit_is_refused() {
    // Zeros from lost pages are a torn write's, but one group commit writes at most one
    // largest event (and its newline): a longer run was not left by a crash.
    let dir = tempfile::tempdir().unwrap();
    let log = jsonl(&sample_log());
    let path = file(dir.path(), "log.jsonl", &log);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len((log.len() + MAX_EVENT_BYTES + 2) as u64).unwrap();
    drop(f);
    let len = std::fs::metadata(&path).unwrap().len();
    let err = FileBackend::open(&path).unwrap_err();
    assert!(
        matches!(err, SessionError::Corrupt { line: 9, .. }),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "untouched");
    assert!(std::fs::read(&path).unwrap().starts_with(&log));
}

#[test]
fn what_a_crash_leaves_is_still_recovered() {
    let dir = tempfile::tempdir().unwrap();
    // A crash during the first write: a zero page, or the start of the first event.
    for (name, bytes) in [
        ("zeros", vec![0u8; 4096]),
        (
            "first",
            br#"{"seq":1,"step":1,"type":"tool/call","data":{"callId":"a","na"#.to_vec(),
        ),
        ("first-then-zeros", {
            let mut b = br#"{"seq":1,"step":1,"ty"#.to_vec();
            b.extend_from_slice(&[0u8; 600]);
            b
        }),
        // The first group, two lines, with a page lost across the end of the first.
        ("two-lines", {
            let mut b = br#"{"seq":1,"step":1,"type":"tool/call","da"#.to_vec();
            b.extend_from_slice(&[0u8; 512]);
            b.extend_from_slice(b"ll}\n{\"seq\":2,\"step\":1,\"type\":\"tool/res");
            b
        }),
    ] {
        let path = file(dir.path(), name, &bytes);
        assert!(
            matches!(
                check_file(&path),
                Err(Violation::NeedsRecovery {
                    torn_line: Some(1),
                    ..
                })
            ),
            "{name}: {:?}",
            check_file(&path)
        );
        let (_, rec) = FileBackend::open(&path).unwrap();
        assert_eq!(rec.torn_bytes_cut, bytes.len() as u64, "{name}");
        assert_eq!(rec.next_seq, 1);
        assert_eq!(std::fs::read(&path).unwrap(), b"", "{name}");
    }
    // A log's torn next line, whole or cut at any byte, with lost pages after it.
    let log = jsonl(&sample_log());
    let next = user(9, 3, "after the crash").to_json_line();
    for cut in 1..next.len() {
        let mut bytes = log.clone();
        bytes.extend_from_slice(&next.as_bytes()[..cut]);
        if cut % 7 == 0 {
            bytes.extend_from_slice(&[0u8; 512]);
            bytes.push(b'\n');
        }
        let path = file(dir.path(), "cut.jsonl", &bytes);
        let (_, rec) = FileBackend::open(&path).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(rec.events_read, 8, "cut {cut}");
        assert_eq!(std::fs::read(&path).unwrap(), log, "cut {cut}");
    }
}
