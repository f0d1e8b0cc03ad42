//! What recovery repaired is reported as a `tracing` warning. Alone in its test binary:
//! tracing caches callsite interest process-wide, so a test running beside it without a
//! subscriber could hide the event from this test's scoped one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_session::FileBackend;
use std::io::Write;
use std::sync::{Arc, Mutex};

fn write(path: &std::path::Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

/// Collects formatted tracing output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn what_recovery_repaired_is_reported_as_a_tracing_warning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let mut events = sample_log();
    events.push(call(9, 3, "open"));
    write(&path, &jsonl(&events));
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || FileBackend::open(&path).unwrap());
    let out = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(out.contains("WARN"), "{out}");
    assert!(out.contains("session log recovered"), "{out}");
    assert!(out.contains("\"open\""), "{out}");
}
