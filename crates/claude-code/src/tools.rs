//! The profile's tools: Claude Code's names and schemas, each over one built-in tool.

use crate::error::ClaudeCodeError;
use async_trait::async_trait;
use dsh_core::tool::{ExecutionMode, RetryPolicy};
use dsh_core::{ContentBlock, SubjectKind, ToolContext, ToolDefinition, ToolFailure};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// One tool of the profile.
#[derive(Debug, Clone, Copy)]
pub struct ProfileEntry {
    /// Claude Code's name for it.
    pub name: &'static str,
    /// The built-in tool it stands on.
    pub builtin: &'static str,
    /// Whether it changes things (Claude Code asks before these by default).
    pub changes_things: bool,
    description: &'static str,
    schema: fn() -> Value,
    translate: fn(&Value) -> Value,
    /// Optional arguments whose empty value means "not given" (strict function calling).
    empties: &'static [&'static str],
}

/// The `claude-code` profile, in Claude Code's order.
pub const PROFILE: [ProfileEntry; 8] = [
    ProfileEntry {
        name: "Read",
        builtin: "read_file",
        changes_things: false,
        description: "Reads a file. `file_path` may be absolute (inside the workspace) or relative \
                      to it; `offset` is the first line (1-based) and `limit` how many lines.",
        schema: read_schema,
        translate: read_input,
        empties: &["offset", "limit"],
    },
    ProfileEntry {
        name: "Write",
        builtin: "write_file",
        changes_things: true,
        description: "Writes a whole file. An existing file must have been read first.",
        schema: write_schema,
        translate: write_input,
        empties: &[],
    },
    ProfileEntry {
        name: "Edit",
        builtin: "edit_file",
        changes_things: true,
        description: "Replaces `old_string` by `new_string` in a file read before; `old_string` must \
                      occur once unless `replace_all` is true.",
        schema: edit_schema,
        translate: edit_input,
        empties: &[],
    },
    ProfileEntry {
        name: "MultiEdit",
        builtin: "edit_file",
        changes_things: true,
        description: "Several edits to one file read before, applied in order: all of them or none.",
        schema: multi_edit_schema,
        translate: multi_edit_input,
        empties: &[],
    },
    ProfileEntry {
        name: "Glob",
        builtin: "glob",
        changes_things: false,
        description: "Finds files by a glob pattern (`**/*.rs`) below `path` (default: the workspace).",
        schema: glob_schema,
        translate: same_input,
        empties: &["path"],
    },
    ProfileEntry {
        name: "Grep",
        builtin: "grep",
        changes_things: false,
        description: "Searches file contents with a regular expression (ripgrep's syntax).",
        schema: grep_schema,
        translate: grep_input,
        empties: &["path", "glob", "type", "output_mode", "head_limit"],
    },
    ProfileEntry {
        name: "LS",
        builtin: "list_dir",
        changes_things: false,
        description: "Lists a directory; `ignore` names glob patterns to leave out.",
        schema: ls_schema,
        translate: same_input,
        empties: &["ignore"],
    },
    ProfileEntry {
        name: "Bash",
        builtin: "shell",
        changes_things: true,
        description: "Runs a bash command in the workspace, in dsh's shell sandbox; `timeout` in \
                      milliseconds (at most 600000).",
        schema: bash_schema,
        translate: bash_input,
        empties: &["timeout"],
    },
];

/// The built-in tool a profile tool stands on.
pub fn builtin_of(name: &str) -> Option<&'static str> {
    PROFILE.iter().find(|t| t.name == name).map(|t| t.builtin)
}

/// The profile's tools over the given built-ins (`builtin(name)` answers the registered
/// built-in tool of that name).
pub fn profile_tools(
    builtin: impl Fn(&str) -> Option<Arc<dyn ToolDefinition>>,
) -> Result<Vec<Arc<dyn ToolDefinition>>, ClaudeCodeError> {
    PROFILE
        .iter()
        .map(|entry| {
            let inner = builtin(entry.builtin)
                .ok_or_else(|| ClaudeCodeError::MissingBuiltin(entry.builtin.to_string()))?;
            Ok(Arc::new(ProfileTool {
                entry: *entry,
                inner,
            }) as Arc<dyn ToolDefinition>)
        })
        .collect()
}

/// A profile tool: Claude Code's name and schema over a built-in tool.
pub struct ProfileTool {
    entry: ProfileEntry,
    inner: Arc<dyn ToolDefinition>,
}

