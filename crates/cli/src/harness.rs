//! The pipeline `run` drives: the file tools confined to the workspace (and the tools of
//! `--mcp` servers), the sandbox first, then the `--hooks` command hooks, the permission
//! rules, approval, and the around-wrappers; one session on the log.

use crate::approve;
use crate::cli::PipelineOptions;
use crate::error::CliError;
use crate::output::note;
use dsh_command_hooks::{CommandHooks, HookSettings};
use dsh_core::around::{MetricsLayer, RetryLayer, TimeoutLayer};
use dsh_core::{Hooks, ToolRegistry};
use dsh_guards::PermissionRules;
use dsh_mcp::{McpServers, McpToolSource};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session};
use dsh_session::SessionLog;
use dsh_tool_fs::FsToolset;
use dsh_tool_shell::{SandboxConfig, SandboxMode, ShellConfig, ShellTool};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A started pipeline with its open session.
pub struct Running {
    /// The harness (guards, pipeline).
    pub harness: Harness,
    /// The session writing to the log.
    pub session: Session,
    /// The file tools (their fs-intent monitor is stopped last).
    pub toolset: FsToolset,
    /// The `--mcp` servers, stopped after the session.
    pub mcp: Option<McpToolSource>,
    /// The log's path, for messages.
    pub log_path: PathBuf,
}

impl Running {
    /// Stops the session (closing the log) and the harness.
    pub async fn shutdown(self) {
        self.session.shutdown().await;
        self.harness.shutdown().await;
        stop_tools(&self.toolset, self.mcp.as_ref()).await;
    }
}

async fn stop_tools(toolset: &FsToolset, mcp: Option<&McpToolSource>) {
    if let Some(mcp) = mcp {
        mcp.shutdown().await;
    }
    toolset.shutdown().await;
}

fn workspace_dir(workspace: &Path) -> Result<PathBuf, CliError> {
    let dir = workspace
        .canonicalize()
        .map_err(|e| CliError::io("open the workspace", workspace, e))?;
    if !dir.is_dir() {
        return Err(CliError::Usage(format!(
            "--workspace {} is not a directory",
            workspace.display()
        )));
    }
    Ok(dir)
}

fn permission_rules(file: &Path, root: &Path) -> Result<PermissionRules, CliError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| CliError::io("read the policy file", file, e))?;
    PermissionRules::from_toml(&text)
        .map(|rules| rules.with_root(root))
        .map_err(|e| CliError::Usage(format!("policy file {}: {e}", file.display())))
}

fn command_hooks(file: &Path, root: &Path, log_path: &Path) -> Result<CommandHooks, CliError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| CliError::io("read the hooks file", file, e))?;
    let settings = HookSettings::from_json(&text)
        .map_err(|e| CliError::Usage(format!("hooks file {}: {e}", file.display())))?;
    // Hooks get the log as `transcript_path`, and its name as a `session_id` that stays the
    // same when a later run continues the log.
    let log = std::path::absolute(log_path).unwrap_or_else(|_| log_path.to_path_buf());
    let session_id = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dsh".into());
    Ok(CommandHooks::new(settings, root)
        .with_session_id(session_id)
        .with_transcript_path(log))
}

fn mcp_servers(file: &Path, root: &Path) -> Result<McpServers, CliError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| CliError::io("read the MCP config", file, e))?;
    McpServers::from_json(&text)
        .map(|servers| servers.with_default_cwd(root))
        .map_err(|e| CliError::Usage(format!("MCP config {}: {e}", file.display())))
}

