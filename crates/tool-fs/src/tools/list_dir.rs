//! `list_dir`: the entries of one directory, sorted by name.

use super::{LIST_DIR, arg, blocking, failure, permission_subjects};
use crate::sandbox;
use crate::toolset::Shared;
use crate::workspace::Existing;
use async_trait::async_trait;
use dsh_core::tool::ExecutionMode;
use dsh_core::{ContentBlock, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Value, json};
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

fn list(shared: &Shared, path: &str) -> Result<Value, ToolFailure> {
    let rel = shared.ws.resolve(path).map_err(failure)?;
    let shown = sandbox::display(&rel);
    let dir = match shared.ws.open_dir(&rel) {
        Ok(dir) => dir,
        Err(e) => {
            // Say what is there instead, when something is.
            return Err(match shared.ws.load(&rel, 0) {
                Ok(Existing::Missing) => ToolFailure::new(format!("`{shown}` does not exist")),
                Ok(Existing::Dir) | Err(_) => failure(e),
                Ok(_) => ToolFailure::new(format!(
                    "`{shown}` is a file, not a directory; use read_file to read it"
                )),
            });
        }
    };
    let mut entries = Vec::new();
    let listing = dir
        .entries()
        .map_err(|e| ToolFailure::new(format!("listing `{shown}` failed: {e}")))?;
    for entry in listing {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
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
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|(name, kind, size)| json!({"name": name, "kind": kind, "size": size}))
        .collect();
    Ok(json!({"path": shown, "entries": entries, "total": total}))
}

#[async_trait]
impl ToolDefinition for ListDir {
    fn name(&self) -> &str {
        LIST_DIR
    }

    fn description(&self) -> &str {
        "Lists a directory of the workspace: folders end in `/`, symlinks in `@`, files show \
         their size. Use `.` for the workspace root."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The directory, relative to the workspace root."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "entries": {"type": "array"},
                "total": {"type": "integer"}
            },
            "required": ["path", "entries", "total"]
        }))
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

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        permission_subjects(&self.shared, LIST_DIR, input)
    }

    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        let path = arg(&input, "path").unwrap_or(".").to_string();
        let shared = self.shared.clone();
        blocking(move || list(&shared, &path)).await
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let path = value["path"].as_str().unwrap_or(".");
        let entries = value["entries"].as_array().cloned().unwrap_or_default();
        let total = value["total"].as_u64().unwrap_or(0) as usize;
        if total == 0 {
            return vec![ContentBlock::text(format!("`{path}` is empty."))];
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
        vec![ContentBlock::text(out.trim_end().to_string())]
    }
}
