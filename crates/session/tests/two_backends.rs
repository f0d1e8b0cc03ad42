//! One suite, two backends: recovery, pairing and the refusal of broken logs behave the same
//! on a JSON Lines file and on a PostgreSQL session, and both hold the same bytes.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::{ErrorCode, EventBody, SessionEvent};
use dsh_session::check::{Violation, check};
use dsh_session::postgres::{LeaseOptions, PgStore};
use dsh_session::{Durability, Recovery, SessionError, SessionLog};
use std::path::PathBuf;
use std::time::Duration;

/// Where a test's session lives.
enum Store {
    File(tempfile::TempDir),
    Postgres(String),
}

impl Store {
    fn both() -> Vec<Store> {
        vec![
            Store::File(tempfile::tempdir().unwrap()),
            Store::Postgres(pg::url()),
        ]
    }

    fn name(&self) -> &'static str {
        match self {
            Store::File(_) => "file",
            Store::Postgres(_) => "postgres",
        }
    }

    fn path(&self, id: &str) -> PathBuf {
        match self {
            Store::File(dir) => dir.path().join(format!("{id}.jsonl")),
            Store::Postgres(_) => unreachable!(),
        }
    }

    fn lease() -> LeaseOptions {
        LeaseOptions {
            wait: Duration::ZERO,
            ..LeaseOptions::with_lease(Duration::from_secs(5))
        }
    }

    async fn open(&self, id: &str) -> Result<(SessionLog, Recovery), SessionError> {
        match self {
            Store::File(_) => SessionLog::open_file(self.path(id), Durability::Batch, None).await,
            Store::Postgres(url) => {
                SessionLog::open_postgres(url, id, Durability::Batch, Store::lease(), None).await
            }
        }
    }

    /// Stores `lines` as the session's log, as they are (a damaged log, for the refusals).
    async fn seed(&self, id: &str, lines: &[String]) {
        match self {
            Store::File(_) => {
                let mut bytes = lines.join("\n");
                bytes.push('\n');
                std::fs::write(self.path(id), bytes).unwrap();
            }
            Store::Postgres(url) => {
                PgStore::connect(url, false).await.unwrap();
                let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(conn);
                client
                    .execute(
                        "INSERT INTO dsh_sessions (id, next_seq) VALUES ($1, $2)",
                        &[&id, &(lines.len() as i64 + 1)],
                    )
                    .await
                    .unwrap();
                for (i, line) in lines.iter().enumerate() {
                    client
                        .execute(
                            "INSERT INTO dsh_events (session_id, seq, step, epoch, line)
                             VALUES ($1, $2, 1, 0, $3)",
                            &[&id, &(i as i64 + 1), line],
                        )
                        .await
                        .unwrap();
                }
            }
        }
    }

    /// The stored text of the session's log, line by line.
    async fn lines(&self, id: &str) -> Vec<String> {
        match self {
            Store::File(_) => std::fs::read_to_string(self.path(id))
                .unwrap()
                .lines()
                .map(String::from)
                .collect(),
            Store::Postgres(url) => {
                let store = PgStore::connect(url, false).await.unwrap();
                let mut out = Vec::new();
                store
                    .for_each_line(id, |_, line| {
                        out.push(line);
                        Ok(())
                    })
                    .await
                    .unwrap();
                out
            }
        }
    }
}

