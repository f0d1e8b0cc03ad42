//! Opening an existing log recovers it: a torn last line is cut, a missing final newline is
//! added, seq continuity is verified, open calls are closed with `ABORTED`, corruption in the
//! middle is an error naming the line, and a resumed session continues with the next seq and
//! step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::{ErrorCode, EventBody};
use dsh_session::check::{check, check_file};
use dsh_session::{Durability, FileBackend, LogBackend, SessionError, SessionLog};

fn write(path: &std::path::Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_missing_or_empty_file_is_a_new_log() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("new.jsonl");
    let (backend, rec) = FileBackend::open(&missing).unwrap();
    assert!(missing.exists());
    assert!(backend.is_empty());
    assert_eq!((rec.events_read, rec.next_seq, rec.next_step), (0, 1, 1));
    assert!(!rec.repaired());
    let empty = dir.path().join("empty.jsonl");
    write(&empty, b"");
    let (_, rec) = FileBackend::open(&empty).unwrap();
    assert_eq!((rec.events_read, rec.next_seq, rec.next_step), (0, 1, 1));
}

#[test]
fn a_torn_last_line_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let whole = jsonl(&sample_log());
    let mut bytes = whole.clone();
    bytes.extend_from_slice(br#"{"seq":9,"step":2,"type":"user/message","data":{"cont"#);
    write(&path, &bytes);
    let (backend, rec) = FileBackend::open(&path).unwrap();
    assert_eq!(rec.torn_bytes_cut, (bytes.len() - whole.len()) as u64);
    assert_eq!(rec.events_read, 8);
    assert!(rec.closed_calls.is_empty());
    assert_eq!((rec.next_seq, rec.next_step), (9, 3));
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert_eq!(backend.read_all().unwrap(), sample_log());
}

#[test]
fn a_torn_tail_of_zeros_is_cut_off() {
    // What a machine crash can leave: the size grew but the data never reached the disk.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let whole = jsonl(&sample_log());
    let mut bytes = whole.clone();
    bytes.extend_from_slice(&[0u8; 300]);
    write(&path, &bytes);
    let (_, rec) = FileBackend::open(&path).unwrap();
    assert_eq!(rec.torn_bytes_cut, 300);
    assert_eq!(std::fs::read(&path).unwrap(), whole);
}

#[test]
fn several_garbage_lines_to_the_end_are_cut_as_one_torn_tail() {
    // Power loss under `batch`: the unsynced region holds zero blocks and a piece of a line,
    // some of them newline-terminated.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let whole = jsonl(&sample_log());
    let mut bytes = whole.clone();
    bytes.extend_from_slice(&[0u8; 4096]);
    bytes.push(b'\n');
    bytes.extend_from_slice(b"ep\":3,\"type\":\"tool/call\"}\n");
    bytes.extend_from_slice(&[0u8; 4096]);
    bytes.push(b'\n');
    write(&path, &bytes);
    let (mut backend, rec) = FileBackend::open(&path).unwrap();
    assert_eq!(rec.torn_bytes_cut, (bytes.len() - whole.len()) as u64);
    assert_eq!(rec.torn_line, Some(9));
    assert_eq!(rec.events_read, 8);
    assert!(rec.repaired());
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    backend.commit(vec![user(9, 3, "after")], true).unwrap();
    drop(backend);
    let (_, again) = FileBackend::open(&path).unwrap();
    assert_eq!((again.events_read, again.torn_line), (9, None));
    assert!(!again.repaired(), "{again:?}");
}

