//! A session continued from its log (a new `dsh run` or `dsh serve` process, an HTTP session
//! opened again) remembers what read-before-edit knew: the reads the log records, each with the
//! hash of what it showed, and the steps. Each "process" here is a new toolset (a new monitor,
//! empty) and a new harness over the same workspace and log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_core::{FrozenResult, Hooks, ToolCall, ToolRegistry};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, SessionStore, StepRequest};
use dsh_session::{Durability, SessionLog};
use dsh_tool_fs::FsToolset;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

/// A new process: a new toolset and harness, the toolset resuming from logs when told to.
async fn process(root: &Path, store: &Path, resumes: bool) -> (Harness, FsToolset) {
    let toolset = FsToolset::builder(root).build().await.unwrap();
    let registry = Arc::new(ToolRegistry::new());
    toolset.register(&registry).unwrap();
    let mut hooks = Hooks::new();
    hooks.pre_execute_arc(toolset.sandbox());
    let mut builder = HarnessBuilder::new(registry)
        .hooks(hooks)
        .store(SessionStore::Directory {
            root: store.to_path_buf(),
            durability: Durability::Batch,
        });
    if resumes {
        builder = builder.resumes(Arc::new(toolset.clone()));
    }
    (builder.build().await.unwrap(), toolset)
}

fn call(id: &str, name: &str, args: Value) -> StepRequest {
    StepRequest::new(vec![ToolCall::new(id, name, args)])
}

fn edit(id: &str, path: &str) -> StepRequest {
    call(
        id,
        "edit_file",
        json!({"path": path, "old_string": "one", "new_string": "two"}),
    )
}

fn outcome(result: &FrozenResult) -> String {
    match result.code() {
        Some(code) => format!("{}: {}", code.as_str(), result.text()),
        None => "ok".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_session_opened_again_remembers_its_reads_and_steps() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::write(root.join("b.txt"), "one\n").unwrap();
    std::fs::write(root.join("c.txt"), "one\n").unwrap();
    let store = dir.path().join("sessions");

    let (harness, toolset) = process(&root, &store, true).await;
    let opened = harness
        .open_session("s1", SchedulerConfig::default(), None)
        .await
        .unwrap();
    let s = &opened.session;
    for (i, path) in ["a.txt", "b.txt", "c.txt"].iter().enumerate() {
        let out = s
            .run_step(call(&format!("r{i}"), "read_file", json!({"path": path})))
            .await
            .unwrap();
        assert_eq!(outcome(&out.results[0]), "ok");
    }
    // b.txt is edited here: the record now holds what the edit wrote.
    let out = s.run_step(edit("e1", "b.txt")).await.unwrap();
    assert_eq!(outcome(&out.results[0]), "ok");
    harness.shutdown().await;
    toolset.shutdown().await;

    // Between the two processes, c.txt changes behind the agent's back.
    std::fs::write(root.join("c.txt"), "one, changed\n").unwrap();
    std::fs::write(root.join("d.txt"), "one\n").unwrap();

    let (harness, toolset) = process(&root, &store, true).await;
    let opened = harness
        .open_session("s1", SchedulerConfig::default(), None)
        .await
        .unwrap();
    let s = &opened.session;
    let out = s.run_step(edit("e2", "a.txt")).await.unwrap();
    assert_eq!(
        outcome(&out.results[0]),
        "ok",
        "the read of a.txt is remembered"
    );
    assert_eq!(out.step, 5, "steps go on after the log's last");
    // The edit's own write is remembered too: b.txt as the edit left it may be edited again.
    let again = call(
        "e3",
        "edit_file",
        json!({"path": "b.txt", "old_string": "two", "new_string": "three"}),
    );
    let out = s.run_step(again).await.unwrap();
    assert_eq!(
        outcome(&out.results[0]),
        "ok",
        "the edit's write is remembered"
    );
    let out = s.run_step(edit("e4", "c.txt")).await.unwrap();
    let said = outcome(&out.results[0]);
    assert!(
        said.starts_with("DENIED") && said.contains("changed since"),
        "a file changed since the remembered read is refused: {said}"
    );
    let out = s.run_step(edit("e5", "d.txt")).await.unwrap();
    let said = outcome(&out.results[0]);
    assert!(
        said.starts_with("DENIED") && said.contains("has not been read"),
        "a file never read is refused: {said}"
    );
    harness.shutdown().await;
    toolset.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "three\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_opened_by_its_host_is_continued_with_its_reads() {
    // `dsh run` and stdio `dsh serve` open the log themselves and hand it to `Harness::open`.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    let store = dir.path().join("sessions");
    let path = dir.path().join("session.jsonl");

    let (harness, toolset) = process(&root, &store, true).await;
    let (log, _) = SessionLog::open_file(&path, Durability::Batch, None)
        .await
        .unwrap();
    let session = harness
        .open(log, SchedulerConfig::default(), None)
        .await
        .unwrap();
    let out = session
        .run_step(call("r1", "read_file", json!({"path": "a.txt"})))
        .await
        .unwrap();
    assert_eq!(outcome(&out.results[0]), "ok");
    session.shutdown().await;
    harness.shutdown().await;
    toolset.shutdown().await;

    for resumes in [false, true] {
        let (harness, toolset) = process(&root, &store, resumes).await;
        let (log, _) = SessionLog::open_file(&path, Durability::Batch, None)
            .await
            .unwrap();
        // No first step given: the log says where it goes on.
        let session = harness
            .open(log, SchedulerConfig::default(), None)
            .await
            .unwrap();
        let out = session.run_step(edit("e1", "a.txt")).await.unwrap();
        let said = outcome(&out.results[0]);
        if resumes {
            assert_eq!(said, "ok");
            assert_eq!(
                out.step, 3,
                "after the read (step 1) and the refused edit (step 2)"
            );
        } else {
            // A toolset not given to the harness remembers nothing: the rule refuses.
            assert!(said.contains("has not been read"), "{said}");
            assert_eq!(out.step, 2, "steps go on after the log's last all the same");
        }
        session.shutdown().await;
        harness.shutdown().await;
        toolset.shutdown().await;
    }
}
