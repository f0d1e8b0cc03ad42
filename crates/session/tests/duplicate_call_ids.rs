//! Pairing by id needs ids that are unique within a step: two `tool/call` events, or a
//! `tool/call` and a `tool/code-dispatch`, with the same `callId` in one step break the log,
//! and the checker, recovery and replay all refuse it. The same id in different steps is fine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_session::check::{Violation, check, check_file};
use dsh_session::replay::read_log;
use dsh_session::{FileBackend, SessionError};

#[test]
fn a_model_call_id_equal_to_a_sub_call_id_in_its_step_is_refused() {
    // Issue 15: the model named a call `r.sub1`, the id dsh gives `run_code` call `r`'s first
    // sub-call; both landed in step 1 and `dsh check` passed.
    let log = vec![
        call(1, 1, "r"),
        call(2, 1, "r.sub1"),
        dispatch(3, 1, "r.sub1", "r"),
        result(4, 1, "r", 1),
        result(5, 1, "r.sub1", 2),
    ];
    let v = check(&log).unwrap_err();
    assert_eq!(
        v,
        Violation::DuplicateCallId {
            seq: 3,
            call_id: "r.sub1".into(),
            step: 1,
            first: 2,
        }
    );
    assert!(v.to_string().contains("`r.sub1`"), "{v}");

    // The dispatch first, then a model call with its id.
    let log = vec![
        call(1, 1, "r"),
        dispatch(2, 1, "r.sub1", "r"),
        call(3, 1, "r.sub1"),
        result(4, 1, "r", 1),
        result(5, 1, "r.sub1", 3),
    ];
    assert!(matches!(
        check(&log).unwrap_err(),
        Violation::DuplicateCallId {
            seq: 3,
            first: 2,
            ..
        }
    ));
}

#[test]
fn two_calls_with_one_id_in_a_step_are_refused_by_check_recovery_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let log = vec![
        call(1, 1, "a"),
        result(2, 1, "a", 1),
        call(3, 1, "a"),
        result(4, 1, "a", 3),
    ];
    let bytes = jsonl(&log);
    std::fs::write(&path, &bytes).unwrap();
    let expected = Violation::DuplicateCallId {
        seq: 3,
        call_id: "a".into(),
        step: 1,
        first: 1,
    };
    assert_eq!(check(&log).unwrap_err(), expected);
    assert_eq!(check_file(&path).unwrap_err(), expected);
    let err = FileBackend::open(&path).unwrap_err();
    assert!(
        matches!(err, SessionError::Invariant { seq: 3, .. }),
        "{err}"
    );
    assert!(read_log(&path).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "untouched");
}

#[test]
fn the_same_id_in_different_steps_and_sibling_sub_calls_are_fine() {
    let log = vec![
        call(1, 1, "a"),
        dispatch(2, 1, "a.1", "a"),
        dispatch(3, 1, "a.2", "a"),
        result(4, 1, "a", 1),
        call(5, 2, "a"),
        dispatch(6, 2, "a.1", "a"),
        result(7, 2, "a", 5),
    ];
    assert_eq!(check(&log).unwrap().calls, 2);
}