#[test]
fn garbage_lines_followed_by_a_valid_event_are_corruption_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let events = sample_log();
    let mut bytes = jsonl(&events[..5]);
    bytes.extend_from_slice(&[0u8; 4096]);
    bytes.push(b'\n');
    bytes.extend_from_slice(&[0u8; 10]);
    bytes.push(b'\n');
    bytes.extend_from_slice(&jsonl(&events[5..]));
    write(&path, &bytes);
    let err = FileBackend::open(&path).unwrap_err();
    assert!(
        matches!(&err, SessionError::Corrupt { line: 6, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("line 6"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "left untouched");
}

#[test]
fn a_whole_last_event_without_its_newline_is_kept_and_ended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let whole = jsonl(&sample_log());
    write(&path, &whole[..whole.len() - 1]);
    let (mut backend, rec) = FileBackend::open(&path).unwrap();
    assert!(rec.newline_added);
    assert_eq!(rec.torn_bytes_cut, 0);
    assert_eq!(rec.events_read, 8);
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    // The next event starts on its own line.
    backend.commit(vec![call(9, 3, "d")], true).unwrap();
    assert_eq!(backend.read_all().unwrap().len(), 9);
}

#[test]
fn corruption_in_the_middle_is_an_error_naming_the_line_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let lines = jsonl(&sample_log());
    let text = String::from_utf8(lines).unwrap();
    let mut broken: Vec<String> = text.lines().map(str::to_string).collect();
    broken[3] = broken[3][..20].to_string();
    let bytes = format!("{}\n", broken.join("\n")).into_bytes();
    write(&path, &bytes);
    let err = FileBackend::open(&path).unwrap_err();
    match &err {
        SessionError::Corrupt { line, .. } => assert_eq!(*line, 4),
        other => panic!("expected Corrupt, got {other}"),
    }
    assert!(err.to_string().contains("line 4"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_seq_gap_is_corruption_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let mut events = sample_log();
    events.remove(4);
    write(&path, &jsonl(&events));
    let err = FileBackend::open(&path).unwrap_err();
    assert!(
        matches!(&err, SessionError::Corrupt { line: 5, reason } if reason.contains("seq 6 where 5")),
        "{err}"
    );
}

#[test]
fn open_calls_are_closed_with_aborted_results_in_their_own_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    // Step 3 crashed with two calls running (one had a code-mode sub-call) and one answered.
    let mut events = sample_log();
    events.extend([
        call(9, 3, "x"),
        call(10, 3, "y"),
        call(11, 3, "z"),
        dispatch(12, 3, "x.1", "x"),
        result(13, 3, "y", 10),
    ]);
    let mut bytes = jsonl(&events);
    bytes.extend_from_slice(b"{\"seq\":14,\"st");
    write(&path, &bytes);
    let (backend, rec) = FileBackend::open(&path).unwrap();
    assert_eq!(rec.closed_calls, vec!["x".to_string(), "z".to_string()]);
    assert_eq!(rec.events_read, 13);
    assert_eq!(rec.torn_bytes_cut, 13);
    assert_eq!((rec.next_seq, rec.next_step), (16, 4));
    let all = backend.read_all().unwrap();
    assert_eq!(all.len(), 15);
    for (event, (call_seq, id)) in all[13..].iter().zip([(9, "x"), (11, "z")]) {
        assert_eq!(event.step, 3);
        let EventBody::ToolResult {
            data,
            surface_op,
            source_event_seqs,
        } = &event.body
        else {
            panic!("not a result: {event:?}");
        };
        assert_eq!(data.call_id, id);
        assert_eq!(data.error.as_ref().unwrap().code, ErrorCode::Aborted);
        assert_eq!(surface_op, "append");
        assert_eq!(source_event_seqs, &vec![call_seq]);
    }
    check(&all).unwrap();
    check_file(&path).unwrap();
    // A second open finds nothing left to repair.
    drop(backend);
    let (_, again) = FileBackend::open(&path).unwrap();
    assert!(!again.repaired(), "{again:?}");
    assert_eq!(again.next_seq, 16);
}

#[test]
fn a_whole_last_line_that_is_no_event_is_corruption_not_a_tear() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let mut bytes = jsonl(&sample_log());
    bytes.extend_from_slice(br#"{"seq":9,"step":2,"type":"tool/unknown","data":{}}"#);
    write(&path, &bytes);
    assert!(matches!(
        FileBackend::open(&path).unwrap_err(),
        SessionError::Corrupt { line: 9, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_continues_with_the_next_seq_and_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let (log, _) = SessionLog::open_file(&path, Durability::Batch, None)
        .await
        .unwrap();
    let c = log.append(1, call_body("a")).await.unwrap();
    log.append(1, result_body("a", c)).await.unwrap();
    let open = log.append(2, call_body("b")).await.unwrap();
    assert_eq!(open, 3);
    log.close().await.unwrap();

    let (log, rec) = SessionLog::open_file(&path, Durability::Batch, None)
        .await
        .unwrap();
    assert_eq!(rec.closed_calls, vec!["b".to_string()]);
    assert_eq!((rec.next_seq, rec.next_step), (5, 3));
    let c = log.append(rec.next_step, call_body("c")).await.unwrap();
    assert_eq!(c, 5);
    log.append(rec.next_step, result_body("c", c))
        .await
        .unwrap();
    log.close().await.unwrap();
    let report = check_file(&path).unwrap();
    assert_eq!((report.events, report.steps, report.calls), (6, 3, 3));
}

#[tokio::test]
async fn opening_a_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = SessionLog::open_file(dir.path(), Durability::Batch, None)
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Io { .. }), "{err}");
}

#[test]
fn a_log_has_one_writer_at_a_time_and_must_be_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    let (first, _) = dsh_session::FileBackend::open(&path).unwrap();
    let second = dsh_session::FileBackend::open(&path);
    assert!(
        matches!(second, Err(dsh_session::SessionError::InUse(_))),
        "a second writer was let in"
    );
    drop(first);
    assert!(
        dsh_session::FileBackend::open(&path).is_ok(),
        "the lock goes with the writer"
    );
    assert!(dsh_session::FileBackend::open("/dev/null").is_err());
    assert!(dsh_session::FileBackend::open(dir.path()).is_err());
}

#[test]
fn whole_events_that_break_an_invariant_are_refused_not_recovered() {
    // The `recovery` fuzz target's finding: a result whose sourceEventSeqs names itself,
    // then a torn tail. Recovery used to cut the tail, accept the rest and leave a log that
    // `dsh check` rejects; appending to it would bury the fault under new steps.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let mut bytes = br#"{"seq":1,"step":1,"type":"tool/call","data":{"callId":"a","name":"read_file","arguments":{"path":"a"},"agent":"main","parent":null}}
{"seq":2,"step":1,"type":"tool/result","data":{"callId":"a","message":[{"type":"text","text":"ok"}]},"surfaceOp":"append","sourceEventSeqs":[2]}
"#
    .to_vec();
    bytes.extend_from_slice(br#"{"seq":3,"step":2,"type":"tool/ca"#);
    write(&path, &bytes);
    let err = FileBackend::open(&path).unwrap_err();
    match &err {
        SessionError::Invariant { seq, message } => {
            assert_eq!(*seq, 2, "{err}");
            assert!(message.contains("seq 2"), "{err}");
        }
        other => panic!("expected Invariant, got {other}"),
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file is untouched"
    );
    let checked = dsh_session::check::check_file(&path);
    assert!(
        matches!(
            checked,
            Err(dsh_session::check::Violation::UnknownCall {
                seq: 2,
                call_seq: 2
            })
        ),
        "{checked:?}"
    );
    assert!(dsh_session::replay::read_log(&path).is_err());
    assert!(dsh_session::replay::replay_file(&path).is_err());
}
