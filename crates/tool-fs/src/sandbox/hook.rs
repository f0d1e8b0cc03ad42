//! The sandbox as a `tools/pre-execute` handler.

use crate::error::{Denial, FsError};
use crate::tools::{self, GLOB, MUTATING};
use crate::toolset::Shared;
use async_trait::async_trait;
use dsh_core::hooks::{HookError, PreExecuteContext, PreExecuteHandler, PreExecuteOutcome};
use dsh_core::{Access, Confinement};
use std::path::{Component, Path, PathBuf};
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

impl Sandbox {
    /// Any other tool: the paths it declares ([`dsh_core::ToolDefinition::declared_paths`])
    /// must resolve inside the workspace, and in read-only mode it may declare no write. A
    /// tool that declares nothing passes untouched.
    async fn declared(&self, call: &PreExecuteContext<'_>) -> Result<PreExecuteOutcome, HookError> {
        let declared = call.tool.declared_paths(call.arguments);
        if declared.is_empty() {
            return Ok(PreExecuteOutcome::abstain());
        }
        let tool = call.tool.name();
        if self.shared.read_only
            && let Some(write) = declared.iter().find(|d| d.access == Access::Write)
        {
            return Ok(PreExecuteOutcome::deny(format!(
                "the workspace is read-only: {tool} may not write `{}`",
                write.raw
            )));
        }
        let shared = self.shared.clone();
        let checked = tokio::task::spawn_blocking(move || {
            declared
                .iter()
                .try_for_each(|d| shared.ws.resolve(&d.raw).map(|_| ()))
        })
        .await
        .map_err(|e| HookError::new(format!("the path check failed: {e}")))?;
        Ok(match checked {
            Ok(()) => PreExecuteOutcome::abstain(),
            Err(e) => PreExecuteOutcome::deny(e.to_string()),
        })
    }
}

/// The workspace as the pipeline's [`Confinement`]: every tool's declared paths are resolved
/// through it before the body runs.
pub(crate) struct SharedConfinement(pub(crate) Arc<Shared>);

impl std::fmt::Debug for SharedConfinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SharedConfinement")
            .field(&self.0.ws.root())
            .finish()
    }
}

impl Confinement for SharedConfinement {
    fn root(&self) -> &Path {
        self.0.ws.root()
    }

    fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        Confinement::resolve(&self.0.ws, raw)
    }

    fn read(&self, rel: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
        Confinement::read(&self.0.ws, rel, max_bytes)
    }

    fn write(&self, rel: &Path, bytes: &[u8]) -> std::io::Result<()> {
        if self.0.read_only {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the workspace is read-only",
            ));
        }
        Confinement::write(&self.0.ws, rel, bytes)
    }
}

#[async_trait]
impl PreExecuteHandler for Sandbox {
    fn confinement(&self) -> Option<Arc<dyn Confinement>> {
        Some(Arc::new(SharedConfinement(self.shared.clone())))
    }

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
            return self.declared(call).await;
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
