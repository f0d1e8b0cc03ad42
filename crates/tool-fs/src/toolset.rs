//! The toolset: one workspace, one fs-intent monitor, the intent handlers, and the seven
//! tools and the sandbox built on them.

use crate::error::FsError;
use crate::intent::{FsIntentHandler, IntentHandlers};
use crate::monitor::FsIntentMonitor;
use crate::sandbox::Sandbox;
use crate::tools;
use crate::workspace::Workspace;
use dsh_core::typed::Typed;
use dsh_core::{CoreError, PreExecuteHandler, ToolDefinition, ToolRegistry};
use ractor::ActorCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Sizes past which the tools cut their output (with a note saying so) or refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Files larger than this are not read (`read_file` says so) nor edited.
    pub max_file_bytes: u64,
    /// Lines `read_file` shows when no `limit` is given.
    pub read_lines: usize,
    /// Characters of one line `read_file` and `grep` show; the rest is cut with a note.
    pub max_line_chars: usize,
    /// Bytes of numbered text one `read_file` call shows.
    pub max_read_output: usize,
    /// Entries `list_dir` shows.
    pub max_entries: usize,
    /// Paths `glob` and `grep` (files and count modes) show.
    pub max_paths: usize,
    /// Lines `grep` shows in content mode.
    pub max_grep_lines: usize,
    /// Bytes of files one `apply_patch` may hold while it plans (each file it changes as it
    /// is and as it will be); a larger patch is refused, to be split.
    pub max_patch_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 10 * 1024 * 1024,
            read_lines: 2000,
            max_line_chars: 2000,
            max_read_output: 100 * 1024,
            max_entries: 1000,
            max_paths: 1000,
            max_grep_lines: 1000,
            max_patch_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The most entries [`FsToolset::remove_stale_temp_files`] looks at.
pub const MAX_SWEEP_ENTRIES: usize = 200_000;

/// What every tool of a toolset shares.
pub(crate) struct Shared {
    pub(crate) ws: Workspace,
    pub(crate) monitor: FsIntentMonitor,
    pub(crate) handlers: IntentHandlers,
    pub(crate) read_only: bool,
    pub(crate) limits: Limits,
}

/// Builds an [`FsToolset`].
#[derive(Debug)]
pub struct FsToolsetBuilder {
    root: PathBuf,
    read_only: bool,
    supervisor: Option<ActorCell>,
    limits: Limits,
}

impl FsToolsetBuilder {
    /// Refuse every mutation (`write_file`, `edit_file`, `apply_patch`).
    pub fn read_only(mut self, yes: bool) -> Self {
        self.read_only = yes;
        self
    }

    /// Link the fs-intent monitor under this supervisor.
    pub fn supervisor(mut self, supervisor: ActorCell) -> Self {
        self.supervisor = Some(supervisor);
        self
    }

    /// Output and size limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Opens the workspace root and starts the fs-intent monitor.
    pub async fn build(self) -> Result<FsToolset, FsError> {
        let root = self.root;
        let ws = tokio::task::spawn_blocking(move || Workspace::open(root))
            .await
            .map_err(|e| FsError::Spawn(e.to_string()))??;
        let monitor = FsIntentMonitor::spawn(self.supervisor).await?;
        let handlers = IntentHandlers::default();
        handlers.push(Arc::new(monitor.clone()));
        Ok(FsToolset {
            shared: Arc::new(Shared {
                ws,
                monitor,
                handlers,
                read_only: self.read_only,
                limits: self.limits,
            }),
        })
    }
}

/// The file tools over one workspace.
///
/// ```
/// use std::sync::Arc;
/// use dsh_core::{Hooks, ToolCall, ToolRegistry};
/// use dsh_tool_fs::FsToolset;
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let toolset = FsToolset::builder(dir.path()).build().await.unwrap();
/// let registry = Arc::new(ToolRegistry::new());
/// toolset.register(&registry).unwrap();
/// let mut hooks = Hooks::new();
/// hooks.pre_execute_arc(toolset.sandbox());
/// assert_eq!(registry.len(), 7);
/// toolset.shutdown().await;
/// # });
/// ```
#[derive(Clone)]
pub struct FsToolset {
    shared: Arc<Shared>,
}

impl fmt::Debug for FsToolset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsToolset")
            .field("root", &self.shared.ws.root())
            .field("read_only", &self.shared.read_only)
            .field("intent_handlers", &self.shared.handlers)
            .finish()
    }
}

impl FsToolset {
    /// Starts building a toolset confined to `root`.
    pub fn builder(root: impl AsRef<Path>) -> FsToolsetBuilder {
        FsToolsetBuilder {
            root: root.as_ref().to_path_buf(),
            read_only: false,
            supervisor: None,
            limits: Limits::default(),
        }
    }

    /// The seven tools.
    pub fn tools(&self) -> Vec<Arc<dyn ToolDefinition>> {
        let s = &self.shared;
        vec![
            Arc::new(tools::ReadFile::new(s.clone())),
            Arc::new(Typed::new(tools::ListDir::new(s.clone()))),
            Arc::new(Typed::new(tools::Glob::new(s.clone()))),
            Arc::new(tools::Grep::new(s.clone())),
            Arc::new(tools::WriteFile::new(s.clone())),
            Arc::new(tools::EditFile::new(s.clone())),
            Arc::new(tools::ApplyPatch::new(s.clone())),
        ]
    }

    /// Registers the seven tools.
    pub fn register(&self, registry: &ToolRegistry) -> Result<(), CoreError> {
        for tool in self.tools() {
            registry.register_arc(tool)?;
        }
        Ok(())
    }

    /// The sandbox, a `tools/pre-execute` handler that refuses paths outside the workspace
    /// (and mutations, in read-only mode) before the call runs.
    pub fn sandbox(&self) -> Arc<dyn PreExecuteHandler> {
        Arc::new(Sandbox::new(self.shared.clone()))
    }

    /// Adds a handler of `fs/write-intent` and `fs/edit-intent`, after those already there.
    pub fn on_intent(&self, handler: impl FsIntentHandler + 'static) {
        self.shared.handlers.push(Arc::new(handler));
    }

    /// The fs-intent monitor.
    pub fn monitor(&self) -> &FsIntentMonitor {
        &self.shared.monitor
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        self.shared.ws.root()
    }

    /// Removes the temporary files of earlier writers that are gone (a process killed
    /// mid-write): [`crate::Workspace::remove_stale_temp_files`], off the async workers, over
    /// at most [`MAX_SWEEP_ENTRIES`] entries. A host calls it when it recovers a session log
    /// (the log's lock says no other run of it is writing). Answers the removed files.
    pub async fn remove_stale_temp_files(&self) -> Result<Vec<PathBuf>, FsError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.ws.remove_stale_temp_files(MAX_SWEEP_ENTRIES))
            .await
            .map_err(|e| FsError::Spawn(e.to_string()))?
    }

    /// Whether mutations are refused.
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// Stops the fs-intent monitor. Mutations refuse afterwards (the rule cannot be asked).
    /// Given to a harness (`HarnessBuilder::owns`), the harness's shutdown calls it.
    pub async fn shutdown(&self) {
        self.shared.monitor.shutdown().await;
    }
}

#[async_trait::async_trait]
impl dsh_core::Shutdown for FsToolset {
    fn name(&self) -> &str {
        "fs-toolset"
    }

    async fn shutdown(&self) {
        FsToolset::shutdown(self).await;
    }
}
