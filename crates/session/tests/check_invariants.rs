//! The checker names the first violation of each invariant of SPEC.md's log section; one test
//! per invariant, each with a log that breaks it, plus logs that keep them all.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::{EventBody, SessionEvent};
use dsh_session::check::{Violation, check, check_file};
use dsh_session::{SessionError, replay};

fn violation(events: &[SessionEvent]) -> Violation {
    let v = check(events).unwrap_err();
    // Every violation reads as one clear sentence naming where it is.
    let text = v.to_string();
    assert!(text.contains("seq") || text.contains("line"), "{text}");
    v
}

fn with_body(mut e: SessionEvent, f: impl FnOnce(&mut EventBody)) -> SessionEvent {
    f(&mut e.body);
    e
}

#[test]
fn well_formed_logs_pass() {
    let report = check(&sample_log()).unwrap();
    assert_eq!(report.events, 8);
    assert_eq!(report.steps, 2);
    assert_eq!(report.calls, 3);
    assert_eq!(report.code_dispatches, 1);
    assert_eq!(report.user_messages, 1);
    assert_eq!(check(&[]).unwrap().events, 0);
    // The same call id in two steps is two calls.
    check(&[
        call(1, 1, "a"),
        result(2, 1, "a", 1),
        call(3, 2, "a"),
        result(4, 2, "a", 3),
    ])
    .unwrap();
}

#[test]
fn seq_must_start_at_one() {
    let mut log = sample_log();
    for e in &mut log {
        e.seq += 1;
    }
    assert!(matches!(
        violation(&log),
        Violation::SeqOutOfOrder {
            line: 1,
            expected: 1,
            found: 2
        }
    ));
}

#[test]
fn seq_must_increase_by_exactly_one() {
    let mut log = sample_log();
    log[5].seq = 7;
    assert!(matches!(
        violation(&log),
        Violation::SeqOutOfOrder {
            line: 6,
            expected: 6,
            found: 7
        }
    ));
    let mut repeated = sample_log();
    repeated[2].seq = 2;
    assert!(matches!(
        violation(&repeated),
        Violation::SeqOutOfOrder {
            line: 3,
            expected: 3,
            found: 2
        }
    ));
}

#[test]
fn steps_never_go_backwards() {
    let log = vec![call(1, 2, "a"), result(2, 2, "a", 1), user(3, 1, "late")];
    assert_eq!(
        violation(&log),
        Violation::StepBackwards {
            seq: 3,
            step: 1,
            previous: 2
        }
    );
}

#[test]
fn every_call_has_a_result() {
    let log = vec![call(1, 1, "a"), call(2, 1, "b"), result(3, 1, "b", 2)];
    assert_eq!(
        violation(&log),
        Violation::MissingResult {
            call_seq: 1,
            call_id: "a".into(),
            step: 1
        }
    );
    // Found when the next step begins, not only at the end.
    let log = vec![call(1, 1, "a"), call(2, 2, "b"), result(3, 2, "b", 2)];
    assert!(matches!(
        violation(&log),
        Violation::MissingResult { call_seq: 1, .. }
    ));
}

#[test]
fn a_result_is_in_its_calls_step() {
    let log = vec![call(1, 1, "a"), result(2, 2, "a", 1)];
    assert_eq!(
        violation(&log),
        Violation::ResultInOtherStep {
            seq: 2,
            call_seq: 1,
            call_step: 1,
            step: 2
        }
    );
}

#[test]
fn a_call_has_exactly_one_result() {
    let log = vec![call(1, 1, "a"), result(2, 1, "a", 1), result(3, 1, "a", 1)];
    assert_eq!(
        violation(&log),
        Violation::DuplicateResult {
            seq: 3,
            call_seq: 1,
            first: 2
        }
    );
}

#[test]
fn no_result_comes_before_its_call() {
    let log = vec![result(1, 1, "a", 2), call(2, 1, "a")];
    assert_eq!(
        violation(&log),
        Violation::ResultBeforeCall {
            seq: 1,
            call_seq: 2
        }
    );
}

