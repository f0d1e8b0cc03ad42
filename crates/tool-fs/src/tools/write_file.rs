//! `write_file`: creates or replaces a whole file, atomically.

use super::{
    WRITE_FILE, announce, arg, blocking, failure, forbidden_write, not_cancelled,
    permission_subjects, refusal_only,
};
use crate::error::quote_path;
use crate::hash::ContentHash;
use crate::intent::FsOp;
use crate::records;
use crate::sandbox;
use crate::toolset::Shared;
use crate::workspace::Existing;
use async_trait::async_trait;
use dsh_core::{ContentBlock, PathPolicies, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// `write_file(path, content)`.
pub struct WriteFile {
    shared: Arc<Shared>,
}

impl WriteFile {
    pub(crate) fn new(shared: Arc<Shared>) -> WriteFile {
        WriteFile { shared }
    }
}

/// What is at a path about to be written: its resolved form, and the current file's hash.
/// A target the path policy forbids `tool` to write is refused before it is even read.
pub(crate) fn inspect_target(
    shared: &Shared,
    policy: &PathPolicies,
    tool: &str,
    path: &str,
) -> Result<(PathBuf, String, Option<ContentHash>), ToolFailure> {
    let rel = shared.ws.resolve(path).map_err(failure)?;
    forbidden_write(shared, policy, tool, &rel)?;
    let shown = sandbox::display(&rel);
    let quoted = quote_path(&shown);
    let current = match shared
        .ws
        .load(&rel, shared.limits.max_file_bytes)
        .map_err(failure)?
    {
        Existing::Missing => None,
        Existing::File(bytes) => Some(ContentHash::of(&bytes)),
        Existing::Dir => {
            return Err(ToolFailure::new(format!(
                "`{quoted}` is a directory; give the path of a file"
            )));
        }
        Existing::Special => {
            return Err(ToolFailure::new(format!(
                "`{quoted}` is not a regular file (a FIFO, socket or device); it is not replaced"
            )));
        }
        Existing::TooLarge(size) => {
            return Err(ToolFailure::new(format!(
                "`{quoted}` is {size} bytes, over the {}-byte limit; it is not replaced",
                shared.limits.max_file_bytes
            )));
        }
    };
    Ok((rel, shown, current))
}

#[async_trait]
impl ToolDefinition for WriteFile {
    fn name(&self) -> &str {
        WRITE_FILE
    }

    fn description(&self) -> &str {
        "Writes a whole file: creates it (and its missing folders) or replaces it. Replacing \
         an existing file requires having read it first. The content is written exactly as \
         given. Prefer edit_file or apply_patch to change part of a file."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file, relative to the workspace root."},
                "content": {"type": "string", "description": "The whole new content."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "created": {"type": "boolean"}, "bytes": {"type": "integer"}},
            "required": ["path", "created", "bytes"]
        }))
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(30_000)
    }

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        permission_subjects(&self.shared, WRITE_FILE, input)
    }

    fn path_args(&self) -> Vec<dsh_core::PathArg> {
        vec![dsh_core::PathArg::write("path")]
    }

    fn declared_paths(&self, input: &Value) -> Vec<dsh_core::DeclaredPath> {
        super::declared(WRITE_FILE, input)
    }

    fn resolves_own_paths(&self) -> bool {
        true
    }

    async fn dry_run(&self, input: Value, ctx: ToolContext) -> Result<(), ToolFailure> {
        let path = arg(&input, "path").unwrap_or_default().to_string();
        let shared = self.shared.clone();
        let policy = ctx.policy.clone();
        let inspected = blocking(move || inspect_target(&shared, &policy, WRITE_FILE, &path)).await;
        let Some((_, shown, current)) = refusal_only(inspected)? else {
            return Ok(());
        };
        let op = if current.is_some() {
            FsOp::Overwrite
        } else {
            FsOp::Create
        };
        announce(&self.shared, &ctx, WRITE_FILE, op, &shown, current).await?;
        // The file stays as it is: the agent's record holds what is on disk, so a later edit
        // in the same dry run passes read-before-edit as it would after this write.
        if current.is_some() {
            self.shared
                .monitor
                .record_write(&ctx.agent, &shown, current);
        }
        Ok(())
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let path = arg(&input, "path").unwrap_or_default().to_string();
        let content = arg(&input, "content").unwrap_or_default().to_string();
        let shared = self.shared.clone();
        let policy = ctx.policy.clone();
        let (rel, shown, current) =
            blocking(move || inspect_target(&shared, &policy, WRITE_FILE, &path)).await?;
        let op = if current.is_some() {
            FsOp::Overwrite
        } else {
            FsOp::Create
        };
        announce(&self.shared, &ctx, WRITE_FILE, op, &shown, current).await?;
        let shared = self.shared.clone();
        let signal = ctx.signal.clone();
        let bytes = content.into_bytes();
        let hash = ContentHash::of(&bytes);
        let size = bytes.len();
        let policy = ctx.policy.clone();
        blocking(move || {
            not_cancelled(&signal)?;
            // Again at the last moment, on what the path leads to now.
            forbidden_write(&shared, &policy, WRITE_FILE, &rel)?;
            shared.ws.write_atomic(&rel, &bytes).map_err(failure)
        })
        .await?;
        self.shared
            .monitor
            .record_write(&ctx.agent, &shown, Some(hash));
        Ok(records::with_records(
            json!({"path": shown, "created": current.is_none(), "bytes": size}),
            vec![records::entry(&shown, Some(hash))],
        ))
    }

    fn result_meta(&self, value: &Value) -> Option<serde_json::Map<String, Value>> {
        records::meta_of(value)
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let path = value["path"].as_str().unwrap_or("?");
        let verb = if value["created"].as_bool() == Some(true) {
            "Created"
        } else {
            "Overwrote"
        };
        vec![ContentBlock::text(format!(
            "{verb} `{path}` ({} bytes).",
            value["bytes"]
        ))]
    }
}
