//! The fs-intent monitor and the `fs/*-intent` hook points: read-before-edit with its two
//! refusals, consecutive edits, per-agent records, extra handlers, and failing closed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use async_trait::async_trait;
use common::{Env, err, ok};
use dsh_core::ErrorCode;
use dsh_tool_fs::{FsIntent, FsIntentHandler, FsOp, IntentVerdict};
use serde_json::json;
use std::sync::{Arc, Mutex};

fn edit(path: &str, old: &str, new: &str) -> serde_json::Value {
    json!({"path": path, "old_string": old, "new_string": new})
}

fn patch(body: &str) -> serde_json::Value {
    json!({ "input": format!("*** Begin Patch\n{body}\n*** End Patch") })
}

#[tokio::test]
async fn changing_a_file_never_read_is_denied() {
    let env = Env::new().await;
    env.put("f.txt", "one\n");
    let msg = err(
        &env.call("edit_file", edit("f.txt", "one", "two")).await,
        ErrorCode::Denied,
    );
    assert_eq!(
        msg,
        "`f.txt` has not been read by agent `main`; read it with read_file before changing it \
         (fs/edit-intent denied by `read-before-edit`)"
    );
    let msg = err(
        &env.call("write_file", json!({"path": "f.txt", "content": "x"}))
            .await,
        ErrorCode::Denied,
    );
    assert!(msg.contains("has not been read"), "{msg}");
    assert!(msg.contains("fs/write-intent"), "{msg}");
    let msg = err(
        &env.call("apply_patch", patch("*** Delete File: f.txt"))
            .await,
        ErrorCode::Denied,
    );
    assert!(
        msg.starts_with("apply_patch changed nothing: `f.txt` has not been read"),
        "{msg}"
    );
    assert_eq!(env.get("f.txt"), "one\n");
    env.close().await;
}

#[tokio::test]
async fn changing_a_file_changed_since_read_is_denied_until_read_again() {
    let env = Env::new().await;
    env.put("f.txt", "one\n");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    env.put("f.txt", "one\nmodified elsewhere\n");
    let msg = err(
        &env.call("edit_file", edit("f.txt", "one", "two")).await,
        ErrorCode::Denied,
    );
    assert_eq!(
        msg,
        "`f.txt` has changed since agent `main` last read it; read it again before changing it \
         (fs/edit-intent denied by `read-before-edit`)"
    );
    let msg = err(
        &env.call(
            "apply_patch",
            patch("*** Update File: f.txt\n@@\n-one\n+two"),
        )
        .await,
        ErrorCode::Denied,
    );
    assert!(msg.contains("has changed since"), "{msg}");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    ok(&env.call("edit_file", edit("f.txt", "one", "two")).await);
    assert_eq!(env.get("f.txt"), "two\nmodified elsewhere\n");
    env.close().await;
}

#[tokio::test]
async fn consecutive_edits_need_one_read() {
    let env = Env::new().await;
    env.put("f.txt", "a b c\n");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    ok(&env.call("edit_file", edit("f.txt", "a", "A")).await);
    ok(&env.call("edit_file", edit("f.txt", "b", "B")).await);
    ok(&env
        .call(
            "apply_patch",
            patch("*** Update File: f.txt\n@@\n-A B c\n+A B C"),
        )
        .await);
    ok(&env
        .call(
            "write_file",
            json!({"path": "f.txt", "content": "all new\n"}),
        )
        .await);
    ok(&env.call("edit_file", edit("f.txt", "new", "newer")).await);
    assert_eq!(env.get("f.txt"), "all newer\n");
    env.close().await;
}

#[tokio::test]
async fn new_files_need_no_read_and_deleted_ones_start_over() {
    let env = Env::new().await;
    ok(&env
        .call("write_file", json!({"path": "new.txt", "content": "1\n"}))
        .await);
    ok(&env.call("edit_file", edit("new.txt", "1", "2")).await);
    ok(&env
        .call("apply_patch", patch("*** Add File: other.txt\n+x"))
        .await);
    ok(&env
        .call("apply_patch", patch("*** Delete File: other.txt"))
        .await);
    ok(&env
        .call(
            "write_file",
            json!({"path": "other.txt", "content": "again\n"}),
        )
        .await);
    assert_eq!(env.get("other.txt"), "again\n");
    env.close().await;
}

