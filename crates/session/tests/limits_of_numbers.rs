//! SPEC.md's "Limits of numbers": `seq` and `step` are at most 2^63 − 1. The writer refuses to
//! pass them (an error, nothing written), readers refuse a log that does, and a session at the
//! last step refuses the next one instead of wrapping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::event::{MAX_SEQ, MAX_STEP};
use dsh_core::{ToolCall, ToolRegistry};
use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh_session::check::{Violation, check, check_file};
use dsh_session::replay::read_log;
use dsh_session::{Durability, FileBackend, MemoryBackend, SessionError, SessionLog, WriterConfig};
use std::sync::Arc;

#[test]
fn a_log_past_the_largest_step_is_refused_by_every_reader_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    for step in [MAX_STEP + 1, u64::MAX - 1, u64::MAX] {
        let bytes = jsonl(&[call(1, step, "a"), result(2, step, "a", 1)]);
        std::fs::write(&path, &bytes).unwrap();
        let v = check_file(&path).unwrap_err();
        assert!(
            matches!(v, Violation::StepTooLarge { seq: 1, step: s } if s == step),
            "{v:?}"
        );
        assert!(v.to_string().contains("2^63"), "{v}");
        let err = FileBackend::open(&path).unwrap_err();
        assert!(err.to_string().contains("2^63"), "{err}");
        assert!(read_log(&path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
    assert!(check(&[user(1, MAX_STEP + 1, "x")]).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_at_the_largest_step_is_whole_and_takes_no_step_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let bytes = jsonl(&[call(1, MAX_STEP, "a"), result(2, MAX_STEP, "a", 1)]);
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(check_file(&path).unwrap().events, 2);

    let (log, recovery) = SessionLog::open_file(&path, Durability::Batch, None)
        .await
        .unwrap();
    assert_eq!(recovery.next_seq, 3);
    let err = log
        .append(MAX_STEP + 1, user_body("past the end", "a"))
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Refused(_)), "{err}");
    assert!(err.to_string().contains("step"), "{err}");
    // Refusing an event that is not a result leaves the writer usable.
    assert_eq!(
        log.append(MAX_STEP, user_body("still here", "a"))
            .await
            .unwrap(),
        3
    );
    // Like any failed append, the refusal is reported again by the next flush (or close).
    assert!(matches!(log.close().await, Err(SessionError::Refused(_))));
    assert_eq!(check_file(&path).unwrap().events, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_refuses_to_pass_the_largest_seq() {
    let log = SessionLog::spawn(
        Box::new(MemoryBackend::default()),
        WriterConfig {
            durability: Durability::None,
            next_seq: MAX_SEQ,
        },
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        log.append(1, user_body("last", "c")).await.unwrap(),
        MAX_SEQ
    );
    let err = log
        .append(1, user_body("one too many", "c"))
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Refused(_)), "{err}");
    assert!(err.to_string().contains("seq"), "{err}");
    assert_eq!(log.snapshot().await.unwrap().len(), 1);
    let _ = log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_writer_refuses_poisons_it_like_a_failed_result_commit() {
    let log = SessionLog::memory().await.unwrap();
    assert_eq!(log.append(MAX_STEP, call_body("a")).await.unwrap(), 1);
    // A step past the limit on a result: its call would stay open under later events.
    let err = log
        .append(MAX_STEP + 1, result_body("a", 1))
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Refused(_)), "{err}");
    let after = log.append(MAX_STEP, user_body("x", "a")).await.unwrap_err();
    assert!(matches!(after, SessionError::Poisoned(_)), "{after}");
    assert_eq!(log.snapshot().await.unwrap().len(), 1, "only the call");
    let _ = log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_at_the_largest_step_refuses_the_next_step_instead_of_wrapping() {
    let harness = HarnessBuilder::new(Arc::new(ToolRegistry::new()))
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let config = SchedulerConfig {
        first_step: MAX_STEP,
        ..SchedulerConfig::default()
    };
    let session = harness.open(log.clone(), config, None).await.unwrap();
    let step = |id: &str| StepRequest::new(vec![ToolCall::new(id, "nope", serde_json::json!({}))]);
    assert_eq!(session.run_step(step("a")).await.unwrap().step, MAX_STEP);
    let err = session.run_step(step("b")).await.unwrap_err();
    assert!(err.to_string().contains("2^63"), "{err}");
    // Nothing of the refused step is in the log, and what is there is whole.
    let events = log.snapshot().await.unwrap();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.step == MAX_STEP));
    check(&events).unwrap();
    harness.shutdown().await;
}