/// Builds the pipeline and opens (recovering, if it exists) the log.
pub async fn start(
    workspace: &Path,
    log_path: &Path,
    options: &PipelineOptions,
    stdin_free: bool,
) -> Result<Running, CliError> {
    let root = workspace_dir(workspace)?;
    let rules = match &options.policy {
        Some(file) => Some(permission_rules(file, &root)?),
        None => None,
    };
    let command_hooks = match &options.hooks {
        Some(file) => Some(command_hooks(file, &root, log_path)?),
        None => None,
    };
    let servers = match &options.mcp {
        Some(file) => Some(mcp_servers(file, &root)?),
        None => None,
    };

    let registry = Arc::new(ToolRegistry::new());
    let toolset = FsToolset::builder(&root)
        .read_only(options.read_only)
        .build()
        .await
        .map_err(|e| CliError::Start(format!("the file tools: {e}")))?;
    if let Err(e) = toolset.register(&registry) {
        toolset.shutdown().await;
        return Err(CliError::Start(format!("registering the file tools: {e}")));
    }
    // Code mode: its sub-calls pass the same sandbox, hooks, rules, approval and wrappers.
    let limits = dsh_code_mode::CodeLimits {
        timeout: std::time::Duration::from_millis(options.timeout_ms),
        ..Default::default()
    };
    if let Err(e) = registry.register(dsh_code_mode::RunCode::new(limits)) {
        toolset.shutdown().await;
        return Err(CliError::Start(format!("registering run_code: {e}")));
    }
    let spill_dir = match register_shell(&registry, &root, log_path, options) {
        Ok(dir) => dir,
        Err(e) => {
            toolset.shutdown().await;
            return Err(e);
        }
    };
    let mcp = match servers {
        Some(servers) => match start_mcp(servers, &registry).await {
            Ok(source) => Some(source),
            Err(e) => {
                toolset.shutdown().await;
                return Err(e);
            }
        },
        None => None,
    };

    let mut hooks = Hooks::new();
    // The sandbox runs first: nothing outside the workspace is even put to the rules.
    hooks.pre_execute_arc(toolset.sandbox());
    if let Some(rules) = spill_rules(&root, &spill_dir) {
        hooks.pre_execute(rules);
    }
    // Command hooks before the rules, so that an input a hook rewrites is what the rules see.
    if let Some(command_hooks) = &command_hooks {
        command_hooks.install(&mut hooks);
    }
    if let Some(rules) = rules {
        hooks.pre_execute(rules);
    }
    hooks.around(MetricsLayer::default());
    hooks.around(RetryLayer);

    // The harness installs the timeout innermost (each retry gets its own deadline).
    let harness = match HarnessBuilder::new(registry)
        .hooks(hooks)
        .timeout(TimeoutLayer::default().with_default_ms(options.timeout_ms))
        .approval(approve::responder(options.approve, stdin_free))
        .build()
        .await
    {
        Ok(h) => h,
        Err(e) => {
            stop_tools(&toolset, mcp.as_ref()).await;
            return Err(CliError::Start(e.to_string()));
        }
    };

    let (log, recovery) =
        match SessionLog::open_file(log_path, options.durability.into(), None).await {
            Ok(pair) => pair,
            Err(e) => {
                harness.shutdown().await;
                stop_tools(&toolset, mcp.as_ref()).await;
                return Err(CliError::log(log_path, e));
            }
        };
    if recovery.repaired() {
        note(format!(
            "recovered {}: {}",
            log_path.display(),
            crate::replay::describe_recovery(&recovery).join("; ")
        ));
    }
    if recovery.next_step > 1 {
        note(format!(
            "continuing {} ({} events) at step {}",
            log_path.display(),
            recovery.next_seq.saturating_sub(1),
            recovery.next_step
        ));
    }
    let config = SchedulerConfig {
        max_parallel_tool_calls: usize::try_from(options.max_parallel).unwrap_or(usize::MAX),
        first_step: recovery.next_step,
        ..SchedulerConfig::default()
    };
    let session = match harness.open(log.clone(), config, None).await {
        Ok(s) => s,
        Err(e) => {
            let _ = log.close().await;
            harness.shutdown().await;
            stop_tools(&toolset, mcp.as_ref()).await;
            return Err(CliError::Start(e.to_string()));
        }
    };
    Ok(Running {
        harness,
        session,
        toolset,
        mcp,
        log_path: log_path.to_path_buf(),
    })
}

