//! The seven file tools, and what they share: running blocking work off the async workers,
//! turning errors into failures, the permission subjects, and the guard every mutation
//! passes (read-only mode, then the `fs/*-intent` handlers).

mod apply_patch;
mod edit_file;
mod glob;
mod grep;
mod list_dir;
mod read_file;
mod walk;
mod write_file;

pub use apply_patch::ApplyPatch;
pub use edit_file::EditFile;
pub use glob::Glob;
pub use grep::Grep;
pub use list_dir::ListDir;
pub use read_file::ReadFile;
pub use write_file::WriteFile;

use crate::error::{Denial, FsError, quote_path};
use crate::hash::ContentHash;
use crate::intent::{FsIntent, FsOp};
use crate::patch;
use crate::sandbox;
use crate::toolset::Shared;
use dsh_core::{Access, ErrorCode, PathPolicies, PathPolicy, ToolContext, ToolFailure};
use serde_json::Value;
use std::path::Path;

/// `read_file`.
pub const READ_FILE: &str = "read_file";
/// `list_dir`.
pub const LIST_DIR: &str = "list_dir";
/// `glob`.
pub const GLOB: &str = "glob";
/// `grep`.
pub const GREP: &str = "grep";
/// `write_file`.
pub const WRITE_FILE: &str = "write_file";
/// `edit_file`.
pub const EDIT_FILE: &str = "edit_file";
/// `apply_patch`.
pub const APPLY_PATCH: &str = "apply_patch";

/// The tools that change files.
pub const MUTATING: [&str; 3] = [WRITE_FILE, EDIT_FILE, APPLY_PATCH];
/// Every tool of the toolset.
pub const ALL: [&str; 7] = [
    READ_FILE,
    LIST_DIR,
    GLOB,
    GREP,
    WRITE_FILE,
    EDIT_FILE,
    APPLY_PATCH,
];

/// Runs blocking file work on tokio's blocking pool.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, ToolFailure>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolFailure> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(answer) => answer,
        Err(e) if e.is_panic() => Err(ToolFailure::new("the file operation panicked")),
        Err(_) => Err(ToolFailure::new("the file operation was cancelled")),
    }
}

/// A crate error as the tool's failure: refusals of the confinement are `DENIED`.
pub(crate) fn failure(e: FsError) -> ToolFailure {
    let code = if e.is_denial() {
        ErrorCode::Denied
    } else {
        ErrorCode::ToolError
    };
    ToolFailure::with_code(code, e.to_string())
}

/// A generated argument schema without its `default`: the built-in tools' schemas say an
/// optional argument's default in its description, as they always have.
pub(crate) fn without_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

/// A generated arguments schema without the root `description` its Rust type's doc comment
/// gives: the tool's own description tells the model what the arguments are for.
pub(crate) fn without_description(schema: &mut schemars::Schema) {
    schema.remove("description");
}

/// A string argument (the schema has made sure of its type when it is required).
pub(crate) fn arg<'a>(input: &'a Value, name: &str) -> Option<&'a str> {
    input.get(name).and_then(Value::as_str)
}

/// The paths a call names, as written: `path` for the file tools (`.` when optional and
/// absent), every path of the patch for `apply_patch`. `None` for a tool not of this set.
pub(crate) fn named_paths(tool: &str, input: &Value) -> Option<Vec<String>> {
    match tool {
        READ_FILE | WRITE_FILE | EDIT_FILE | LIST_DIR => {
            Some(arg(input, "path").map(str::to_string).into_iter().collect())
        }
        GLOB | GREP => Some(vec![arg(input, "path").unwrap_or(".").to_string()]),
        APPLY_PATCH => Some(
            arg(input, "input")
                .and_then(|text| patch::parse(text).ok())
                .map(|p| p.paths().into_iter().map(str::to_string).collect())
                .unwrap_or_default(),
        ),
        _ => None,
    }
}

/// The paths a call of a file tool names, with the access the tool declares: write for the
/// three that change files, read for the others.
pub(crate) fn declared(tool: &str, input: &Value) -> Vec<dsh_core::DeclaredPath> {
    let access = if MUTATING.contains(&tool) {
        Access::Write
    } else {
        Access::Read
    };
    named_paths(tool, input)
        .unwrap_or_default()
        .into_iter()
        .map(|raw| dsh_core::DeclaredPath {
            arg: if tool == APPLY_PATCH { "input" } else { "path" }.to_string(),
            raw,
            access,
        })
        .collect()
}