#[test]
fn no_result_for_an_unknown_call() {
    // Names a seq that does not exist.
    let log = vec![call(1, 1, "a"), result(2, 1, "a", 9)];
    assert_eq!(
        violation(&log),
        Violation::UnknownCall {
            seq: 2,
            call_seq: 9
        }
    );
    // Names an event that is not a tool/call.
    let log = vec![user(1, 1, "x"), call(2, 1, "a"), result(3, 1, "a", 1)];
    assert_eq!(
        violation(&log),
        Violation::UnknownCall {
            seq: 3,
            call_seq: 1
        }
    );
}

#[test]
fn a_result_names_exactly_one_call() {
    let log = vec![
        call(1, 1, "a"),
        with_body(result(2, 1, "a", 1), |b| {
            if let EventBody::ToolResult {
                source_event_seqs, ..
            } = b
            {
                source_event_seqs.push(1);
            }
        }),
    ];
    assert_eq!(
        violation(&log),
        Violation::SourceCount {
            seq: 2,
            found: vec![1, 1]
        }
    );
    let log = vec![
        call(1, 1, "a"),
        with_body(result(2, 1, "a", 1), |b| {
            if let EventBody::ToolResult {
                source_event_seqs, ..
            } = b
            {
                source_event_seqs.clear();
            }
        }),
    ];
    assert!(matches!(
        violation(&log),
        Violation::SourceCount { seq: 2, .. }
    ));
}

#[test]
fn a_result_carries_its_calls_id() {
    let log = vec![call(1, 1, "a"), result(2, 1, "b", 1)];
    assert_eq!(
        violation(&log),
        Violation::CallIdMismatch {
            seq: 2,
            call_seq: 1,
            expected: "a".into(),
            found: "b".into()
        }
    );
}

#[test]
fn surface_op_is_append() {
    let log = vec![
        call(1, 1, "a"),
        with_body(result(2, 1, "a", 1), |b| {
            if let EventBody::ToolResult { surface_op, .. } = b {
                *surface_op = "replace".into();
            }
        }),
    ];
    assert_eq!(
        violation(&log),
        Violation::SurfaceOp {
            seq: 2,
            found: "replace".into()
        }
    );
}

#[test]
fn user_messages_come_after_all_of_their_steps_results() {
    let log = vec![
        call(1, 1, "a"),
        call(2, 1, "b"),
        result(3, 1, "a", 1),
        user(4, 1, "too early"),
        result(5, 1, "b", 2),
    ];
    assert_eq!(
        violation(&log),
        Violation::UserMessageBeforeResult {
            seq: 4,
            result_seq: 5,
            step: 1
        }
    );
}

#[test]
fn code_dispatches_sit_between_their_parent_call_and_its_result() {
    // After the parent's result.
    let log = vec![
        call(1, 1, "a"),
        result(2, 1, "a", 1),
        dispatch(3, 1, "a.1", "a"),
    ];
    let v = violation(&log);
    assert!(
        matches!(&v, Violation::DispatchOutsideParent { seq: 3, reason, .. } if reason.contains("after")),
        "{v}"
    );
    // Before the parent call.
    let log = vec![
        dispatch(1, 1, "a.1", "a"),
        call(2, 1, "a"),
        result(3, 1, "a", 2),
    ];
    let v = violation(&log);
    assert!(
        matches!(&v, Violation::DispatchOutsideParent { seq: 1, reason, .. } if reason.contains("before")),
        "{v}"
    );
    // In another step than the parent (whose call is still open).
    let log = vec![call(1, 1, "a"), dispatch(2, 2, "a.1", "a")];
    let v = violation(&log);
    assert!(
        matches!(&v, Violation::MissingResult { call_seq: 1, .. }),
        "{v}"
    );
    let log = vec![
        call(1, 1, "a"),
        result(2, 1, "a", 1),
        call(3, 2, "b"),
        dispatch(4, 2, "a.1", "a"),
        result(5, 2, "b", 3),
    ];
    let v = violation(&log);
    assert!(
        matches!(&v, Violation::DispatchOutsideParent { seq: 4, reason, .. } if reason.contains("step")),
        "{v}"
    );
    // A parent that does not exist at all.
    let log = vec![
        call(1, 1, "a"),
        dispatch(2, 1, "x.1", "x"),
        result(3, 1, "a", 1),
    ];
    let v = violation(&log);
    assert!(
        matches!(&v, Violation::DispatchOutsideParent { seq: 2, reason, .. } if reason.contains("no tool/call")),
        "{v}"
    );
}