/// The `shell` tool: its sandbox mode from `--shell-sandbox` (`--read-only` wins), and dsh's
/// own files (the log, the policy, the hook settings and the folder of their scripts, the MCP
/// config) kept read-only to every command.
fn register_shell(
    registry: &ToolRegistry,
    root: &Path,
    log_path: &Path,
    options: &PipelineOptions,
) -> Result<PathBuf, CliError> {
    let mode = match (options.read_only, options.shell_sandbox) {
        (true, _) | (false, crate::cli::ShellSandboxArg::ReadOnly) => SandboxMode::ReadOnly,
        (false, crate::cli::ShellSandboxArg::WorkspaceWrite) => SandboxMode::WorkspaceWrite,
        (false, crate::cli::ShellSandboxArg::Full) => SandboxMode::Full,
    };
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut sandbox = SandboxConfig::new(mode)
        .with_network(options.shell_network)
        .read_only_path(absolute(log_path));
    for file in [&options.policy, &options.mcp].into_iter().flatten() {
        sandbox = sandbox.read_only_path(absolute(file));
    }
    if let Some(hooks) = &options.hooks {
        let hooks = absolute(hooks);
        if let Some(dir) = hooks.parent() {
            sandbox = sandbox.read_only_path(dir);
        }
        sandbox = sandbox.read_only_path(hooks);
    }
    let mut config = ShellConfig::new(root).sandbox(sandbox);
    if let Some(dir) = &options.spill_dir {
        config = config.spill_dir(absolute(dir));
    }
    let tool =
        ShellTool::new(config).map_err(|e| CliError::Start(format!("the shell tool: {e}")))?;
    let spill_dir = tool.spill_dir().to_path_buf();
    registry
        .register(tool)
        .map_err(|e| CliError::Start(format!("registering shell: {e}")))?;
    Ok(spill_dir)
}

/// The spill folder is readable by `read_file` and writable by no tool: the file tools'
/// writes there are denied (commands cannot write it either: it is read-only in their
/// sandbox).
fn spill_rules(root: &Path, spill_dir: &Path) -> Option<PermissionRules> {
    let rel = spill_dir.strip_prefix(root).ok()?.to_str()?;
    let mut rules = PermissionRules::default();
    // `DIR/**` has a `/`, so it is anchored at the root; `DIR` itself only when it has one too
    // (a bare name would match that name at any depth).
    let mut patterns = vec![format!("{rel}/**")];
    if rel.contains('/') {
        patterns.push(rel.to_string());
    }
    for tool in ["write_file", "edit_file", "apply_patch"] {
        for pattern in &patterns {
            if let Ok(rule) = dsh_guards::Rule::parse(&format!("{tool}({pattern})")) {
                rules.add(dsh_guards::RuleClass::Deny, rule);
            }
        }
    }
    Some(rules.with_root(root))
}

/// Starts the `--mcp` servers and registers their tools.
async fn start_mcp(
    servers: McpServers,
    registry: &ToolRegistry,
) -> Result<McpToolSource, CliError> {
    let count = servers.len();
    let source = McpToolSource::start(servers)
        .await
        .map_err(|e| CliError::Start(e.to_string()))?;
    match source.register(registry) {
        Ok(names) => {
            const SHOWN: usize = 30;
            let mut listed = names
                .iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if names.len() > SHOWN {
                listed.push_str(&format!(" and {} more", names.len() - SHOWN));
            }
            note(format!(
                "{} MCP tool(s) from {count} server(s): {listed}",
                names.len()
            ));
            Ok(source)
        }
        Err(e) => {
            source.shutdown().await;
            Err(CliError::Start(e.to_string()))
        }
    }
}