#[tokio::test]
async fn reads_are_recorded_per_agent() {
    let env = Env::new().await;
    env.put("f.txt", "x\n");
    ok(&env
        .call_as("main", "read_file", json!({"path": "f.txt"}))
        .await);
    let msg = err(
        &env.call_as("helper", "edit_file", edit("f.txt", "x", "y"))
            .await,
        ErrorCode::Denied,
    );
    assert!(msg.contains("has not been read by agent `helper`"), "{msg}");
    ok(&env
        .call_as("helper", "read_file", json!({"path": "f.txt"}))
        .await);
    ok(&env
        .call_as("helper", "edit_file", edit("f.txt", "x", "y"))
        .await);
    // main's record is now stale: the helper changed the file.
    let msg = err(
        &env.call_as("main", "edit_file", edit("f.txt", "y", "z"))
            .await,
        ErrorCode::Denied,
    );
    assert!(msg.contains("has changed since agent `main`"), "{msg}");
    env.close().await;
}

#[tokio::test]
async fn a_symlinked_read_counts_for_the_real_file() {
    let env = Env::new().await;
    env.put("real/f.txt", "x\n");
    env.symlink("real", "alias");
    ok(&env.call("read_file", json!({"path": "alias/f.txt"})).await);
    ok(&env.call("edit_file", edit("real/f.txt", "x", "y")).await);
    assert_eq!(env.get("real/f.txt"), "y\n");
    env.close().await;
}

/// Records every intent it sees; refuses paths ending in `.lock`.
#[derive(Default, Clone)]
struct Recorder {
    seen: Arc<Mutex<Vec<FsIntent>>>,
}

#[async_trait]
impl FsIntentHandler for Recorder {
    fn name(&self) -> &str {
        "no-lockfiles"
    }
    async fn check(&self, intent: &FsIntent) -> IntentVerdict {
        self.seen.lock().unwrap().push(intent.clone());
        if intent.path.ends_with(".lock") {
            IntentVerdict::Deny("lock files are generated; do not edit them".into())
        } else {
            IntentVerdict::Allow
        }
    }
}

#[tokio::test]
async fn extra_handlers_see_every_intent_and_may_refuse() {
    let env = Env::new().await;
    let recorder = Recorder::default();
    env.toolset.on_intent(recorder.clone());
    env.put("a.txt", "a\n");
    ok(&env.call("read_file", json!({"path": "a.txt"})).await);
    ok(&env
        .call("write_file", json!({"path": "n.txt", "content": "n"}))
        .await);
    ok(&env.call("edit_file", edit("a.txt", "a", "b")).await);
    ok(&env
        .call("apply_patch", patch("*** Delete File: a.txt"))
        .await);
    let msg = err(
        &env.call("write_file", json!({"path": "Cargo.lock", "content": "x"}))
            .await,
        ErrorCode::Denied,
    );
    assert_eq!(
        msg,
        "lock files are generated; do not edit them (fs/write-intent denied by `no-lockfiles`)"
    );
    assert!(!env.exists("Cargo.lock"));
    let seen: Vec<(FsOp, &'static str, String, bool)> = recorder
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i.op,
                i.kind().hook_point(),
                i.path.clone(),
                i.current.is_some(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (FsOp::Create, "fs/write-intent", "n.txt".into(), false),
            (FsOp::Edit, "fs/edit-intent", "a.txt".into(), true),
            (FsOp::Delete, "fs/write-intent", "a.txt".into(), true),
            (FsOp::Create, "fs/write-intent", "Cargo.lock".into(), false),
        ]
    );
    env.close().await;
}

struct Panics;

#[async_trait]
impl FsIntentHandler for Panics {
    fn name(&self) -> &str {
        "buggy"
    }
    async fn check(&self, _intent: &FsIntent) -> IntentVerdict {
        panic!("handler bug")
    }
}

#[tokio::test]
async fn a_panicking_handler_refuses() {
    let env = Env::new().await;
    env.toolset.on_intent(Panics);
    let msg = err(
        &env.call("write_file", json!({"path": "n.txt", "content": "n"}))
            .await,
        ErrorCode::Denied,
    );
    assert!(msg.contains("handler `buggy` failed"), "{msg}");
    assert!(!env.exists("n.txt"));
    env.close().await;
}

#[tokio::test]
async fn a_stopped_monitor_fails_closed() {
    let env = Env::new().await;
    env.put("f.txt", "x\n");
    ok(&env.call("read_file", json!({"path": "f.txt"})).await);
    env.toolset.monitor().shutdown().await;
    assert_eq!(
        env.toolset.monitor().actor_cell().get_status(),
        ractor::ActorStatus::Stopped
    );
    let msg = err(
        &env.call("edit_file", edit("f.txt", "x", "y")).await,
        ErrorCode::Denied,
    );
    assert!(msg.contains("fs-intent monitor is unavailable"), "{msg}");
    assert_eq!(env.get("f.txt"), "x\n");
    env.close().await;
}
