//! `read_file`: numbered lines of a text file; records the read for the read-before-edit rule.

use super::{
    READ_FILE, arg, blocking, failure, forbidden_read, permission_subjects, plural, refusal_only,
};
use crate::error::quote_path;
use crate::hash::ContentHash;
use crate::records;
use crate::sandbox;
use crate::toolset::Shared;
use crate::workspace::Existing;
use async_trait::async_trait;
use dsh_core::tool::ExecutionMode;
use dsh_core::{ContentBlock, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::sync::Arc;

/// Bytes looked at for a NUL when deciding whether a file is binary (as git does).
const BINARY_SNIFF: usize = 8000;

/// `read_file(path, offset?, limit?)`.
pub struct ReadFile {
    shared: Arc<Shared>,
}

impl ReadFile {
    pub(crate) fn new(shared: Arc<Shared>) -> ReadFile {
        ReadFile { shared }
    }
}

/// The file's text, unless it is binary (a NUL in its first bytes, as git decides) or not
/// UTF-8: then nothing of it is shown.
fn shown_text(bytes: &[u8]) -> Option<&str> {
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF)];
    std::str::from_utf8(bytes)
        .ok()
        .filter(|_| !sniff.contains(&0))
}

/// Cuts a line to `max` characters, saying so.
pub(crate) fn cut_line(line: &str, max: usize) -> (String, bool) {
    match line.char_indices().nth(max) {
        Some((end, _)) => (
            format!("{}… [line cut at {max} characters]", &line[..end]),
            true,
        ),
        None => (line.to_string(), false),
    }
}

fn numbered(shared: &Shared, path: &str, text: &str, offset: usize, limit: usize) -> Value {
    let limits = &shared.limits;
    let total = text.lines().count();
    let mut out = String::new();
    let mut last = offset.saturating_sub(1);
    let mut cut_lines = 0usize;
    let mut byte_capped = false;
    for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        let (line, cut) = cut_line(line, limits.max_line_chars);
        let entry = format!("{:>6}\t{line}\n", i + 1);
        if out.len() + entry.len() > limits.max_read_output && last >= offset {
            byte_capped = true;
            break;
        }
        out.push_str(&entry);
        cut_lines += usize::from(cut);
        last = i + 1;
    }
    json!({
        "path": path,
        "kind": "text",
        "total_lines": total,
        "first_line": offset,
        "last_line": last,
        "text": out,
        "cut_lines": cut_lines,
        "byte_capped": byte_capped,
    })
}

#[async_trait]
impl ToolDefinition for ReadFile {
    fn name(&self) -> &str {
        READ_FILE
    }

