//! The writer assigns seq from 1, +1, with no gaps, in the order appends are sent, and keeps
//! every event type with its envelope, in memory and in a file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_core::{EventBody, SessionEvent};
use dsh_session::{Durability, SessionLog};
use serde_json::Value;

async fn append_every_type(log: &SessionLog) -> Vec<u64> {
    let c = log.append(1, call_body("c1")).await.unwrap();
    let d = log.append(1, dispatch_body("c1.1", "c1")).await.unwrap();
    let r = log.append(1, result_body("c1", c)).await.unwrap();
    let u = log.append(1, user_body("context", "c1")).await.unwrap();
    vec![c, d, r, u]
}

#[tokio::test]
async fn seqs_start_at_one_and_every_event_type_is_kept() {
    let log = SessionLog::memory().await.unwrap();
    assert_eq!(append_every_type(&log).await, vec![1, 2, 3, 4]);
    let events = log.snapshot().await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.body.type_str()).collect();
    assert_eq!(
        types,
        [
            "tool/call",
            "tool/code-dispatch",
            "tool/result",
            "user/message"
        ]
    );
    let EventBody::ToolResult {
        surface_op,
        source_event_seqs,
        ..
    } = &events[2].body
    else {
        panic!("not a result: {:?}", events[2]);
    };
    assert_eq!(surface_op, "append");
    assert_eq!(source_event_seqs, &vec![1]);
    log.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appenders_get_distinct_contiguous_seqs() {
    for durability in [Durability::Always, Durability::Batch, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let (log, _) = SessionLog::open_file(&path, durability, None)
            .await
            .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|t| {
                let log = log.clone();
                tokio::spawn(async move {
                    let mut seqs = Vec::new();
                    for i in 0..25 {
                        let seq = log
                            .append(1, user_body(&format!("{t}-{i}"), "c"))
                            .await
                            .unwrap();
                        seqs.push((seq, format!("{t}-{i}")));
                    }
                    seqs
                })
            })
            .collect();
        let mut acked = Vec::new();
        for t in tasks {
            acked.extend(t.await.unwrap());
        }
        acked.sort();
        let seqs: Vec<u64> = acked.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=200).collect::<Vec<_>>(), "{durability:?}");
        log.close().await.unwrap();
        // Each acknowledged seq holds the event its appender sent.
        let on_disk = dsh_session::replay::read_log(&path).unwrap();
        for (seq, text) in &acked {
            let EventBody::UserMessage(m) = &on_disk[*seq as usize - 1].body else {
                panic!("seq {seq} is not the user message");
            };
            assert_eq!(&m.content, text, "{durability:?} seq {seq}");
        }
    }
}

#[tokio::test]
async fn the_order_appends_are_sent_in_is_the_order_of_their_seqs() {
    let log = SessionLog::memory().await.unwrap();
    let pending: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| log.send(3, call_body(id)))
        .collect();
    // Awaited in reverse: the seqs were fixed when the appends were sent.
    let mut seqs = Vec::new();
    for p in pending.into_iter().rev() {
        seqs.push(p.await.unwrap());
    }
    assert_eq!(seqs, vec![4, 3, 2, 1]);
    let ids: Vec<String> = log
        .snapshot()
        .await
        .unwrap()
        .iter()
        .map(|e| e.call_id().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    log.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_log_holds_one_json_event_per_line_with_the_spec_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let (log, recovery) = SessionLog::open_file(&path, Durability::Batch, None)
        .await
        .unwrap();
    assert_eq!(recovery.events_read, 0);
    append_every_type(&log).await;
    let snapshot = log.snapshot().await.unwrap();
    log.close().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    for (i, line) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["seq"], i as u64 + 1);
        assert_eq!(v["step"], 1);
        assert!(v["type"].is_string() && v["data"].is_object(), "{line}");
        assert_eq!(SessionEvent::from_json_line(line).unwrap(), snapshot[i]);
    }
    let result: Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(result["surfaceOp"], "append");
    assert_eq!(result["sourceEventSeqs"], serde_json::json!([1]));
}

#[tokio::test]
async fn appends_after_close_are_refused() {
    let log = SessionLog::memory().await.unwrap();
    log.append(1, user_body("x", "c")).await.unwrap();
    log.close().await.unwrap();
    assert!(log.append(1, user_body("y", "c")).await.is_err());
}