#[test]
fn the_first_violation_in_log_order_is_named() {
    // A missing result (call 1) and a bad surfaceOp (seq 5): the earlier one wins.
    let log = vec![
        call(1, 1, "a"),
        call(2, 2, "b"),
        result(3, 2, "b", 2),
        call(4, 2, "c"),
        with_body(result(5, 2, "c", 4), |b| {
            if let EventBody::ToolResult { surface_op, .. } = b {
                *surface_op = "x".into();
            }
        }),
    ];
    assert!(matches!(
        violation(&log),
        Violation::MissingResult { call_seq: 1, .. }
    ));
}

#[test]
fn check_file_reports_bad_lines_by_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let mut text = String::from_utf8(jsonl(&sample_log())).unwrap();
    std::fs::write(&path, &text).unwrap();
    assert_eq!(check_file(&path).unwrap().events, 8);

    let good = text.clone();
    let torn = "{\"seq\":9,\"st";
    text.push_str(torn);
    std::fs::write(&path, &text).unwrap();
    // A torn last line is still a failure, named as what it is: a log that needs recovery.
    let v = check_file(&path).unwrap_err();
    assert_eq!(
        v,
        Violation::NeedsRecovery {
            torn_line: Some(9),
            torn_bytes: torn.len() as u64,
            open_calls: vec![],
        }
    );
    let message = v.to_string();
    assert!(message.contains("needs recovery"), "{v}");
    assert!(message.contains("torn tail at line 9"), "{v}");

    let mut lines: Vec<&str> = good.lines().collect();
    lines[2] = "not json";
    std::fs::write(&path, lines.join("\n")).unwrap();
    assert!(matches!(
        check_file(&path).unwrap_err(),
        Violation::Parse { line: 3, .. }
    ));

    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(4, "");
    std::fs::write(&path, lines.join("\n")).unwrap();
    assert!(matches!(
        check_file(&path).unwrap_err(),
        Violation::Parse { line: 5, .. }
    ));

    // Only the newline missing at the very end: a whole event.
    std::fs::write(&path, good.trim_end()).unwrap();
    check_file(&path).unwrap();
    std::fs::write(&path, "").unwrap();
    assert_eq!(check_file(&path).unwrap().events, 0);
    assert!(matches!(
        check_file(dir.path().join("missing.jsonl")).unwrap_err(),
        Violation::Unreadable { .. }
    ));
}

#[test]
fn a_violation_converts_to_the_invariant_error() {
    let v = check(&[call(1, 1, "a")]).unwrap_err();
    let e: SessionError = v.clone().into();
    assert_eq!(
        e,
        SessionError::Invariant {
            seq: 1,
            message: "tool/call `a` has no tool/result in step 1".into()
        }
    );
    // The seq is named once.
    assert_eq!(
        e.to_string(),
        format!("invariant violated at {v}"),
        "the error reads as the violation"
    );
}

