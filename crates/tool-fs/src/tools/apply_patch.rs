//! `apply_patch`: a patch in Codex's format, all or nothing.
//!
//! Three phases: plan (parse, read every file, apply every hunk in memory), announce (every
//! `fs/*-intent`, so the read-before-edit rule and the other handlers see the whole change
//! before any of it happens), commit (atomic writes, then deletions). A failure while
//! planning or announcing changes nothing; an I/O failure while committing rolls back what
//! was already written.

use super::edit_file::load_text;
use super::write_file::inspect_target;
use super::{
    APPLY_PATCH, announce, arg, blocking, failure, forbidden_write, not_cancelled,
    permission_subjects, refusal_only,
};
use crate::error::FsError;
use crate::hash::ContentHash;
use crate::intent::FsOp;
use crate::patch::{self, FileOp};
use crate::records;
use crate::sandbox;
use crate::toolset::Shared;
use crate::workspace::Existing;
use async_trait::async_trait;
use cap_std::fs::Permissions;
use dsh_core::{ContentBlock, PathPolicies, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `apply_patch(input)`.
pub struct ApplyPatch {
    shared: Arc<Shared>,
}

impl ApplyPatch {
    pub(crate) fn new(shared: Arc<Shared>) -> ApplyPatch {
        ApplyPatch { shared }
    }
}

/// One change to make on disk, with what was there before (to roll back).
struct Change {
    rel: PathBuf,
    shown: String,
    /// The new bytes, or `None` to delete.
    write: Option<Vec<u8>>,
    /// The file's bytes before, or `None` when it did not exist.
    before: Option<Vec<u8>>,
    /// The permissions the written file gets (a move carries its source's); `None` keeps
    /// the target's own, or the default for a new file.
    permissions: Option<Permissions>,
    /// The file's permissions before, restored with `before` on a roll back.
    before_permissions: Option<Permissions>,
}

struct Plan {
    intents: Vec<(FsOp, String, Option<ContentHash>)>,
    changes: Vec<Change>,
    summary: Vec<String>,
}

fn refuse(e: FsError) -> ToolFailure {
    failure(e)
}

fn file_error(path: &str, message: impl Into<String>) -> ToolFailure {
    refuse(FsError::PatchFile {
        path: path.to_string(),
        message: message.into(),
    })
}

fn current_bytes(shared: &Shared, rel: &Path) -> Result<Option<Vec<u8>>, ToolFailure> {
    match shared
        .ws
        .load(rel, shared.limits.max_file_bytes)
        .map_err(failure)?
    {
        Existing::File(bytes) => Ok(Some(bytes)),
        _ => Ok(None),
    }
}

fn current_permissions(shared: &Shared, rel: &Path) -> Result<Option<Permissions>, ToolFailure> {
    shared.ws.file_permissions(rel).map_err(failure)
}

/// Keeps what a patch holds in memory (files as found, and as they will be) under the
/// limits: each new file at most `max_file_bytes`, all of it at most `max_patch_bytes`.
struct Budget {
    per_file: u64,
    total: u64,
    held: u64,
}

impl Budget {
    fn take(&mut self, bytes: usize) -> Result<(), ToolFailure> {
        self.held = self.held.saturating_add(bytes as u64);
        if self.held > self.total {
            return Err(refuse(FsError::TooLarge {
                what: "the files this patch reads and writes",
                size: self.held,
                limit: self.total,
            }));
        }
        Ok(())
    }

    fn result(&self, shown: &str, bytes: usize) -> Result<(), ToolFailure> {
        if bytes as u64 > self.per_file {
            return Err(file_error(
                shown,
                refuse(FsError::TooLarge {
                    what: "the file",
                    size: bytes as u64,
                    limit: self.per_file,
                })
                .message,
            ));
        }
        Ok(())
    }
}

fn plan(shared: &Shared, policy: &PathPolicies, text: &str) -> Result<Plan, ToolFailure> {
    let parsed = patch::parse(text).map_err(refuse)?;
    let mut budget = Budget {
        per_file: shared.limits.max_file_bytes,
        total: shared.limits.max_patch_bytes,
        held: 0,
    };
    let mut plan = Plan {
        intents: Vec::new(),
        changes: Vec::new(),
        summary: Vec::new(),
    };
    let mut touched: Vec<String> = Vec::new();
    let mut touch = |shown: &str| {
        if touched.iter().any(|t| t == shown) {
            return Err(file_error(
                shown,
                "the patch touches this file more than once; put all its changes in one section",
            ));
        }
        touched.push(shown.to_string());
        Ok(())
    };
    for op in &parsed.ops {
        match op {
            FileOp::Add { path, content } => {
                let (rel, shown, current) = inspect_target(shared, policy, APPLY_PATCH, path)?;
                touch(&shown)?;
                budget.result(&shown, content.len())?;
                let before = current_bytes(shared, &rel)?;
                budget.take(before.as_ref().map_or(0, Vec::len) + content.len())?;
                let before_permissions = current_permissions(shared, &rel)?;
                let fs_op = if current.is_some() {
                    FsOp::Overwrite
                } else {
                    FsOp::Create
                };
                plan.intents.push((fs_op, shown.clone(), current));
                plan.summary.push(format!("A {shown}"));
                plan.changes.push(Change {
                    rel,
                    shown,
                    write: Some(content.clone().into_bytes()),
                    before,
                    permissions: None,
                    before_permissions,
                });
            }
            FileOp::Delete { path } => {
                let rel = shared.ws.resolve(path).map_err(failure)?;
                forbidden_write(shared, policy, APPLY_PATCH, &rel)?;
                let shown = sandbox::display(&rel);
                touch(&shown)?;
                let bytes = match shared
                    .ws
                    .load(&rel, shared.limits.max_file_bytes)
                    .map_err(failure)?
                {
                    Existing::File(bytes) => bytes,
                    Existing::Missing => {
                        return Err(file_error(&shown, "cannot delete: it does not exist"));
                    }
                    Existing::Dir => {
                        return Err(file_error(&shown, "cannot delete: it is a directory"));
                    }
                    Existing::Special | Existing::TooLarge(_) => {
                        return Err(file_error(
                            &shown,
                            "cannot delete: not a regular file within the size limit",
                        ));
                    }
                };
                let before_permissions = current_permissions(shared, &rel)?;
                budget.take(bytes.len())?;
                plan.intents
                    .push((FsOp::Delete, shown.clone(), Some(ContentHash::of(&bytes))));
                plan.summary.push(format!("D {shown}"));
                plan.changes.push(Change {
                    rel,
                    shown,
                    write: None,
                    before: Some(bytes),
                    permissions: None,
                    before_permissions,
                });
            }
            FileOp::Update {
                path,
                move_to,
                hunks,
            } => {
                let (rel, shown, text) =
                    load_text(shared, policy, APPLY_PATCH, path).map_err(|e| {
                        ToolFailure::with_code(e.code, format!("cannot update: {}", e.message))
                    })?;
                touch(&shown)?;
                let updated = patch::apply_hunks(&shown, &text, hunks).map_err(refuse)?;
                budget.result(&shown, updated.len())?;
                budget.take(text.len() + updated.len())?;
                let current = Some(ContentHash::of(text.as_bytes()));
                let permissions = current_permissions(shared, &rel)?;
                let target = match move_to {
                    Some(to) => {
                        let (to_rel, to_shown, to_current) =
                            inspect_target(shared, policy, APPLY_PATCH, to)?;
                        (to_shown != shown).then_some((to_rel, to_shown, to_current))
                    }
                    None => None,
                };
                match target {
                    None => {
                        plan.intents.push((FsOp::Edit, shown.clone(), current));
                        plan.summary.push(format!("M {shown}"));
                        plan.changes.push(Change {
                            rel,
                            shown,
                            write: Some(updated.into_bytes()),
                            before: Some(text.into_bytes()),
                            permissions: None,
                            before_permissions: permissions,
                        });
                    }
                    Some((to_rel, to_shown, to_current)) => {
                        touch(&to_shown)?;
                        let to_before = current_bytes(shared, &to_rel)?;
                        budget.take(to_before.as_ref().map_or(0, Vec::len))?;
                        let to_permissions = current_permissions(shared, &to_rel)?;
                        let to_op = if to_current.is_some() {
                            FsOp::Overwrite
                        } else {
                            FsOp::Create
                        };
                        plan.intents.push((FsOp::Edit, shown.clone(), current));
                        plan.intents.push((to_op, to_shown.clone(), to_current));
                        plan.summary.push(format!("R {shown} -> {to_shown}"));
                        plan.changes.push(Change {
                            rel: to_rel,
                            shown: to_shown,
                            write: Some(updated.into_bytes()),
                            before: to_before,
                            // A moved script stays executable.
                            permissions: permissions.clone(),
                            before_permissions: to_permissions,
                        });
                        plan.changes.push(Change {
                            rel,
                            shown,
                            write: None,
                            before: Some(text.into_bytes()),
                            permissions: None,
                            before_permissions: permissions,
                        });
                    }
                }
            }
        }
    }
    // Writes before deletions: a move is never left with its source gone and no target.
    plan.changes.sort_by_key(|c| c.write.is_none());
    Ok(plan)
}

fn undo(shared: &Shared, done: &[Change]) {
    for change in done.iter().rev() {
        let restored = match &change.before {
            Some(bytes) => {
                shared
                    .ws
                    .write_atomic_with(&change.rel, bytes, change.before_permissions.as_ref())
            }
            None => shared.ws.remove_file(&change.rel),
        };
        if let Err(e) = restored {
            tracing::error!(path = %change.shown, error = %e, "apply_patch could not roll back a change");
        }
    }
}

fn commit(shared: &Shared, policy: &PathPolicies, changes: &[Change]) -> Result<(), ToolFailure> {
    // Every target again at the last moment, on what its path leads to now, before any of
    // them is touched.
    for change in changes {
        forbidden_write(shared, policy, APPLY_PATCH, &change.rel)?;
    }
    for (i, change) in changes.iter().enumerate() {
        let done = match &change.write {
            Some(bytes) => {
                shared
                    .ws
                    .write_atomic_with(&change.rel, bytes, change.permissions.as_ref())
            }
            None => shared.ws.remove_file(&change.rel),
        };
        if let Err(e) = done {
            undo(shared, &changes[..i]);
            return Err(ToolFailure::new(format!(
                "{e}; the changes already made by this patch were rolled back"
            )));
        }
    }
    Ok(())
}

#[async_trait]
impl ToolDefinition for ApplyPatch {
    fn name(&self) -> &str {
        APPLY_PATCH
    }

    fn description(&self) -> &str {
        "Applies a patch in this format (all or nothing):\n\
         *** Begin Patch\n\
         *** Add File: path/new.txt\n\
         +each line of the new file\n\
         *** Update File: path/old.txt\n\
         *** Move to: path/renamed.txt   (optional)\n\
         @@ a line near the change, such as a function header (optional)\n \
         context line\n\
         -removed line\n\
         +added line\n\
         *** Delete File: path/gone.txt\n\
         *** End Patch\n\
         Files updated, replaced or deleted must have been read first."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": "The whole patch, from `*** Begin Patch` to `*** End Patch`."}
            },
            "required": ["input"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {"changes": {"type": "array", "items": {"type": "string"}}},
            "required": ["changes"]
        }))
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(60_000)
    }

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        permission_subjects(&self.shared, APPLY_PATCH, input)
    }

    fn declares_paths(&self) -> bool {
        true
    }

    fn declared_paths(&self, input: &Value) -> Vec<dsh_core::DeclaredPath> {
        super::declared(APPLY_PATCH, input)
    }

    fn resolves_own_paths(&self) -> bool {
        true
    }

    async fn dry_run(&self, input: Value, ctx: ToolContext) -> Result<(), ToolFailure> {
        let text = arg(&input, "input").unwrap_or_default().to_string();
        let shared = self.shared.clone();
        let policy = ctx.policy.clone();
        let planned = blocking(move || plan(&shared, &policy, &text)).await;
        let Some(planned) = refusal_only(planned)? else {
            return Ok(());
        };
        for (op, path, current) in &planned.intents {
            announce(&self.shared, &ctx, APPLY_PATCH, *op, path, *current).await?;
        }
        // Nothing is written: records keep what is on disk, and a deleted file is forgotten.
        for (op, path, current) in &planned.intents {
            match op {
                FsOp::Delete => self.shared.monitor.record_write(&ctx.agent, path, None),
                _ if current.is_some() => {
                    self.shared.monitor.record_write(&ctx.agent, path, *current)
                }
                _ => {}
            }
        }
        Ok(())
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let text = arg(&input, "input").unwrap_or_default().to_string();
        let shared = self.shared.clone();
        let policy = ctx.policy.clone();
        let planned = blocking(move || plan(&shared, &policy, &text))
            .await
            .map_err(|e| {
                ToolFailure::with_code(
                    e.code,
                    format!("apply_patch changed nothing: {}", e.message),
                )
            })?;
        for (op, path, current) in &planned.intents {
            announce(&self.shared, &ctx, APPLY_PATCH, *op, path, *current)
                .await
                .map_err(|e| {
                    ToolFailure::with_code(
                        e.code,
                        format!("apply_patch changed nothing: {}", e.message),
                    )
                })?;
        }
        let Plan {
            changes, summary, ..
        } = planned;
        let shared = self.shared.clone();
        let signal = ctx.signal.clone();
        let policy = ctx.policy.clone();
        let changes = blocking(move || {
            not_cancelled(&signal)?;
            commit(&shared, &policy, &changes)?;
            Ok(changes)
        })
        .await?;
        let mut recorded = Vec::with_capacity(changes.len());
        for change in &changes {
            let hash = change.write.as_deref().map(ContentHash::of);
            self.shared
                .monitor
                .record_write(&ctx.agent, &change.shown, hash);
            recorded.push(records::entry(&change.shown, hash));
        }
        Ok(records::with_records(
            json!({ "changes": summary }),
            recorded,
        ))
    }

    fn result_meta(&self, value: &Value) -> Option<serde_json::Map<String, Value>> {
        records::meta_of(value)
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        let changes: Vec<&str> = value["changes"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        vec![ContentBlock::text(format!(
            "Applied the patch:\n{}",
            changes.join("\n")
        ))]
    }
}
