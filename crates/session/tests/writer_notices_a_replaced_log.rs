//! A log file replaced or removed under a running writer: the next commit fails loudly and the
//! writer is poisoned, instead of appending to a file nobody can see any more.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use dsh_session::check::check_file;
use dsh_session::{Durability, SessionError, SessionLog};

async fn replaced_or_removed(replace: bool, durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.jsonl");
    let (log, _) = SessionLog::open_file(&path, durability, None)
        .await
        .unwrap();
    assert_eq!(log.append(1, user_body("before", "c")).await.unwrap(), 1);
    let kept = dir.path().join("kept.jsonl");
    if replace {
        // What an agent (or an editor saving through a temporary file) does.
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, "someone else's file\n").unwrap();
        std::fs::rename(&path, &kept).unwrap();
        std::fs::rename(&other, &path).unwrap();
    } else {
        std::fs::hard_link(&path, &kept).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
    let err = log.append(1, user_body("after", "c")).await.unwrap_err();
    assert!(matches!(err, SessionError::Poisoned(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string())
            && message.contains(if replace { "replaced" } else { "removed" }),
        "{message}"
    );
    // Poisoned: every later append fails too, and nothing reached either file.
    assert!(matches!(
        log.append(1, user_body("later", "c")).await,
        Err(SessionError::Poisoned(_))
    ));
    let _ = log.close().await;
    assert_eq!(check_file(&kept).unwrap().events, 1, "the old inode");
    if replace {
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "someone else's file\n"
        );
    } else {
        assert!(!path.exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_replaced_under_the_writer_fails_the_next_append() {
    replaced_or_removed(true, Durability::Batch).await;
    replaced_or_removed(true, Durability::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_removed_under_the_writer_fails_the_next_append() {
    replaced_or_removed(false, Durability::Batch).await;
    replaced_or_removed(false, Durability::Always).await;
}