impl std::fmt::Debug for ProfileTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileTool")
            .field("name", &self.entry.name)
            .field("builtin", &self.entry.builtin)
            .finish()
    }
}

impl ProfileTool {
    fn translate(&self, input: &Value) -> Value {
        (self.entry.translate)(input)
    }
}

#[async_trait]
impl ToolDefinition for ProfileTool {
    fn name(&self) -> &str {
        self.entry.name
    }

    fn description(&self) -> &str {
        self.entry.description
    }

    fn input_schema(&self) -> Value {
        (self.entry.schema)()
    }

    fn empty_means_absent(&self) -> &[&'static str] {
        self.entry.empties
    }

    fn output_schema(&self) -> Option<Value> {
        self.inner.output_schema()
    }

    fn execution_mode(&self) -> ExecutionMode {
        self.inner.execution_mode()
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        self.inner.is_concurrency_safe(&self.translate(input))
    }

    fn timeout_ms(&self) -> Option<u64> {
        self.inner.timeout_ms()
    }

    fn timeout_ms_for(&self, input: &Value) -> Option<u64> {
        self.inner.timeout_ms_for(&self.translate(input))
    }

    fn owns_deadline(&self) -> bool {
        self.inner.owns_deadline()
    }

    fn retry_policy(&self) -> Option<RetryPolicy> {
        self.inner.retry_policy()
    }

    fn permission_subject_kind(&self) -> SubjectKind {
        self.inner.permission_subject_kind()
    }

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        self.inner.permission_subjects(&self.translate(input))
    }

    // Declared paths are the built-in's, read from the translated input: `read(…)`/`write(…)`
    // intent rules and confinement see `Write`'s `file_path` as `write_file`'s `path`.
    fn declared_paths(&self, input: &Value) -> Vec<dsh_core::DeclaredPath> {
        self.inner.declared_paths(&self.translate(input))
    }

    fn declares_paths(&self) -> bool {
        self.inner.declares_paths()
    }

    fn resolves_own_paths(&self) -> bool {
        self.inner.resolves_own_paths()
    }

    fn stands_for(&self, input: &Value) -> Option<(String, Value)> {
        Some((self.entry.builtin.to_string(), self.translate(input)))
    }

    async fn dry_run(&self, input: Value, ctx: ToolContext) -> Result<(), ToolFailure> {
        self.inner.dry_run(self.translate(&input), ctx).await
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.inner.execute(self.translate(&input), ctx).await
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        self.inner.present(value)
    }

    fn result_meta(&self, value: &Value) -> Option<Map<String, Value>> {
        self.inner.result_meta(value)
    }

    fn finalize_content(&self, content: Vec<ContentBlock>) -> Vec<ContentBlock> {
        self.inner.finalize_content(content)
    }
}

/// Copies `from` (when present) to `to`.
fn copy(input: &Value, out: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(v) = input.get(from) {
        out.insert(to.to_string(), v.clone());
    }
}

fn mapped(input: &Value, pairs: &[(&str, &str)]) -> Value {
    let mut out = Map::new();
    for (from, to) in pairs {
        copy(input, &mut out, from, to);
    }
    Value::Object(out)
}

fn same_input(input: &Value) -> Value {
    input.clone()
}

fn read_input(input: &Value) -> Value {
    let mut out = mapped(input, &[("file_path", "path"), ("limit", "limit")]);
    // Claude Code's transcripts sometimes carry `offset: 0`; dsh's lines start at 1.
    if let Some(offset) = input.get("offset").and_then(Value::as_u64) {
        out["offset"] = json!(offset.max(1));
    }
    out
}

fn write_input(input: &Value) -> Value {
    mapped(input, &[("file_path", "path"), ("content", "content")])
}

fn edit_input(input: &Value) -> Value {
    mapped(
        input,
        &[
            ("file_path", "path"),
            ("old_string", "old_string"),
            ("new_string", "new_string"),
            ("replace_all", "replace_all"),
        ],
    )
}

fn multi_edit_input(input: &Value) -> Value {
    mapped(input, &[("file_path", "path"), ("edits", "edits")])
}

