//! `edit_file`: replaces an exact string in a file.

use super::{
    EDIT_FILE, announce, arg, blocking, failure, forbidden_write, not_cancelled,
    permission_subjects, refusal_only,
};
use crate::edit::apply_edit_within;
use crate::error::quote_path;
use crate::hash::ContentHash;
use crate::intent::FsOp;
use crate::records;
use crate::sandbox;
use crate::toolset::Shared;
use crate::workspace::Existing;
use async_trait::async_trait;
use dsh_core::{ContentBlock, ErrorCode, PathPolicies, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// `edit_file(path, old_string, new_string, replace_all?)`, or `edit_file(path, edits)`: several
/// edits applied in order to the same file, all of them or none.
pub struct EditFile {
    shared: Arc<Shared>,
}

impl EditFile {
    pub(crate) fn new(shared: Arc<Shared>) -> EditFile {
        EditFile { shared }
    }
}

/// An existing text file about to be changed: its resolved path, shown form and text. A
/// file the path policy forbids `tool` to write is refused before it is read.
pub(crate) fn load_text(
    shared: &Shared,
    policy: &PathPolicies,
    tool: &str,
    path: &str,
) -> Result<(PathBuf, String, String), ToolFailure> {
    let rel = shared.ws.resolve(path).map_err(failure)?;
    forbidden_write(shared, policy, tool, &rel)?;
    let shown = sandbox::display(&rel);
    let quoted = quote_path(&shown);
    let bytes = match shared
        .ws
        .load(&rel, shared.limits.max_file_bytes)
        .map_err(failure)?
    {
        Existing::File(bytes) => bytes,
        Existing::Missing => {
            return Err(ToolFailure::new(format!(
                "`{quoted}` does not exist; use write_file to create it"
            )));
        }
        Existing::Dir => return Err(ToolFailure::new(format!("`{quoted}` is a directory"))),
        Existing::Special => {
            return Err(ToolFailure::new(format!(
                "`{quoted}` is not a regular file"
            )));
        }
        Existing::TooLarge(size) => {
            return Err(ToolFailure::new(format!(
                "`{quoted}` is {size} bytes, over the {}-byte limit for edits",
                shared.limits.max_file_bytes
            )));
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| {
        ToolFailure::new(format!(
            "`{quoted}` is not UTF-8 text; it cannot be edited as text"
        ))
    })?;
    Ok((rel, shown, text))
}

/// One replacement asked for.
struct Edit {
    old: String,
    new: String,
    replace_all: bool,
}

/// The edits of a call: `edits`, or the one of `old_string`/`new_string`; not both, not neither.
fn edits_of(input: &Value) -> Result<Vec<Edit>, ToolFailure> {
    let one = |v: &Value| Edit {
        old: arg(v, "old_string").unwrap_or_default().to_string(),
        new: arg(v, "new_string").unwrap_or_default().to_string(),
        replace_all: v
            .get("replace_all")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    // Beside `edits`, an empty `old_string` and `new_string` are what strict function calling
    // sends for "not given" (an empty `old_string` matches nothing anyway).
    let given = |key: &str| input.get(key).is_some_and(|v| v.as_str() != Some(""));
    let single = given("old_string") || given("new_string");
    match (input.get("edits").and_then(Value::as_array), single) {
        (Some(list), false) => Ok(list.iter().map(one).collect()),
        (None, true)
            if arg(input, "old_string").is_some() && arg(input, "new_string").is_some() =>
        {
            Ok(vec![one(input)])
        }
        (Some(_), true) => Err(ToolFailure::with_code(
            ErrorCode::ToolInputError,
            "give either `edits` or `old_string`/`new_string`, not both",
        )),
        _ => Err(ToolFailure::with_code(
            ErrorCode::ToolInputError,
            "give `old_string` and `new_string` (or `edits`)",
        )),
    }
}

#[async_trait]
impl ToolDefinition for EditFile {
    fn name(&self) -> &str {
        EDIT_FILE
    }

    fn description(&self) -> &str {
        "Replaces `old_string` by `new_string` in a file. `old_string` must occur exactly once \
         (include surrounding lines to make it unique) unless `replace_all` is true. The file \
         must have been read first. Line endings and a missing final newline are kept."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file, relative to the workspace root."},
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "What to put instead."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
                "edits": {
                    "type": "array",
                    "minItems": 1,
                    "description": "Instead of old_string/new_string: edits applied in order, each to the result of the one before; all of them or none.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "old_string": {"type": "string"},
                            "new_string": {"type": "string"},
                            "replace_all": {"type": "boolean"}
                        },
                        "required": ["old_string", "new_string"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "replacements": {"type": "integer", "minimum": 1}},
            "required": ["path", "replacements"]
        }))
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(30_000)
    }

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        permission_subjects(&self.shared, EDIT_FILE, input)
    }

    fn path_args(&self) -> Vec<dsh_core::PathArg> {
        vec![dsh_core::PathArg::write("path")]
    }

    fn declared_paths(&self, input: &Value) -> Vec<dsh_core::DeclaredPath> {
        super::declared(EDIT_FILE, input)
    }

    // Strict function calling sends these empty for "not given".
    fn empty_means_absent(&self) -> &[&'static str] {
        &["edits"]
    }

    fn resolves_own_paths(&self) -> bool {
        true
    }

    async fn dry_run(&self, input: Value, ctx: ToolContext) -> Result<(), ToolFailure> {
        let path = arg(&input, "path").unwrap_or_default().to_string();
        let shared = self.shared.clone();
        let policy = ctx.policy.clone();
        let loaded = blocking(move || load_text(&shared, &policy, EDIT_FILE, &path)).await;
        let Some((_, shown, text)) = refusal_only(loaded)? else {
            return Ok(());
        };
        let current = ContentHash::of(text.as_bytes());
        announce(
            &self.shared,
            &ctx,
            EDIT_FILE,
            FsOp::Edit,
            &shown,
            Some(current),
        )
        .await?;
        // Nothing is written: the record keeps what is on disk (see `WriteFile::dry_run`).
        self.shared
            .monitor
            .record_write(&ctx.agent, &shown, Some(current));
        Ok(())
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let path = arg(&input, "path").unwrap_or_default().to_string();
        let edits = edits_of(&input)?;
        let shared = self.shared.clone();
        let policy = ctx.policy.clone();
        let (rel, shown, text) =
            blocking(move || load_text(&shared, &policy, EDIT_FILE, &path)).await?;
        let current = ContentHash::of(text.as_bytes());
        announce(
            &self.shared,
            &ctx,
            EDIT_FILE,
            FsOp::Edit,
            &shown,
            Some(current),
        )
        .await?;
        let limit = usize::try_from(self.shared.limits.max_file_bytes).unwrap_or(usize::MAX);
        // Every edit applies to the text the one before left; any failure leaves the file as
        // it was.
        let (mut content, mut replacements) = (text, 0usize);
        let several = edits.len() > 1;
        for (i, edit) in edits.iter().enumerate() {
            let edited = apply_edit_within(&content, &edit.old, &edit.new, edit.replace_all, limit)
                .map_err(|e| {
                    let which = if several {
                        format!(" (edit {} of {}; no edit was made)", i + 1, edits.len())
                    } else {
                        String::new()
                    };
                    ToolFailure::new(format!("`{}`: {e}{which}", quote_path(&shown)))
                })?;
            content = edited.content;
            replacements += edited.replacements;
        }
        let hash = ContentHash::of(content.as_bytes());
        let shared = self.shared.clone();
        let signal = ctx.signal.clone();
        let policy = ctx.policy.clone();
        blocking(move || {
            not_cancelled(&signal)?;
            forbidden_write(&shared, &policy, EDIT_FILE, &rel)?;
            shared
                .ws
                .write_atomic(&rel, content.as_bytes())
                .map_err(failure)
        })
        .await?;
        self.shared
            .monitor
            .record_write(&ctx.agent, &shown, Some(hash));
        Ok(records::with_records(
            json!({"path": shown, "replacements": replacements}),
            vec![records::entry(&shown, Some(hash))],
        ))
    }

    fn result_meta(&self, value: &Value) -> Option<serde_json::Map<String, Value>> {
        records::meta_of(value)
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let path = value["path"].as_str().unwrap_or("?");
        let n = value["replacements"].as_u64().unwrap_or(0);
        let what = if n == 1 {
            "1 occurrence".to_string()
        } else {
            format!("{n} occurrences")
        };
        vec![ContentBlock::text(format!(
            "Edited `{path}`: replaced {what}."
        ))]
    }
}