fn lines_of(events: &[SessionEvent]) -> Vec<String> {
    events.iter().map(SessionEvent::to_json_line).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_calls_are_closed_as_aborted_in_their_own_step_and_both_stores_hold_the_same_bytes() {
    let mut stored = Vec::new();
    for store in Store::both() {
        let id = pg::session_id("aborted");
        // Step 3 stopped with two calls running (one had a code-mode sub-call), one answered.
        let mut events = sample_log();
        events.extend([
            call(9, 3, "x"),
            call(10, 3, "y"),
            call(11, 3, "z"),
            dispatch(12, 3, "x.1", "x"),
            result(13, 3, "y", 10),
        ]);
        store.seed(&id, &lines_of(&events)).await;
        let (log, rec) = store.open(&id).await.unwrap();
        let name = store.name();
        assert_eq!(
            rec.closed_calls,
            vec!["x".to_string(), "z".to_string()],
            "{name}"
        );
        assert_eq!(rec.events_read, 13, "{name}");
        assert_eq!((rec.next_seq, rec.next_step), (16, 4), "{name}");
        let all = log.snapshot().await.unwrap();
        assert_eq!(all.len(), 15, "{name}");
        for (event, (call_seq, id)) in all[13..].iter().zip([(9, "x"), (11, "z")]) {
            assert_eq!(event.step, 3);
            let EventBody::ToolResult {
                data,
                source_event_seqs,
                ..
            } = &event.body
            else {
                panic!("{name}: not a result: {event:?}");
            };
            assert_eq!(data.call_id, id);
            assert_eq!(data.error.as_ref().unwrap().code, ErrorCode::Aborted);
            assert_eq!(source_event_seqs, &vec![call_seq]);
        }
        check(&all).unwrap();
        // The session continues: next seq, next step.
        let c = log.append(rec.next_step, call_body("n")).await.unwrap();
        assert_eq!(c, 16, "{name}");
        log.append(rec.next_step, result_body("n", c))
            .await
            .unwrap();
        log.close().await.unwrap();
        // A second open finds nothing left to repair.
        let (log, again) = store.open(&id).await.unwrap();
        assert!(again.closed_calls.is_empty(), "{name}: {again:?}");
        assert_eq!((again.next_seq, again.next_step), (18, 5), "{name}");
        log.close().await.unwrap();
        stored.push(store.lines(&id).await);
    }
    assert_eq!(stored[0].len(), 17);
    // The events appended after the reopen carry their time (SPEC's amendment "Time"), which
    // differs between the two runs: compare byte for byte apart from it.
    for lines in &stored {
        assert!(
            lines[15..].iter().all(|l| l.contains(",\"at\":")),
            "{lines:?}"
        );
    }
    let stored: Vec<Vec<String>> = stored
        .iter()
        .map(|lines| lines.iter().map(|l| without_at(l)).collect())
        .collect();
    assert_eq!(
        stored[0], stored[1],
        "the file and the database hold other bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_continues_with_the_next_seq_and_step() {
    for store in Store::both() {
        let name = store.name();
        let id = pg::session_id("reopen");
        let (log, rec) = store.open(&id).await.unwrap();
        assert_eq!((rec.next_seq, rec.next_step), (1, 1), "{name}");
        let c = log.append(1, call_body("a")).await.unwrap();
        log.append(1, result_body("a", c)).await.unwrap();
        assert_eq!(log.append(2, call_body("b")).await.unwrap(), 3);
        log.close().await.unwrap();

        let (log, rec) = store.open(&id).await.unwrap();
        assert_eq!(rec.closed_calls, vec!["b".to_string()], "{name}");
        assert_eq!((rec.next_seq, rec.next_step), (5, 3), "{name}");
        let c = log.append(3, call_body("c")).await.unwrap();
        assert_eq!(c, 5, "{name}");
        log.append(3, result_body("c", c)).await.unwrap();
        let all = log.snapshot().await.unwrap();
        log.close().await.unwrap();
        let report = check(&all).unwrap();
        assert_eq!(
            (report.events, report.steps, report.calls),
            (6, 3, 3),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_events_that_break_an_invariant_are_refused_and_left_as_they_are() {
    for store in Store::both() {
        let name = store.name();
        let id = pg::session_id("invariant");
        // A result whose sourceEventSeqs names itself.
        let lines = vec![
            r#"{"seq":1,"step":1,"type":"tool/call","data":{"callId":"a","name":"read_file","arguments":{"path":"a"},"agent":"main","parent":null}}"#.to_string(),
            r#"{"seq":2,"step":1,"type":"tool/result","data":{"callId":"a","message":[{"type":"text","text":"ok"}]},"surfaceOp":"append","sourceEventSeqs":[2]}"#.to_string(),
        ];
        store.seed(&id, &lines).await;
        let err = store.open(&id).await.unwrap_err();
        assert!(
            matches!(&err, SessionError::Invariant { seq: 2, message } if message.contains("seq 2")),
            "{name}: {err}"
        );
        assert_eq!(store.lines(&id).await, lines, "{name}: the log was changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_a_user_message_follows_is_refused_not_closed() {
    for store in Store::both() {
        let name = store.name();
        let id = pg::session_id("pairing");
        let events = vec![call(1, 1, "a"), user(2, 1, "hi")];
        store.seed(&id, &lines_of(&events)).await;
        let err = store.open(&id).await.unwrap_err();
        assert!(
            matches!(err, SessionError::Invariant { .. }),
            "{name}: {err}"
        );
        assert!(
            matches!(
                check(&events),
                Err(Violation::MissingResult { call_seq: 1, .. })
            ),
            "{name}"
        );
        assert_eq!(store.lines(&id).await, lines_of(&events), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_gap_and_a_line_that_is_no_event_are_corruption_naming_the_line() {
    for store in Store::both() {
        let name = store.name();
        let mut events = sample_log();
        events[4].seq = 6;
        let id = pg::session_id("gap");
        store.seed(&id, &lines_of(&events)).await;
        let err = store.open(&id).await.unwrap_err();
        assert!(
            matches!(&err, SessionError::Corrupt { line: 5, reason } if reason.contains("seq 6")),
            "{name}: {err}"
        );
        let mut lines = lines_of(&sample_log());
        lines[3] = r#"{"seq":4,"step":2,"type":"tool/unknown","data":{}}"#.into();
        let id = pg::session_id("garbage");
        store.seed(&id, &lines).await;
        let err = store.open(&id).await.unwrap_err();
        assert!(
            matches!(err, SessionError::Corrupt { line: 4, .. }),
            "{name}: {err}"
        );
        assert_eq!(store.lines(&id).await, lines, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_has_one_writer_at_a_time() {
    for store in Store::both() {
        let name = store.name();
        let id = pg::session_id("one-writer");
        let (first, _) = store.open(&id).await.unwrap();
        first.append(1, user_body("a", "c")).await.unwrap();
        let second = store.open(&id).await;
        match (&store, &second) {
            (Store::File(_), Err(SessionError::InUse(_))) => {}
            (Store::Postgres(_), Err(e @ SessionError::Leased { owner, .. })) => {
                assert!(owner.contains(&std::process::id().to_string()), "{e}");
                let shown = e.to_string();
                assert!(
                    shown.contains("in use by") && shown.contains("lease until"),
                    "{shown}"
                );
            }
            (_, other) => panic!("{name}: a second writer was let in: {other:?}"),
        }
        first.close().await.unwrap();
        let (again, rec) = store.open(&id).await.unwrap();
        assert_eq!(rec.next_seq, 2, "{name}: the lease goes with the writer");
        again.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_dropped_without_close_lets_go_of_its_session() {
    for store in Store::both() {
        let name = store.name();
        let id = pg::session_id("dropped");
        let (log, _) = store.open(&id).await.unwrap();
        let writer = log.actor_cell();
        log.append(1, user_body("a", "c")).await.unwrap();
        drop(log);
        // The writer stops and lets go of the session (a file's lock, a store's lease) at once.
        let mut reopened = None;
        for _ in 0..50 {
            match store.open(&id).await {
                Ok((log, _)) => {
                    reopened = Some(log);
                    break;
                }
                Err(SessionError::InUse(_) | SessionError::Leased { .. }) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{name}: {e}"),
            }
        }
        let log = reopened.unwrap_or_else(|| panic!("{name}: the dropped log still holds it"));
        assert_eq!(writer.get_status(), ractor::ActorStatus::Stopped, "{name}");
        assert_eq!(log.snapshot().await.unwrap().len(), 1, "{name}");
        log.close().await.unwrap();
    }
}

/// `line` without its top-level `"at":N` (the only place a number follows `,"at":` in these
/// test events).
fn without_at(line: &str) -> String {
    match line.find(",\"at\":") {
        Some(start) => {
            let rest = &line[start + 6..];
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            format!("{}{}", &line[..start], &rest[digits..])
        }
        None => line.to_string(),
    }
}
