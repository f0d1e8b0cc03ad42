//! Confinement for every tool, not only the built-in ones: a custom tool that declares its
//! path arguments gets them resolved inside the workspace before its body runs (`..`, an
//! absolute path outside and a symlink out are `DENIED`, the body never called), reads them
//! through the handle it is given, and the intent rules `read(…)` / `write(…)` bind it as
//! they bind `write_file`, `edit_file` and `apply_patch`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use dsh_core::{
    ErrorCode, FrozenResult, Hooks, PathArg, ToolCall, ToolContext, ToolDefinition, ToolFailure,
    ToolRegistry,
};
use dsh_guards::PermissionRules;
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use dsh_tool_fs::FsToolset;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SECRET: &str = "TOP-SECRET-SENTINEL";

/// `word_count {path}`: reads its file through the handle the pipeline resolved.
struct WordCount {
    bodies: Arc<AtomicUsize>,
}

#[async_trait]
impl ToolDefinition for WordCount {
    fn name(&self) -> &str {
        "word_count"
    }
    fn description(&self) -> &str {
        "Counts the words of a file."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    }
    fn path_args(&self) -> Vec<PathArg> {
        vec![PathArg::read("path")]
    }
    async fn execute(&self, _input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.bodies.fetch_add(1, Ordering::SeqCst);
        let file = ctx
            .paths
            .get("path")
            .ok_or_else(|| ToolFailure::new("no resolved path"))?;
        let text = file
            .read_to_string(1 << 20)
            .map_err(|e| ToolFailure::new(e.to_string()))?;
        Ok(json!(text.split_whitespace().count()))
    }
}

/// `export {target, text}`: writes its target through the handle.
struct Export {
    bodies: Arc<AtomicUsize>,
}

#[async_trait]
impl ToolDefinition for Export {
    fn name(&self) -> &str {
        "export"
    }
    fn description(&self) -> &str {
        "Writes text to a file."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"target": {"type": "string"}, "text": {"type": "string"}}, "required": ["target", "text"]})
    }
    fn path_args(&self) -> Vec<PathArg> {
        vec![PathArg::write("target")]
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.bodies.fetch_add(1, Ordering::SeqCst);
        let file = ctx
            .paths
            .get("target")
            .ok_or_else(|| ToolFailure::new("no resolved path"))?;
        let text = input["text"].as_str().unwrap_or_default();
        file.write(text.as_bytes())
            .map_err(|e| ToolFailure::new(e.to_string()))?;
        Ok(json!(format!("wrote {}", file.display())))
    }
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    bodies: Arc<AtomicUsize>,
    toolset: FsToolset,
    harness: Harness,
    session: Session,
    next: AtomicUsize,
}

impl Env {
    async fn new(rules: Option<&str>, read_only: bool) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), format!("{SECRET} words\n")).unwrap();
        std::fs::write(root.join("src/notes.txt"), "one two three\n").unwrap();
        std::fs::write(root.join("secrets/key.txt"), "old key\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out_link")).unwrap();
        let toolset = FsToolset::builder(&root)
            .read_only(read_only)
            .build()
            .await
            .unwrap();
        let registry = Arc::new(ToolRegistry::new());
        toolset.register(&registry).unwrap();
        let bodies = Arc::new(AtomicUsize::new(0));
        registry
            .register(WordCount {
                bodies: bodies.clone(),
            })
            .unwrap();
        registry
            .register(Export {
                bodies: bodies.clone(),
            })
            .unwrap();
        let mut hooks = Hooks::new();
        hooks.pre_execute_arc(toolset.sandbox());
        if let Some(rules) = rules {
            hooks.pre_execute(PermissionRules::from_toml(rules).unwrap().with_root(&root));
        }
        let harness = HarnessBuilder::new(registry)
            .hooks(hooks)
            .build()
            .await
            .unwrap();
        let session = harness
            .open(
                SessionLog::memory().await.unwrap(),
                SchedulerConfig::default(),
                None,
            )
            .await
            .unwrap();
        Env {
            _dir: dir,
            root,
            outside,
            bodies,
            toolset,
            harness,
            session,
            next: AtomicUsize::new(1),
        }
    }

    async fn call(&self, name: &str, args: Value) -> FrozenResult {
        let id = format!("c{}", self.next.fetch_add(1, Ordering::SeqCst));
        let out = self
            .session
            .run_step(StepRequest::new(vec![ToolCall::new(id, name, args)]))
            .await
            .unwrap();
        out.results.into_iter().next().unwrap()
    }

    async fn close(self) {
        self.session.shutdown().await;
        self.harness.shutdown().await;
        self.toolset.shutdown().await;
    }
}