fn grep_input(input: &Value) -> Value {
    mapped(
        input,
        &[
            ("pattern", "pattern"),
            ("path", "path"),
            ("glob", "glob"),
            ("type", "type"),
            ("output_mode", "output_mode"),
            ("-i", "case_insensitive"),
            ("-A", "after"),
            ("-B", "before"),
            ("-C", "context"),
            ("multiline", "multiline"),
            ("head_limit", "head_limit"),
        ],
    )
}

fn bash_input(input: &Value) -> Value {
    mapped(
        input,
        &[
            ("command", "command"),
            ("timeout", "timeout_ms"),
            ("description", "description"),
        ],
    )
}

fn read_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The file (absolute, inside the workspace, or relative to it)."},
            "offset": {"type": "integer", "minimum": 0, "description": "The line to start at."},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read."}
        },
        "required": ["file_path"],
        "additionalProperties": false
    })
}

fn write_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The file to write."},
            "content": {"type": "string", "description": "Its whole new content."}
        },
        "required": ["file_path", "content"],
        "additionalProperties": false
    })
}

fn edit_object() -> Value {
    json!({
        "type": "object",
        "properties": {
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "What to put instead."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence."}
        },
        "required": ["old_string", "new_string"],
        "additionalProperties": false
    })
}

fn edit_schema() -> Value {
    let mut schema = edit_object();
    schema["properties"]["file_path"] =
        json!({"type": "string", "description": "The file to edit."});
    schema["required"] = json!(["file_path", "old_string", "new_string"]);
    schema
}

fn multi_edit_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The file to edit."},
            "edits": {"type": "array", "minItems": 1, "items": edit_object(),
                "description": "Applied in order, each to the result of the one before."}
        },
        "required": ["file_path", "edits"],
        "additionalProperties": false
    })
}

fn glob_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "The glob pattern (`**/*.rs`)."},
            "path": {"type": "string", "description": "The directory to search (default: the workspace)."}
        },
        "required": ["pattern"],
        "additionalProperties": false
    })
}

fn grep_schema() -> Value {
    let lines =
        |what: &str| json!({"type": "integer", "minimum": 0, "maximum": 20, "description": what});
    json!({
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "A regular expression."},
            "path": {"type": "string", "description": "A file or directory to search (default: the workspace)."},
            "glob": {"type": "string", "description": "Only files matching this glob."},
            "type": {"type": "string", "description": "Only files of this type (`rust`, `py`, `js`)."},
            "output_mode": {"enum": ["content", "files_with_matches", "count"]},
            "-i": {"type": "boolean", "description": "Case insensitive."},
            "-n": {"type": "boolean", "description": "Line numbers (content mode always shows them)."},
            "-A": lines("Lines after each match."),
            "-B": lines("Lines before each match."),
            "-C": lines("Lines around each match."),
            "multiline": {"type": "boolean", "description": "Let the pattern span lines."},
            "head_limit": {"type": "integer", "minimum": 0, "description": "Only the first N lines or files."}
        },
        "required": ["pattern"],
        "additionalProperties": false
    })
}

fn ls_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The directory (absolute, inside the workspace, or relative to it)."},
            "ignore": {"type": "array", "items": {"type": "string"}, "description": "Glob patterns of names to leave out."}
        },
        "required": ["path"],
        "additionalProperties": false
    })
}

fn bash_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The command."},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 600000, "description": "In milliseconds."},
            "description": {"type": "string", "description": "What it does, in a few words."}
        },
        "required": ["command"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_arguments_become_the_builtins_arguments() {
        let grep = grep_input(
            &json!({"pattern": "x", "-i": true, "-A": 2, "-B": 1, "-n": true,
            "head_limit": 5, "type": "rust", "multiline": true}),
        );
        assert_eq!(
            grep,
            json!({"pattern": "x", "case_insensitive": true, "after": 2, "before": 1,
                "head_limit": 5, "type": "rust", "multiline": true})
        );
        assert_eq!(
            bash_input(&json!({"command": "ls", "timeout": 5000, "description": "list"})),
            json!({"command": "ls", "timeout_ms": 5000, "description": "list"})
        );
        assert_eq!(
            read_input(&json!({"file_path": "/w/a", "offset": 0, "limit": 3})),
            json!({"path": "/w/a", "offset": 1, "limit": 3})
        );
        assert_eq!(
            multi_edit_input(
                &json!({"file_path": "a", "edits": [{"old_string": "x", "new_string": "y"}]})
            ),
            json!({"path": "a", "edits": [{"old_string": "x", "new_string": "y"}]})
        );
    }
}
