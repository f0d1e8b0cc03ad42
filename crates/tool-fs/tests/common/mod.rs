//! A workspace in a temporary folder, the toolset and its sandbox in a real pipeline.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_core::{ErrorCode, FrozenResult, Hooks, ToolCall, ToolRegistry};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use dsh_tool_fs::{FsToolset, FsToolsetBuilder};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the file outside the workspace holds: it must never appear in any output.
pub const SECRET: &str = "TOP-SECRET-SENTINEL";

pub struct Env {
    pub dir: tempfile::TempDir,
    /// The workspace root (canonical).
    pub root: PathBuf,
    /// A folder beside the workspace, holding `secret.txt`.
    pub outside: PathBuf,
    pub toolset: FsToolset,
    pub harness: Harness,
    pub session: Session,
    pub log: SessionLog,
    next_id: AtomicUsize,
}

impl Env {
    pub async fn new() -> Env {
        Env::with(|b| b, |_, _| {}).await
    }

    /// `build` adjusts the toolset; `hooks` may add handlers after the sandbox.
    pub async fn with(
        build: impl FnOnce(FsToolsetBuilder) -> FsToolsetBuilder,
        hooks_extra: impl FnOnce(&mut Hooks, &FsToolset),
    ) -> Env {
        Env::with_harness(build, hooks_extra, |b, _| b).await
    }

    /// A workspace with these permission rules (TOML) after the sandbox.
    pub async fn with_rules(toml: &str) -> Env {
        let rules = dsh_guards::PermissionRules::from_toml(toml).unwrap();
        Env::with(
            |b| b,
            move |hooks, toolset| {
                hooks.pre_execute(rules.with_root(toolset.root()));
            },
        )
        .await
    }

    /// [`Env::with`], and `harness` adjusts the harness builder (given the root).
    pub async fn with_harness(
        build: impl FnOnce(FsToolsetBuilder) -> FsToolsetBuilder,
        hooks_extra: impl FnOnce(&mut Hooks, &FsToolset),
        harness: impl FnOnce(HarnessBuilder, &Path) -> HarnessBuilder,
    ) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).unwrap();
        let toolset = build(FsToolset::builder(&root)).build().await.unwrap();
        let registry = Arc::new(ToolRegistry::new());
        toolset.register(&registry).unwrap();
        let mut hooks = Hooks::new();
        hooks.pre_execute_arc(toolset.sandbox());
        hooks_extra(&mut hooks, &toolset);
        let harness = harness(HarnessBuilder::new(registry), &root)
            .hooks(hooks)
            .build()
            .await
            .unwrap();
        let log = SessionLog::memory().await.unwrap();
        let session = harness
            .open(log.clone(), SchedulerConfig::default(), None)
            .await
            .unwrap();
        Env {
            dir,
            root,
            outside,
            toolset,
            harness,
            session,
            log,
            next_id: AtomicUsize::new(1),
        }
    }

    fn id(&self) -> String {
        format!("call_{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// One step of `agent` with these calls; the results in call order.
    pub async fn step_as(&self, agent: &str, calls: Vec<(&str, Value)>) -> Vec<FrozenResult> {
        let calls = calls
            .into_iter()
            .map(|(name, args)| ToolCall::new(self.id(), name, args))
            .collect();
        let request = StepRequest {
            agent: agent.to_string(),
            calls,
        };
        self.session.run_step(request).await.unwrap().results
    }

    pub async fn step(&self, calls: Vec<(&str, Value)>) -> Vec<FrozenResult> {
        self.step_as("main", calls).await
    }

    /// One call of the `main` agent.
    pub async fn call(&self, name: &str, args: Value) -> FrozenResult {
        self.step(vec![(name, args)]).await.remove(0)
    }

    pub async fn call_as(&self, agent: &str, name: &str, args: Value) -> FrozenResult {
        self.step_as(agent, vec![(name, args)]).await.remove(0)
    }

    /// Writes a file under the root (creating folders), bypassing the tools.
    pub fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, content).unwrap();
    }

    /// Reads a file under the root, bypassing the tools.
    pub fn get(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.root.join(rel).exists()
    }

    pub fn symlink(&self, target: impl AsRef<Path>, link: &str) {
        let path = self.root.join(link);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    pub async fn close(self) {
        self.session.shutdown().await;
        self.harness.shutdown().await;
        self.toolset.shutdown().await;
    }
}

/// Asserts a success and answers its text.
#[track_caller]
pub fn ok(result: &FrozenResult) -> String {
    assert!(
        !result.is_error(),
        "expected a success, got {:?}: {}",
        result.code(),
        result.text()
    );
    result.text()
}

/// Asserts an error with `code` and answers its message.
#[track_caller]
pub fn err(result: &FrozenResult, code: ErrorCode) -> String {
    assert_eq!(
        result.code(),
        Some(code),
        "expected {code}, got: {}",
        result.text()
    );
    result.text()
}