#[track_caller]
fn denied(r: &FrozenResult) -> String {
    assert_eq!(r.code(), Some(ErrorCode::Denied), "{}", r.text());
    assert!(!r.text().contains(SECRET), "{}", r.text());
    r.text()
}

#[tokio::test]
async fn a_declared_path_that_leaves_the_workspace_is_denied_before_the_body_runs() {
    let env = Env::new(None, false).await;
    let ok = env
        .call("word_count", json!({"path": "src/notes.txt"}))
        .await;
    assert_eq!(ok.code(), None, "{}", ok.text());
    assert_eq!(ok.text(), "3");
    assert_eq!(env.bodies.load(Ordering::SeqCst), 1);

    let outside = env.outside.join("secret.txt");
    for path in [
        "../outside/secret.txt".to_string(),
        "../../../../../../etc/hostname".to_string(),
        outside.display().to_string(),
        "out_link/secret.txt".to_string(),
    ] {
        denied(&env.call("word_count", json!({"path": path})).await);
        denied(
            &env.call("export", json!({"target": path, "text": "x"}))
                .await,
        );
    }
    assert_eq!(
        env.bodies.load(Ordering::SeqCst),
        1,
        "no refused call reached a body"
    );
    assert!(
        std::fs::read_to_string(&outside)
            .unwrap()
            .starts_with(SECRET)
    );
    env.close().await;
}

#[tokio::test]
async fn one_write_rule_binds_a_custom_tool_and_every_writing_built_in_alike() {
    let env = Env::new(Some(r#"deny = ["write(secrets/**)"]"#), false).await;
    let before = std::fs::read_to_string(env.root.join("secrets/key.txt")).unwrap();
    let read = env
        .call("read_file", json!({"path": "secrets/key.txt"}))
        .await;
    assert_eq!(read.code(), None, "reading is not writing: {}", read.text());
    for (tool, args) in [
        (
            "export",
            json!({"target": "secrets/key.txt", "text": "new"}),
        ),
        (
            "export",
            json!({"target": "./src/../secrets/new.txt", "text": "new"}),
        ),
        (
            "write_file",
            json!({"path": "secrets/key.txt", "content": "new"}),
        ),
        (
            "edit_file",
            json!({"path": "secrets/key.txt", "old_string": "old", "new_string": "new"}),
        ),
        (
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Add File: secrets/added.txt\n+new\n*** End Patch"}),
        ),
    ] {
        let text = denied(&env.call(tool, args).await);
        assert!(text.contains("write(secrets/**)"), "{tool}: {text}");
    }
    assert_eq!(
        std::fs::read_to_string(env.root.join("secrets/key.txt")).unwrap(),
        before
    );
    assert!(!env.root.join("secrets/new.txt").exists());
    assert!(!env.root.join("secrets/added.txt").exists());
    // Elsewhere the custom tool writes, through its handle.
    let ok = env
        .call(
            "export",
            json!({"target": "out/report.txt", "text": "done"}),
        )
        .await;
    assert_eq!(ok.code(), None, "{}", ok.text());
    assert_eq!(
        std::fs::read_to_string(env.root.join("out/report.txt")).unwrap(),
        "done"
    );
    // A symlink into the protected folder is caught as the path is resolved.
    std::os::unix::fs::symlink(env.root.join("secrets"), env.root.join("alias")).unwrap();
    denied(
        &env.call("export", json!({"target": "alias/key.txt", "text": "x"}))
            .await,
    );
    env.close().await;
}

#[tokio::test]
async fn a_read_rule_binds_a_custom_reader_and_read_only_refuses_declared_writes() {
    let env = Env::new(Some(r#"deny = ["read(secrets/**)"]"#), true).await;
    let text = denied(
        &env.call("word_count", json!({"path": "secrets/key.txt"}))
            .await,
    );
    assert!(text.contains("read(secrets/**)"), "{text}");
    denied(
        &env.call("read_file", json!({"path": "secrets/key.txt"}))
            .await,
    );
    let text = denied(
        &env.call("export", json!({"target": "out.txt", "text": "x"}))
            .await,
    );
    assert!(text.contains("read-only"), "{text}");
    assert!(!env.root.join("out.txt").exists());
    env.close().await;
}