    fn description(&self) -> &str {
        "Reads a text file of the workspace and shows it with line numbers. `offset` is the \
         first line to show (1-based), `limit` how many lines. Reading a file is required \
         before editing or overwriting it."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file, relative to the workspace root."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)."},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to show."}
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
                "kind": {"enum": ["text", "empty", "binary", "too_large"]}
            },
            "required": ["path", "kind"]
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
        permission_subjects(&self.shared, READ_FILE, input)
    }

    fn path_args(&self) -> Vec<dsh_core::PathArg> {
        vec![dsh_core::PathArg::read("path")]
    }

    fn declared_paths(&self, input: &Value) -> Vec<dsh_core::DeclaredPath> {
        super::declared(READ_FILE, input)
    }

    // Strict function calling sends these empty for "not given".
    fn empty_means_absent(&self) -> &[&'static str] {
        &["limit"]
    }

    fn resolves_own_paths(&self) -> bool {
        true
    }

    async fn dry_run(&self, input: Value, ctx: ToolContext) -> Result<(), ToolFailure> {
        let path = arg(&input, "path").unwrap_or_default().to_string();
        let offset = input
            .get("offset")
            .and_then(Value::as_u64)
            .map_or(1, |o| usize::try_from(o).unwrap_or(usize::MAX))
            .max(1);
        let shared = self.shared.clone();
        let max = shared.limits.max_file_bytes;
        let policy = ctx.policy.clone();
        let loaded = blocking(move || {
            let rel = shared.ws.resolve(&path).map_err(failure)?;
            forbidden_read(&shared, &policy, READ_FILE, &rel)?;
            let existing = shared.ws.load(&rel, max).map_err(failure)?;
            Ok((sandbox::display(&rel), existing))
        })
        .await;
        // The read the body would record (the same cases as `execute`): a text file shown.
        if let Some((rel, Existing::File(bytes))) = refusal_only(loaded)?
            && let Some(text) = shown_text(&bytes)
            && (text.is_empty() || offset <= text.lines().count())
        {
            let hash = ContentHash::of(&bytes);
            if let Err(e) = self
                .shared
                .monitor
                .record_read(&ctx.agent, &rel, hash)
                .await
            {
                tracing::warn!(error = %e, path = %rel, "the read could not be recorded");
            }
        }
        Ok(())
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let path = arg(&input, "path").unwrap_or_default().to_string();
        // The schema says at least 1, but the tool is public and may be called without it:
        // 0 is read as 1 rather than underflowing.
        let offset = input
            .get("offset")
            .and_then(Value::as_u64)
            .map_or(1, |o| usize::try_from(o).unwrap_or(usize::MAX))
            .max(1);
        let limit = input
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(self.shared.limits.read_lines, |l| {
                usize::try_from(l).unwrap_or(usize::MAX)
            })
            .max(1);
        let shared = self.shared.clone();
        let max = shared.limits.max_file_bytes;
        let policy = ctx.policy.clone();
        let (rel, existing) = blocking(move || {
            let rel = shared.ws.resolve(&path).map_err(failure)?;
            forbidden_read(&shared, &policy, READ_FILE, &rel)?;
            let existing = shared.ws.load(&rel, max).map_err(failure)?;
            Ok((sandbox::display(&rel), existing))
        })
        .await?;
        let quoted = quote_path(&rel);
        let bytes = match existing {
            Existing::File(bytes) => bytes,
            Existing::Missing => {
                return Err(ToolFailure::new(format!("`{quoted}` does not exist")));
            }
            Existing::Dir => {
                return Err(ToolFailure::new(format!(
                    "`{quoted}` is a directory; use list_dir to see what it holds"
                )));
            }
            Existing::Special => {
                return Err(ToolFailure::new(format!(
                    "`{quoted}` is not a regular file (a FIFO, socket or device); it is not read"
                )));
            }
            Existing::TooLarge(size) => {
                return Ok(json!({"path": rel, "kind": "too_large", "bytes": size, "limit": max}));
            }
        };
        let Some(text) = shown_text(&bytes) else {
            // Nothing of it is shown: not a read as far as read-before-edit is concerned.
            return Ok(json!({"path": rel, "kind": "binary", "bytes": bytes.len()}));
        };
        let total = text.lines().count();
        let shown = if text.is_empty() {
            json!({"path": rel, "kind": "empty"})
        } else if offset > total {
            return Err(ToolFailure::new(format!(
                "offset {offset} is past the end of `{quoted}`, which has {}",
                plural(total, "line")
            )));
        } else {
            numbered(&self.shared, &rel, text, offset, limit)
        };
        // Only a read that showed the model the file records a read, with the hash of the
        // very bytes shown; and it is in place before the result is returned. The result
        // keeps the record too, so a session continued from its log remembers the read.
        let hash = ContentHash::of(&bytes);
        if let Err(e) = self
            .shared
            .monitor
            .record_read(&ctx.agent, &rel, hash)
            .await
        {
            tracing::warn!(error = %e, path = %rel, "the read could not be recorded");
        }
        Ok(records::with_records(
            shown,
            vec![records::entry(&rel, Some(hash))],
        ))
    }

    fn result_meta(&self, value: &Value) -> Option<serde_json::Map<String, Value>> {
        records::meta_of(value)
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let path = value["path"].as_str().unwrap_or("?");
        let text = match value["kind"].as_str() {
            Some("empty") => format!("`{path}` is empty."),
            Some("binary") => format!(
                "`{path}` is a binary file ({} bytes, or not UTF-8 text); its contents are not shown.",
                value["bytes"]
            ),
            Some("too_large") => format!(
                "`{path}` is {} bytes, over the {}-byte limit of read_file; it is not shown. \
                 Use grep to find the part you need.",
                value["bytes"], value["limit"]
            ),
            _ => {
                let mut out = value["text"].as_str().unwrap_or_default().to_string();
                let first = value["first_line"].as_u64().unwrap_or(1);
                let last = value["last_line"].as_u64().unwrap_or(0);
                let total = value["total_lines"].as_u64().unwrap_or(0);
                if last < total {
                    let _ = write!(
                        out,
                        "\n[truncated: showing lines {first}-{last} of {total}; call read_file with offset={} to read on]",
                        last + 1
                    );
                } else if first > 1 {
                    let _ = write!(out, "\n[showing lines {first}-{last} of {total}]");
                }
                let cut = value["cut_lines"].as_u64().unwrap_or(0);
                if cut > 0 {
                    let _ = write!(out, "\n[{cut} overlong line(s) were cut short]");
                }
                out
            }
        };
        vec![ContentBlock::text(text)]
    }
}
