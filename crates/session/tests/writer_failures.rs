//! A failed commit answers every append of its group with the error and leaves no gap in the
//! seqs; a backend that cannot undo a failed write poisons the writer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::SessionEvent;
use dsh_session::check::check_file;
use dsh_session::{
    Durability, FileBackend, LogBackend, MemoryBackend, SessionError, SessionLog, WriterConfig,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Fails its `fail_on`-th commit (1-based) without touching the inner backend, either as a
/// recoverable I/O error or as a poisoning one.
struct FailOnCommit {
    inner: Box<dyn LogBackend>,
    commits: Arc<AtomicUsize>,
    fail_on: usize,
    poison: bool,
}

impl LogBackend for FailOnCommit {
    fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail_on {
            return Err(if self.poison {
                SessionError::Poisoned("injected: the write may be half done".into())
            } else {
                SessionError::Io {
                    context: "injected".into(),
                    message: "disk full".into(),
                }
            });
        }
        self.inner.commit(events, sync)
    }
    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        self.inner.read_all()
    }
    fn blocks(&self) -> bool {
        self.inner.blocks()
    }
    fn describe(&self) -> String {
        "failing".into()
    }
}

async fn writer(
    inner: Box<dyn LogBackend>,
    durability: Durability,
    fail_on: usize,
    poison: bool,
) -> (SessionLog, Arc<AtomicUsize>) {
    let commits = Arc::new(AtomicUsize::new(0));
    let backend = FailOnCommit {
        inner,
        commits: commits.clone(),
        fail_on,
        poison,
    };
    let config = WriterConfig {
        durability,
        next_seq: 1,
    };
    (
        SessionLog::spawn(Box::new(backend), config, None)
            .await
            .unwrap(),
        commits,
    )
}