#[test]
fn a_crashed_log_read_as_recovery_would_leave_it_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let mut bytes = jsonl(&[call(1, 1, "a"), call(2, 1, "b"), result(3, 1, "b", 2)]);
    bytes.extend_from_slice(b"{\"seq\":4,");
    std::fs::write(&path, &bytes).unwrap();
    assert!(check_file(&path).is_err());
    let events = replay::read_log(&path).unwrap();
    assert_eq!(events.len(), 4);
    check(&events).unwrap();
    // read_log never writes.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn check_file_tells_a_log_that_needs_recovery_from_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");

    // Calls of the last step left open: what a crash leaves.
    let mut events = sample_log();
    events.extend([call(9, 3, "x"), call(10, 3, "y"), result(11, 3, "y", 10)]);
    events.push(call(12, 3, "z"));
    std::fs::write(&path, jsonl(&events)).unwrap();
    let v = check_file(&path).unwrap_err();
    assert_eq!(
        v,
        Violation::NeedsRecovery {
            torn_line: None,
            torn_bytes: 0,
            open_calls: vec!["x".into(), "z".into()],
        }
    );
    assert!(
        v.to_string()
            .ends_with("2 call(s) left open without a result (`x`, `z`)"),
        "{v}"
    );
    // The in-memory checker knows no crash: for it, a call without a result is a violation.
    assert!(matches!(
        check(&events).unwrap_err(),
        Violation::MissingResult { call_seq: 9, .. }
    ));

    // Open calls and a torn tail of several garbage lines (zero blocks under `batch`).
    let mut bytes = jsonl(&events);
    let whole = bytes.len();
    bytes.extend_from_slice(&[0u8; 300]);
    bytes.push(b'\n');
    bytes.extend_from_slice(b"\"seq\":13,\"step\":3\n");
    bytes.extend_from_slice(&[0u8; 30]);
    std::fs::write(&path, &bytes).unwrap();
    let v = check_file(&path).unwrap_err();
    assert_eq!(
        v,
        Violation::NeedsRecovery {
            torn_line: Some(13),
            torn_bytes: (bytes.len() - whole) as u64,
            open_calls: vec!["x".into(), "z".into()],
        }
    );
    assert!(v.to_string().contains("torn tail at line 13"), "{v}");
    assert!(v.to_string().contains("and 2 call(s) left open"), "{v}");

    // A call left open in an earlier step is a real violation, torn tail or not.
    let mut broken = sample_log();
    broken.extend([call(9, 3, "x"), call(10, 4, "y"), result(11, 4, "y", 10)]);
    let mut bytes = jsonl(&broken);
    bytes.extend_from_slice(b"{\"seq\":12,");
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        check_file(&path).unwrap_err(),
        Violation::MissingResult { call_seq: 9, .. }
    ));

    // Garbage that a whole event follows is a bad line, named by the first of them.
    let log = sample_log();
    let mut bytes = jsonl(&log[..3]);
    bytes.extend_from_slice(&[0u8; 20]);
    bytes.push(b'\n');
    bytes.extend_from_slice(b"{\"seq\":4\n");
    bytes.extend_from_slice(&jsonl(&log[3..]));
    std::fs::write(&path, &bytes).unwrap();
    let v = check_file(&path).unwrap_err();
    assert!(matches!(v, Violation::Parse { line: 4, .. }), "{v}");
    assert!(v.to_string().starts_with("line 4"), "{v}");
}

#[test]
fn check_file_rejects_a_tool_call_without_its_parent_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let call = r#"{"seq":1,"step":1,"type":"tool/call","data":{"callId":"c1","name":"t","arguments":{},"agent":"main"}}"#;
    let result = r#"{"seq":2,"step":1,"type":"tool/result","data":{"callId":"c1","message":[]},"surfaceOp":"append","sourceEventSeqs":[1]}"#;
    std::fs::write(&path, format!("{call}\n{result}\n")).unwrap();
    let v = check_file(&path).unwrap_err();
    assert!(matches!(v, Violation::Parse { line: 1, .. }), "{v}");
    assert!(v.to_string().contains("missing field `parent`"), "{v}");
    // Even as the last line: whole JSON is never a torn tail.
    std::fs::write(&path, format!("{call}\n")).unwrap();
    let v = check_file(&path).unwrap_err();
    assert!(matches!(v, Violation::Parse { line: 1, .. }), "{v}");
    // With the key (null), the same log passes.
    let with_parent = call.replace(r#""agent":"main"}"#, r#""agent":"main","parent":null}"#);
    std::fs::write(&path, format!("{with_parent}\n{result}\n")).unwrap();
    assert_eq!(check_file(&path).unwrap().calls, 1);
}
