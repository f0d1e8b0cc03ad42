//! `glob`: files whose path matches a glob pattern, honouring `.gitignore`.

use super::walk::{Skips, skip_notes, walk, walk_error};
use super::{GLOB, blocking, failure, forbidden_read, permission_subjects, plural};
use crate::sandbox::{self, check_glob_pattern};
use crate::toolset::Shared;
use async_trait::async_trait;
use dsh_core::tool::ExecutionMode;
use dsh_core::typed::TypedTool;
use dsh_core::{ContentBlock, PathPolicies, Signal, ToolContext, ToolFailure};
use globset::GlobBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// `glob(pattern, path?)`.
pub struct Glob {
    shared: Arc<Shared>,
}

impl Glob {
    pub(crate) fn new(shared: Arc<Shared>) -> Glob {
        Glob { shared }
    }
}

/// Whether a pattern names hidden files itself (`.github/**`, `**/.env`): then they are
/// looked at.
fn wants_hidden(pattern: &str) -> bool {
    pattern
        .split('/')
        .any(|part| part.starts_with('.') && part != "." && part != "..")
}

/// Workspace-relative `/`-separated form of a path the walker found under `root`.
pub(crate) fn relative_to(root: &Path, found: &Path) -> Option<String> {
    found.strip_prefix(root).ok().map(sandbox::display)
}

/// `glob`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::without_description)]
pub struct GlobArgs {
    /// A glob pattern, relative to `path`.
    pub pattern: String,
    /// The directory to search (default: the workspace root).
    #[serde(default = "workspace_root")]
    #[schemars(transform = super::without_default)]
    pub path: String,
}

fn workspace_root() -> String {
    ".".to_string()
}

/// `glob`'s canonical value.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GlobOutput {
    /// The pattern, as given.
    pub pattern: String,
    /// The directory searched, as the model is shown it.
    pub path: String,
    /// The matching files' workspace paths, sorted, at most the toolset's `max_paths`.
    pub matches: Vec<String>,
    /// How many files match in all.
    pub total: usize,
    /// What the walk left out and why.
    pub skipped: Value,
}

fn run(
    shared: &Arc<Shared>,
    pattern: &str,
    path: &str,
    signal: &Signal,
    policy: &PathPolicies,
) -> Result<GlobOutput, ToolFailure> {
    check_glob_pattern(pattern).map_err(failure)?;
    let base = shared.ws.resolve(path).map_err(failure)?;
    forbidden_read(shared, policy, GLOB, &base)?;
    let matcher = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| ToolFailure::new(format!("invalid glob pattern `{pattern}`: {e}")))?
        .compile_matcher();
    let root = shared.ws.root();
    let abs_base = root.join(&base);
    if !abs_base.is_dir() {
        return Err(ToolFailure::new(format!(
            "`{}` is not a directory of the workspace",
            sandbox::display(&base)
        )));
    }
    let mut found = Vec::new();
    let skips = Arc::new(Skips::default());
    let walk = walk(
        shared,
        GLOB,
        policy,
        &abs_base,
        wants_hidden(pattern),
        None,
        &skips,
    );
    let entries = if walk.base_hidden {
        None
    } else {
        Some(walk.builder.build())
    };
    for (i, entry) in entries.into_iter().flatten().enumerate() {
        if i % 256 == 0 && signal.is_cancelled() {
            return Err(ToolFailure::new("glob was cancelled"));
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                walk_error(&skips, &e);
                continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(under_base) = entry.path().strip_prefix(&abs_base) else {
            continue;
        };
        if matcher.is_match(under_base)
            && let Some(rel) = relative_to(root, entry.path())
        {
            found.push(rel);
        }
    }
    found.sort();
    // The walker lists folders by path; if one was swapped for a symlink out while it ran,
    // the names it listed there fail this confined lookup and are not shown.
    found.retain(|rel| match shared.ws.dir().symlink_metadata(rel) {
        Ok(_) => true,
        Err(e) => {
            skips.failed(Path::new(rel), Some(&e));
            false
        }
    });
    let total = found.len();
    found.truncate(shared.limits.max_paths);
    Ok(GlobOutput {
        pattern: pattern.to_string(),
        path: sandbox::display(&base),
        matches: found,
        total,
        skipped: skips.to_json(),
    })
}

#[async_trait]
impl TypedTool for Glob {
    type Args = GlobArgs;
    type Output = GlobOutput;

    fn name(&self) -> &str {
        GLOB
    }

    fn description(&self) -> &str {
        "Finds files whose path (relative to `path`, default the workspace root) matches a \
         glob pattern such as `**/*.rs` or `src/*.{ts,tsx}`. `*` does not cross `/`; `**` \
         does. Files ignored by .gitignore and hidden files are skipped unless the pattern \
         names them. Results are sorted by path."
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(60_000)
    }

    fn permission_subjects(&self, input: &Value) -> Option<Vec<String>> {
        Some(permission_subjects(&self.shared, GLOB, input))
    }

    fn path_args(&self) -> Vec<dsh_core::PathArg> {
        vec![dsh_core::PathArg::read("path")]
    }

    fn declared_paths(&self, input: &Value) -> Option<Vec<dsh_core::DeclaredPath>> {
        Some(super::declared(GLOB, input))
    }

    // Strict function calling sends these empty for "not given".
    fn empty_means_absent(&self) -> &[&'static str] {
        &["path"]
    }

    fn resolves_own_paths(&self) -> bool {
        true
    }

    async fn call(&self, args: GlobArgs, ctx: ToolContext) -> Result<GlobOutput, ToolFailure> {
        let shared = self.shared.clone();
        blocking(move || run(&shared, &args.pattern, &args.path, &ctx.signal, &ctx.policy)).await
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let pattern = value["pattern"].as_str().unwrap_or("?");
        let path = value["path"].as_str().unwrap_or(".");
        let total = value["total"].as_u64().unwrap_or(0) as usize;
        let matches: Vec<&str> = value["matches"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = if total == 0 {
            format!("No files match `{pattern}` under `{path}`.")
        } else {
            let mut out = format!("{} match `{pattern}`\n", plural(total, "file"));
            out.push_str(&matches.join("\n"));
            if matches.len() < total {
                out.push_str(&format!(
                    "\n[truncated: showing the first {} of {total} paths; narrow the pattern or the path]",
                    matches.len()
                ));
            }
            out
        };
        for note in skip_notes(value) {
            out.push('\n');
            out.push_str(&note);
        }
        vec![ContentBlock::text(out)]
    }
}