/// Sends `n` appends at once: on a current-thread runtime they all reach the mailbox before
/// the writer runs, so they form one group.
async fn group(log: &SessionLog, tag: &str, n: usize) -> Vec<Result<u64, SessionError>> {
    let pending: Vec<_> = (0..n)
        .map(|i| log.send(1, user_body(&format!("{tag}{i}"), "c")))
        .collect();
    let mut out = Vec::new();
    for p in pending {
        out.push(p.await);
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_group_commit_answers_every_append_and_leaves_no_gap() {
    let (log, commits) = writer(
        Box::new(MemoryBackend::default()),
        Durability::Batch,
        2,
        false,
    )
    .await;
    let first = group(&log, "a", 3).await;
    assert_eq!(
        first.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let failed = group(&log, "b", 4).await;
    assert_eq!(
        commits.load(Ordering::SeqCst),
        2,
        "the four shared one commit"
    );
    for r in &failed {
        assert!(matches!(r, Err(SessionError::Io { .. })), "{r:?}");
    }
    // The failed group's seqs are given out again: no gap.
    let after = group(&log, "c", 2).await;
    assert_eq!(
        after.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        vec![4, 5]
    );
    // The next flush reports the failure once; the one after it finds the log healthy.
    assert!(matches!(log.flush().await, Err(SessionError::Io { .. })));
    log.flush().await.unwrap();
    let events = log.snapshot().await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    assert_eq!(events[3].body, user_body("c0", "c"));
    log.close().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn under_always_a_failed_append_gives_its_seq_back() {
    let (log, _) = writer(
        Box::new(MemoryBackend::default()),
        Durability::Always,
        2,
        false,
    )
    .await;
    assert_eq!(log.append(1, user_body("a", "c")).await.unwrap(), 1);
    assert!(log.append(1, user_body("b", "c")).await.is_err());
    assert_eq!(log.append(1, user_body("c", "c")).await.unwrap(), 2);
    // Closing reports the failure no flush has reported yet.
    assert!(matches!(log.close().await, Err(SessionError::Io { .. })));
}

#[tokio::test(flavor = "current_thread")]
async fn a_poisoning_failure_refuses_everything_after_it() {
    let (log, _) = writer(
        Box::new(MemoryBackend::default()),
        Durability::Batch,
        2,
        true,
    )
    .await;
    group(&log, "a", 2).await;
    let failed = group(&log, "b", 3).await;
    assert!(
        failed
            .iter()
            .all(|r| matches!(r, Err(SessionError::Poisoned(_))))
    );
    let later = log.append(1, user_body("c", "c")).await;
    assert!(matches!(later, Err(SessionError::Poisoned(_))), "{later:?}");
    assert!(matches!(log.flush().await, Err(SessionError::Poisoned(_))));
    assert!(matches!(log.close().await, Err(SessionError::Poisoned(_))));
}

#[tokio::test(flavor = "current_thread")]
async fn a_flush_waiting_on_a_failed_group_reports_the_failure() {
    let (log, _) = writer(
        Box::new(MemoryBackend::default()),
        Durability::Batch,
        1,
        false,
    )
    .await;
    let pending = log.send(1, user_body("a", "c"));
    let flushed = log.flush().await;
    assert!(
        matches!(flushed, Err(SessionError::Io { .. })),
        "{flushed:?}"
    );
    assert!(pending.await.is_err());
    log.flush().await.unwrap();
    log.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_log_with_a_failed_group_reopens_clean_and_contiguous() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let (file, _) = FileBackend::open(&path).unwrap();
    let (log, _) = writer(Box::new(file), Durability::Batch, 3, false).await;
    for i in 0..6 {
        let r = log.append(1, user_body(&format!("m{i}"), "c")).await;
        assert_eq!(r.is_err(), i == 2, "append {i}: {r:?}");
    }
    assert!(log.close().await.is_err());
    let report = check_file(&path).unwrap();
    assert_eq!(report.events, 5);
    let (_, rec) = FileBackend::open(&path).unwrap();
    assert!(!rec.repaired());
    assert_eq!(rec.next_seq, 6);
}

/// Holds every commit for a while, so a test can act while one is in flight.
struct Slow;

impl LogBackend for Slow {
    fn commit(&mut self, _events: Vec<SessionEvent>, _sync: bool) -> Result<(), SessionError> {
        std::thread::sleep(std::time::Duration::from_millis(300));
        Ok(())
    }
    fn read_all(&self) -> Result<Vec<SessionEvent>, SessionError> {
        Ok(Vec::new())
    }
    fn describe(&self) -> String {
        "slow".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_leaves_no_appender_waiting() {
    let config = WriterConfig {
        durability: Durability::Batch,
        next_seq: 1,
    };
    let log = SessionLog::spawn(Box::new(Slow), config, None)
        .await
        .unwrap();
    let in_flight = log.send(1, user_body("a", "c"));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let queued = log.send(1, user_body("b", "c"));
    log.actor_cell().kill();
    let answers = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        (in_flight.await, queued.await)
    })
    .await
    .expect("every append is answered");
    assert!(answers.0.is_err(), "{:?}", answers.0);
    assert!(answers.1.is_err(), "{:?}", answers.1);
    let later = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        log.append(1, user_body("c", "c")),
    )
    .await
    .expect("a later append is answered");
    assert!(later.is_err());
}

/// A `tool/result` that cannot be recorded leaves its call open. Nothing may be appended
/// after it (a later step's events would leave the call unpairable in its own step), and
/// reopening the log closes the call as `ABORTED`, so the log passes the checker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tool_result_poisons_the_writer_and_reopening_closes_its_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let (file, _) = FileBackend::open(&path).unwrap();
    // Commit 1: the call; commit 2: its result, which fails.
    let (log, _) = writer(Box::new(file), Durability::Batch, 2, false).await;
    assert_eq!(log.append(1, call_body("c1")).await.unwrap(), 1);
    let lost = log.append(1, result_body("c1", 1)).await;
    assert!(matches!(lost, Err(SessionError::Io { .. })), "{lost:?}");
    // The next step's call is refused, not written after the open call.
    let later = log.append(2, call_body("c2")).await;
    match later {
        Err(SessionError::Poisoned(why)) => assert!(why.contains("tool/result"), "{why}"),
        other => panic!("a later append must be refused: {other:?}"),
    }
    assert!(log.close().await.is_err());
    let (_, rec) = FileBackend::open(&path).unwrap();
    assert_eq!(rec.closed_calls, vec!["c1".to_string()]);
    let report = check_file(&path).unwrap();
    assert_eq!(report.events, 2);
}

/// A failed group that held only calls or user messages does not poison: those leave
/// nothing open, and the session can go on.
#[tokio::test(flavor = "current_thread")]
async fn a_lost_tool_call_does_not_poison() {
    let (log, _) = writer(
        Box::new(MemoryBackend::default()),
        Durability::Batch,
        1,
        false,
    )
    .await;
    assert!(log.append(1, call_body("c1")).await.is_err());
    assert_eq!(log.append(1, call_body("c2")).await.unwrap(), 1);
    assert!(matches!(log.flush().await, Err(SessionError::Io { .. })));
    log.close().await.unwrap();
}
