//! `list_dir`: the entries of one directory, sorted by name.

use super::walk::{Skips, skip_notes};
use super::{LIST_DIR, blocking, failure, forbidden_read, permission_subjects};
use crate::error::quote_path;
use crate::sandbox;
use crate::toolset::Shared;
use crate::workspace::Existing;
use async_trait::async_trait;
use dsh_core::tool::ExecutionMode;
use dsh_core::typed::TypedTool;
use dsh_core::{Access, ContentBlock, PathPolicies, PathPolicy, ToolContext, ToolFailure};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// `list_dir(path)`.
pub struct ListDir {
    shared: Arc<Shared>,
}

impl ListDir {
    pub(crate) fn new(shared: Arc<Shared>) -> ListDir {
        ListDir { shared }
    }
}

/// `ignore`: glob patterns of names to leave out of the listing.
fn ignore_set(patterns: &[String]) -> Result<globset::GlobSet, ToolFailure> {
    let mut set = globset::GlobSetBuilder::new();
    for pattern in patterns {
        let glob = globset::Glob::new(pattern)
            .map_err(|e| ToolFailure::new(format!("invalid ignore pattern `{pattern}`: {e}")))?;
        set.add(glob);
    }
    set.build()
        .map_err(|e| ToolFailure::new(format!("invalid ignore patterns: {e}")))
}

/// `list_dir`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::without_description)]
pub struct ListDirArgs {
    /// The directory, relative to the workspace root.
    pub path: String,
    /// Glob patterns of names to leave out (`*.log`, `target`).
    #[serde(default)]
    #[schemars(transform = super::without_default)]
    pub ignore: Vec<String>,
}

/// One entry of a listing.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListDirEntry {
    /// Its name.
    pub name: String,
    /// `dir`, `symlink`, `file` or `other`.
    pub kind: String,
    /// A file's size in bytes.
    pub size: Option<u64>,
}

/// `list_dir`'s canonical value.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListDirOutput {
    /// The directory as the model is shown it.
    pub path: String,
    /// The entries, sorted by name, at most the toolset's `max_entries`.
    pub entries: Vec<ListDirEntry>,
    /// How many entries there are in all.
    pub total: usize,
    /// What the listing left out and why.
    pub skipped: Value,
}

fn list(
    shared: &Shared,
    path: &str,
    ignore: &globset::GlobSet,
    policy: &PathPolicies,
) -> Result<ListDirOutput, ToolFailure> {
    let rel = shared.ws.resolve(path).map_err(failure)?;
    forbidden_read(shared, policy, LIST_DIR, &rel)?;
    let shown = sandbox::display(&rel);
    let quoted = quote_path(&shown);
    let dir = match shared.ws.open_dir(&rel) {
        Ok(dir) => dir,
        Err(e) => {
            // Say what is there instead, when something is.
            return Err(match shared.ws.load(&rel, 0) {
                Ok(Existing::Missing) => ToolFailure::new(format!("`{quoted}` does not exist")),
                Ok(Existing::Dir) | Err(_) => failure(e),
                Ok(Existing::Special) => ToolFailure::new(format!(
                    "`{quoted}` is not a directory but a FIFO, socket or device"
                )),
                Ok(Existing::File(_) | Existing::TooLarge(_)) => ToolFailure::new(format!(
                    "`{quoted}` is a file, not a directory; use read_file to read it"
                )),
            });
        }
    };
    let skips = Skips::default();
    let abs = shared.ws.root().join(&rel);
    let mut entries = Vec::new();
    let listing = dir
        .entries()
        .map_err(|e| ToolFailure::new(format!("listing `{quoted}` failed: {e}")))?;
    for entry in listing {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                skips.failed(&abs, Some(&e));
                continue;
            }
        };
        if policy
            .refuses(LIST_DIR, Access::Read, &abs.join(entry.file_name()))
            .is_some()
        {
            skips.hidden();
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if ignore.is_match(&name) {
            continue;
        }
        let (kind, size) = match entry.file_type() {
            Ok(t) if t.is_dir() => ("dir", None),
            Ok(t) if t.is_symlink() => ("symlink", None),
            Ok(t) if t.is_file() => ("file", entry.metadata().ok().map(|m| m.len())),
            _ => ("other", None),
        };
        entries.push((name, kind, size));
    }
    entries.sort();
    let total = entries.len();
    entries.truncate(shared.limits.max_entries);
    let entries = entries
        .into_iter()
        .map(|(name, kind, size)| ListDirEntry {
            name,
            kind: kind.to_string(),
            size,
        })
        .collect();
    Ok(ListDirOutput {
        path: shown,
        entries,
        total,
        skipped: skips.to_json(),
    })
}

#[async_trait]
impl TypedTool for ListDir {
    type Args = ListDirArgs;
    type Output = ListDirOutput;

    fn name(&self) -> &str {
        LIST_DIR
    }

    fn description(&self) -> &str {
        "Lists a directory of the workspace: folders end in `/`, symlinks in `@`, files show \
         their size. Use `.` for the workspace root."
    }

    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(30_000)
    }

    fn permission_subjects(&self, input: &Value) -> Option<Vec<String>> {
        Some(permission_subjects(&self.shared, LIST_DIR, input))
    }

    fn path_args(&self) -> Vec<dsh_core::PathArg> {
        vec![dsh_core::PathArg::read("path")]
    }

    fn declared_paths(&self, input: &Value) -> Option<Vec<dsh_core::DeclaredPath>> {
        Some(super::declared(LIST_DIR, input))
    }

    // Strict function calling sends these empty for "not given".
    fn empty_means_absent(&self) -> &[&'static str] {
        &["ignore"]
    }

    fn resolves_own_paths(&self) -> bool {
        true
    }

    async fn call(
        &self,
        args: ListDirArgs,
        ctx: ToolContext,
    ) -> Result<ListDirOutput, ToolFailure> {
        let ignore = ignore_set(&args.ignore)?;
        let shared = self.shared.clone();
        blocking(move || list(&shared, &args.path, &ignore, &ctx.policy)).await
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let path = value["path"].as_str().unwrap_or(".");
        let entries = value["entries"].as_array().cloned().unwrap_or_default();
        let total = value["total"].as_u64().unwrap_or(0) as usize;
        let notes = skip_notes(value);
        if total == 0 {
            let mut out = format!("`{path}` is empty.");
            for note in notes {
                out.push('\n');
                out.push_str(&note);
            }
            return vec![ContentBlock::text(out)];
        }
        let count = if total == 1 {
            "1 entry".to_string()
        } else {
            format!("{total} entries")
        };
        let mut out = format!("{path}/ ({count})\n");
        for e in &entries {
            let name = e["name"].as_str().unwrap_or("?");
            match e["kind"].as_str() {
                Some("dir") => out.push_str(&format!("{name}/\n")),
                Some("symlink") => out.push_str(&format!("{name}@\n")),
                Some("file") => out.push_str(&format!("{name}  ({} bytes)\n", e["size"])),
                _ => out.push_str(&format!("{name}\n")),
            }
        }
        if entries.len() < total {
            out.push_str(&format!(
                "[truncated: showing the first {} of {total} entries]\n",
                entries.len()
            ));
        }
        for note in notes {
            out.push_str(&note);
            out.push('\n');
        }
        vec![ContentBlock::text(out.trim_end().to_string())]
    }
}
