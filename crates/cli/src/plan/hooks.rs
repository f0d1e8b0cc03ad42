//! The command hooks of a plan: `--hooks` and the Claude Code settings files' `hooks`, run
//! together as Claude Code merges its settings files' hooks.

use super::HooksPlan;
use crate::cli::PipelineOptions;
use crate::error::CliError;
use crate::output::note;
use dsh_command_hooks::{CommandHooks, HookSettings};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The hooks of `--hooks` and of `settings`; `None` when no file names any.
pub(super) fn plan(
    options: &PipelineOptions,
    settings: &[(PathBuf, String)],
    root: &Path,
    transcript_path: &Path,
) -> Result<Option<HooksPlan>, CliError> {
    let mut files = Vec::new();
    if let Some(file) = &options.hooks {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::io("read the hooks file", file, e))?;
        files.push((file.clone(), text));
    }
    files.extend(settings.iter().cloned());
    if files.is_empty() {
        return Ok(None);
    }
    let settings = merged(&files)?;
    // Hooks get the log as `transcript_path`, and its name as a `session_id` that stays the
    // same when a later run continues the log.
    let log = std::path::absolute(transcript_path).unwrap_or_else(|_| transcript_path.into());
    let session_id = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dsh".into());
    let hooks = CommandHooks::new(settings, root)
        .with_session_id(session_id)
        .with_transcript_path(log)
        // A hook that failed or gave an answer dsh could not read is said on stderr.
        .with_warnings(Arc::new(|line: &str| note(line)));
    Ok(Some(HooksPlan {
        files: files.into_iter().map(|(file, _)| file).collect(),
        hooks,
    }))
}

/// Every file's hooks, one settings; each file must be valid on its own, so its errors
/// name it.
fn merged(files: &[(PathBuf, String)]) -> Result<HookSettings, CliError> {
    let mut merged = serde_json::Map::new();
    for (file, text) in files {
        let bad = |e: String| CliError::Usage(format!("hooks file {}: {e}", file.display()));
        HookSettings::from_json(text).map_err(|e| bad(e.to_string()))?;
        let value: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if let Some(Value::Object(events)) = value.get("hooks") {
            for (event, groups) in events {
                let entry = merged
                    .entry(event.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let (Value::Array(all), Value::Array(groups)) = (entry, groups) {
                    all.extend(groups.iter().cloned());
                }
            }
        }
    }
    let text = serde_json::json!({ "hooks": merged }).to_string();
    HookSettings::from_json(&text).map_err(|e| CliError::Usage(format!("hooks files: {e}")))
}
