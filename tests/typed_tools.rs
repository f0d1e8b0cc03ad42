//! Typed tools: schemas generated from Rust types, a registered `ToolDefinition` like any
//! other, so the pipeline validates the input before the body, the output after it, and
//! keeps the canonical value out of the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use async_trait::async_trait;
use dsh::core::typed::{Typed, TypedTool, WorkspacePath, Writes};
use dsh::core::{ErrorCode, FrozenResult, Hooks, ToolCall, ToolContext, ToolFailure, ToolRegistry};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use dsh::session::SessionLog;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Quick,
    Thorough,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Limits {
    /// At most this many results.
    max: u32,
    /// Skip this many first.
    skip: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SearchArgs {
    /// What to look for.
    query: String,
    mode: Mode,
    limits: Limits,
    /// A note, if any.
    note: Option<String>,
    /// Claim a score (lets a test break the output's schema).
    claim: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Found {
    summary: String,
    /// A percentage.
    #[schemars(range(max = 100))]
    score: u32,
}

struct Search;

#[async_trait]
impl TypedTool for Search {
    type Args = SearchArgs;
    type Output = Found;
    fn name(&self) -> &str {
        "search"
    }
    fn description(&self) -> &str {
        "Searches the notes."
    }
    /// The model is shown the summary; the score stays in the canonical value.
    fn present(&self, value: &Value) -> Vec<dsh::core::ContentBlock> {
        vec![dsh::core::ContentBlock::text(
            value["summary"].as_str().unwrap_or_default(),
        )]
    }
    async fn call(&self, args: SearchArgs, _ctx: ToolContext) -> Result<Found, ToolFailure> {
        Ok(Found {
            summary: format!(
                "{} {:?} max={} skip={:?} note={:?}",
                args.query, args.mode, args.limits.max, args.limits.skip, args.note
            ),
            score: args.claim.unwrap_or(42),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CopyArgs {
    from: WorkspacePath,
    to: WorkspacePath<Writes>,
}

/// Copies a file: both paths confined by the pipeline before the body.
struct Copy;

#[async_trait]
impl TypedTool for Copy {
    type Args = CopyArgs;
    type Output = String;
    fn name(&self) -> &str {
        "copy"
    }
    fn description(&self) -> &str {
        "Copies a file inside the workspace."
    }
    async fn call(&self, args: CopyArgs, _ctx: ToolContext) -> Result<String, ToolFailure> {
        let bytes = args.from.read(1 << 20)?;
        args.to.write(&bytes)?;
        Ok(format!(
            "copied {} to {}",
            args.from.display(),
            args.to.display()
        ))
    }
}

#[test]
fn the_schema_follows_the_types() {
    let tool = Typed::new(Search);
    let schema = dsh::core::ToolDefinition::input_schema(&tool);
    assert_eq!(schema["type"], "object");
    assert!(schema.get("$schema").is_none(), "providers refuse it");
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        required,
        ["query", "mode", "limits"],
        "options are optional"
    );
    assert_eq!(
        schema["properties"]["query"]["description"],
        "What to look for."
    );
    let text = schema.to_string();
    assert!(
        text.contains("quick") && text.contains("thorough"),
        "{text}"
    );
    assert!(
        text.contains("\"max\"") && text.contains("\"skip\""),
        "{text}"
    );
    let output = dsh::core::ToolDefinition::output_schema(&tool).unwrap();
    assert_eq!(output["properties"]["score"]["maximum"], 100);

    let copy = dsh::core::ToolDefinition::input_schema(&Typed::new(Copy));
    assert_eq!(copy["properties"]["from"]["x-dsh-path"], "read");
    assert_eq!(copy["properties"]["to"]["x-dsh-path"], "write");
    assert_eq!(copy["properties"]["to"]["type"], "string");
}

async fn run(
    calls: Vec<(&str, Value)>,
    with_workspace: Option<&std::path::Path>,
) -> Vec<FrozenResult> {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Typed::new(Search)).unwrap();
    registry.register(Typed::new(Copy)).unwrap();
    let mut hooks = Hooks::new();
    let toolset = match with_workspace {
        Some(root) => {
            let toolset = dsh::tool_fs::FsToolset::builder(root)
                .build()
                .await
                .unwrap();
            hooks.pre_execute_arc(toolset.sandbox());
            Some(toolset)
        }
        None => None,
    };
    let harness = HarnessBuilder::new(registry)
        .hooks(hooks)
        .build()
        .await
        .unwrap();
    let log = SessionLog::memory().await.unwrap();
    let session = harness
        .open(log.clone(), SchedulerConfig::default(), None)
        .await
        .unwrap();
    let calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCall::new(format!("c{i}"), name, args))
        .collect();
    let out = session.run_step(StepRequest::new(calls)).await.unwrap();
    let logged = log.snapshot().await.unwrap();
    let text = serde_json::to_string(&logged).unwrap();
    assert!(
        !text.contains("\"score\":"),
        "the canonical value stays out of the log"
    );
    session.shutdown().await;
    harness.shutdown().await;
    if let Some(t) = toolset {
        t.shutdown().await;
    }
    out.results
}

#[tokio::test]
async fn good_calls_bad_calls_and_outputs_that_break_their_schema() {
    let results = run(
        vec![
            (
                "search",
                json!({"query": "q", "mode": "thorough", "limits": {"max": 3}}),
            ),
            (
                "search",
                json!({"query": "q", "mode": "quick", "limits": {"max": 3, "skip": 1}, "note": "n"}),
            ),
            (
                "search",
                json!({"query": "q", "mode": "fast", "limits": {"max": 3}}),
            ),
            (
                "search",
                json!({"query": "q", "mode": "quick", "limits": {"max": "three"}}),
            ),
            ("search", json!({"query": "q", "mode": "quick"})),
            (
                "search",
                json!({"query": "q", "mode": "quick", "limits": {"max": 1}, "claim": 150}),
            ),
        ],
        None,
    )
    .await;
    assert_eq!(results[0].code(), None, "{}", results[0].text());
    assert!(
        results[0]
            .text()
            .contains("q Thorough max=3 skip=None note=None"),
        "{}",
        results[0].text()
    );
    assert!(
        results[1]
            .text()
            .contains("Quick max=3 skip=Some(1) note=Some(\"n\")"),
        "{}",
        results[1].text()
    );
    for (i, field, expected) in [
        (2, "mode", "fast"),
        (3, "limits/max", "three"),
        (4, "limits", "limits"),
    ] {
        let r = &results[i];
        assert_eq!(r.code(), Some(ErrorCode::ToolInputError), "{}", r.text());
        assert!(r.text().contains(field), "names `{field}`: {}", r.text());
        assert!(r.text().contains(expected), "says what: {}", r.text());
    }
    let r = &results[5];
    assert_eq!(r.code(), Some(ErrorCode::ToolOutputError), "{}", r.text());
    assert!(
        r.text().contains("150") || r.text().contains("score"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn workspace_paths_are_confined_before_the_body_and_used_through_their_handles() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "TOP-SECRET").unwrap();
    let results = run(
        vec![
            ("copy", json!({"from": "a.txt", "to": "sub/b.txt"})),
            ("copy", json!({"from": "../secret.txt", "to": "leak.txt"})),
            ("copy", json!({"from": "a.txt", "to": "../escaped.txt"})),
        ],
        Some(&root),
    )
    .await;
    assert_eq!(results[0].code(), None, "{}", results[0].text());
    assert_eq!(
        std::fs::read_to_string(root.join("sub/b.txt")).unwrap(),
        "alpha"
    );
    for r in &results[1..] {
        assert_eq!(r.code(), Some(ErrorCode::Denied), "{}", r.text());
    }
    assert!(!root.join("leak.txt").exists());
    assert!(!dir.path().join("escaped.txt").exists());

    // Without a workspace to confine them, paths are refused, never opened raw.
    let results = run(
        vec![("copy", json!({"from": "a.txt", "to": "b.txt"}))],
        None,
    )
    .await;
    assert_eq!(
        results[0].code(),
        Some(ErrorCode::Denied),
        "{}",
        results[0].text()
    );
}

/// A typed tool that takes a path as a plain string, declared through `path_args` (as the
/// built-in `glob` and `list_dir` do): the pipeline sees the declaration like any tool's, and
/// the generated schema carries no Rust type name.
#[derive(Debug, Deserialize, JsonSchema)]
struct StatArgs {
    /// The file.
    file: String,
}

struct Stat;

#[async_trait]
impl TypedTool for Stat {
    type Args = StatArgs;
    type Output = String;
    fn name(&self) -> &str {
        "stat"
    }
    fn description(&self) -> &str {
        "stats a file"
    }
    fn path_args(&self) -> Vec<dsh::core::PathArg> {
        vec![dsh::core::PathArg::read("file")]
    }
    async fn call(&self, args: StatArgs, _ctx: ToolContext) -> Result<String, ToolFailure> {
        Ok(args.file)
    }
}

#[test]
fn plain_string_paths_are_declared_and_schemas_carry_no_type_name() {
    use dsh::core::{Access, ToolDefinition};
    let tool = Typed::new(Stat);
    assert!(tool.input_schema().get("title").is_none());
    assert!(tool.declares_paths());
    let declared = tool.declared_paths(&json!({"file": "secrets/k"}));
    assert_eq!(declared.len(), 1);
    assert_eq!(
        (declared[0].raw.as_str(), declared[0].access),
        ("secrets/k", Access::Read)
    );
    assert_eq!(
        tool.permission_subjects(&json!({"file": "secrets/k"})),
        ["secrets/k"]
    );
    assert!(!tool.resolves_own_paths());
}
