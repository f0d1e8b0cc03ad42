//! What no log is, refused before it can hold a reader up: a FIFO (which would block a reader
//! forever), a device such as `/dev/zero` (which never ends), a directory, a line longer than
//! the largest event (a sparse file of zeros), and, for the writer, a symbolic link.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::event::MAX_EVENT_BYTES;
use dsh_session::check::{Violation, check_file};
use dsh_session::replay::{read_log, replay_file};
use dsh_session::{FileBackend, SessionError};
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on its own thread and waits at most `secs` for it: a reader that blocks or grows
/// forever fails the test instead of hanging it.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not answer within {secs} s"))
}

/// Every reader and the writer's open refuse `path`, each within a generous bound.
fn refused_by_everyone(path: &Path, what: &str) -> Vec<String> {
    let mut messages = Vec::new();
    let p = path.to_path_buf();
    let checked = within(30, &format!("check_file({what})"), move || check_file(&p));
    match checked {
        Err(v @ (Violation::Unreadable { .. } | Violation::Parse { .. })) => {
            messages.push(v.to_string())
        }
        other => panic!("check_file({what}): {other:?}"),
    }
    let p = path.to_path_buf();
    let read = within(30, &format!("read_log({what})"), move || {
        read_log(&p).map(|e| e.len())
    });
    messages.push(read.unwrap_err().to_string());
    let p = path.to_path_buf();
    let replayed = within(30, &format!("replay_file({what})"), move || {
        replay_file(&p).map(|t| t.steps.len())
    });
    messages.push(replayed.unwrap_err().to_string());
    let p = path.to_path_buf();
    let opened = within(30, &format!("FileBackend::open({what})"), move || {
        FileBackend::open(&p).map(|(_, r)| r)
    });
    messages.push(opened.unwrap_err().to_string());
    messages
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_fifo_a_device_and_a_directory_are_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.jsonl");
    mkfifo(&fifo);
    let folder = dir.path().join("folder.jsonl");
    std::fs::create_dir(&folder).unwrap();
    for (path, what) in [
        (fifo.clone(), "a FIFO"),
        (PathBuf::from("/dev/zero"), "/dev/zero"),
        (PathBuf::from("/dev/null"), "/dev/null"),
        (folder, "a directory"),
    ] {
        let messages = refused_by_everyone(&path, what);
        for m in &messages {
            assert!(
                m.contains("not a regular file") || m.contains("Is a directory"),
                "{what}: {m}"
            );
        }
    }
    // Nothing was written into the FIFO's place.
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
fn a_sparse_file_of_zeros_is_refused_quickly_and_untouched() {
    // Three gigabytes of zeros cost no disk; they are one line longer than any event, and far
    // more than a crash leaves. Reading it whole once took 4 GB and 18 s.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.jsonl");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(3 << 30).unwrap();
    drop(f);
    let messages = refused_by_everyone(&path, "a sparse file");
    let longest = format!("{MAX_EVENT_BYTES}");
    for m in &messages {
        assert!(
            m.contains("longer than the largest event") && m.contains(&longest),
            "{m}"
        );
    }
    assert!(messages[3].contains("not a dsh log"), "{}", messages[3]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 << 30);

    // The same after a real log: named by its line, and never cut.
    let log = jsonl(&sample_log());
    std::fs::write(&path, &log).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(3 << 30).unwrap();
    drop(f);
    let p = path.clone();
    let err = within(30, "open", move || FileBackend::open(&p).map(|(_, r)| r)).unwrap_err();
    assert!(
        matches!(err, SessionError::Corrupt { line: 9, .. }),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 << 30);
    let mut head = vec![0u8; log.len()];
    std::fs::File::open(&path)
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    assert_eq!(head, log);
}

#[test]
fn the_writer_does_not_follow_a_symbolic_link() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.md");
    std::fs::write(&notes, "# Notes\n\nBuy milk.\n").unwrap();
    let real = dir.path().join("real.jsonl");
    std::fs::write(&real, jsonl(&sample_log())).unwrap();
    for (target, name) in [(&notes, "to-notes.jsonl"), (&real, "to-log.jsonl")] {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(target, &link).unwrap();
        let before = std::fs::read(target).unwrap();
        let err = FileBackend::open(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(target).unwrap(), before, "{name}");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }
    // A dangling link is not created through either.
    let dangling = dir.path().join("dangling.jsonl");
    std::os::unix::fs::symlink(dir.path().join("nowhere.jsonl"), &dangling).unwrap();
    assert!(FileBackend::open(&dangling).is_err());
    assert!(!dir.path().join("nowhere.jsonl").exists());
    // Readers only read: through a link to a log they read the log.
    let link = dir.path().join("to-log.jsonl");
    assert_eq!(check_file(&link).unwrap().events, 8);
}