/// What permission rules match against: each path as written, and also as resolved inside
/// the workspace (normalized, symlinks followed), so `./secrets/k`, `/ws/secrets/k` and a
/// symlink to `secrets/` are all caught by `tool(secrets/**)`.
///
/// The trait method is synchronous, so the few `lstat` calls of the resolution run on the
/// caller's thread; they are the price of closing the symlink detour around a rule.
pub(crate) fn permission_subjects(shared: &Shared, tool: &str, input: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for path in named_paths(tool, input).unwrap_or_default() {
        let resolved = shared
            .ws
            .resolve(&path)
            .ok()
            .map(|rel| sandbox::display(&rel));
        for subject in std::iter::once(path).chain(resolved) {
            if !out.contains(&subject) {
                out.push(subject);
            }
        }
    }
    out
}

/// Refuses `access` to `rel` (resolved, relative to the root) when the pipeline's path policy
/// forbids it whatever was approved: a deny rule, or one of dsh's own files for a write.
/// Asked by each tool about the paths its call named, as it uses them.
pub(crate) fn forbidden(
    shared: &Shared,
    policy: &PathPolicies,
    tool: &str,
    access: Access,
    rel: &Path,
) -> Result<(), ToolFailure> {
    match policy.forbids(tool, access, &shared.ws.root().join(rel)) {
        None => Ok(()),
        Some(why) => Err(ToolFailure::with_code(
            ErrorCode::Denied,
            format!(
                "{} `{}` is denied: {why}",
                match access {
                    Access::Read => "reading",
                    Access::Write => "changing",
                },
                quote_path(&sandbox::display(rel))
            ),
        )),
    }
}

/// [`forbidden`] for reading.
pub(crate) fn forbidden_read(
    shared: &Shared,
    policy: &PathPolicies,
    tool: &str,
    rel: &Path,
) -> Result<(), ToolFailure> {
    forbidden(shared, policy, tool, Access::Read, rel)
}

/// [`forbidden`] for writing.
pub(crate) fn forbidden_write(
    shared: &Shared,
    policy: &PathPolicies,
    tool: &str,
    rel: &Path,
) -> Result<(), ToolFailure> {
    forbidden(shared, policy, tool, Access::Write, rel)
}

/// Everything a mutation passes before it touches the disk: read-only mode, then the
/// `fs/write-intent` / `fs/edit-intent` handlers (the read-before-edit rule first).
pub(crate) async fn announce(
    shared: &Shared,
    ctx: &ToolContext,
    tool: &str,
    op: FsOp,
    path: &str,
    current: Option<ContentHash>,
) -> Result<(), ToolFailure> {
    if shared.read_only {
        return Err(failure(FsError::denied(path, Denial::ReadOnly)));
    }
    let intent = FsIntent {
        op,
        tool: tool.to_string(),
        call_id: ctx.call_id.clone(),
        agent: ctx.agent.clone(),
        path: path.to_string(),
        current,
    };
    shared.handlers.check(&intent).await
}

/// What a dry run keeps of a check's outcome: a refusal (`DENIED`) is the dry run's answer;
/// any other failure (a missing file, a directory) is the body's to report when it runs,
/// not a refusal, so the dry run stops there without one (`Ok(None)`).
pub(crate) fn refusal_only<T>(checked: Result<T, ToolFailure>) -> Result<Option<T>, ToolFailure> {
    match checked {
        Ok(value) => Ok(Some(value)),
        Err(f) if f.code == ErrorCode::Denied => Err(f),
        Err(_) => Ok(None),
    }
}

/// Fails when the call was cancelled, so a write is not started for a result nobody keeps.
pub(crate) fn not_cancelled(ctx_signal: &dsh_core::Signal) -> Result<(), ToolFailure> {
    match ctx_signal.reason() {
        Some(reason) => Err(ToolFailure::with_code(
            ErrorCode::Aborted,
            format!("the call was cancelled before the change was written: {reason}"),
        )),
        None => Ok(()),
    }
}

/// `1 line` / `3 lines`.
pub(crate) fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {one}s")
    }
}
