//! The sandbox as a `tools/pre-execute` handler.

use crate::error::{Denial, FsError};
use crate::tools::{self, GLOB, MUTATING};
use crate::toolset::Shared;
use async_trait::async_trait;
use dsh_core::hooks::{HookError, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome};
use std::path::{Component, Path};
use std::sync::Arc;

/// Refuses, before a file tool runs, any path that would leave the workspace, and every
/// mutation in read-only mode. Abstains otherwise (permissions decide the rest). Calls of
/// other tools pass untouched.
pub struct Sandbox {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("root", &self.shared.ws.root())
            .finish()
    }
}

impl Sandbox {
    pub(crate) fn new(shared: Arc<Shared>) -> Sandbox {
        Sandbox { shared }
    }
}

/// A glob pattern is matched below its base path, so it cannot reach outside; one that
/// tries (absolute, or with `..`) is refused so the model learns why it finds nothing.
pub(crate) fn check_glob_pattern(pattern: &str) -> Result<(), FsError> {
    let p = Path::new(pattern);
    if p.is_absolute() {
        return Err(FsError::denied(pattern, Denial::Outside));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(FsError::denied(pattern, Denial::ParentEscape));
    }
    Ok(())
}

#[async_trait]
impl PreExecuteHandler for Sandbox {
    fn name(&self) -> &str {
        "fs-sandbox"
    }

    async fn pre_execute(
        &self,
        call: &PreExecuteContext<'_>,
    ) -> Result<PreExecuteOutcome, HookError> {
        // An adapter (a profile's `Edit`) is judged as the built-in call it stands for.
        let shown = call.tool.name();
        let (tool, arguments) = match call.tool.stands_for(call.arguments) {
            Some((tool, arguments)) => (tool, std::borrow::Cow::Owned(arguments)),
            None => (
                shown.to_string(),
                std::borrow::Cow::Borrowed(call.arguments),
            ),
        };
        let tool = tool.as_str();
        let Some(paths) = tools::named_paths(tool, &arguments) else {
            return Ok(PreExecuteOutcome::abstain());
        };
        if self.shared.read_only && MUTATING.contains(&tool) {
            return Ok(PreExecuteOutcome::deny(format!(
                "the workspace is read-only: {shown} is not allowed"
            )));
        }
        if tool == GLOB {
            let pattern = tools::arg(&arguments, "pattern").unwrap_or("*");
            if let Err(e) = check_glob_pattern(pattern) {
                return Ok(PreExecuteOutcome::deny(e.to_string()));
            }
        }
        let shared = self.shared.clone();
        let checked = tokio::task::spawn_blocking(move || {
            paths
                .iter()
                .try_for_each(|p| shared.ws.resolve(p).map(|_| ()))
        })
        .await
        .map_err(|e| HookError::new(format!("the path check failed: {e}")))?;
        Ok(match checked {
            Ok(()) => PreExecuteOutcome::abstain(),
            Err(e) => PreExecuteOutcome::deny(e.to_string()),
        })
    }
}
