//! The wiring: builds the pipeline a [`Plan`] describes (the file tools confined to the
//! workspace, `run_code`, `shell`, the tools of `--mcp` servers; the sandbox first, then the
//! command hooks, the permission rules, approval, and the around-wrappers) and opens the
//! session on the log. What the options mean is decided in `crate::plan`.

use crate::approve;
use crate::cli::{PipelineOptions, ProfileArg};
use crate::error::CliError;
use crate::output::note;
pub use crate::plan::Logs;
use crate::plan::Plan;
use dsh_command_hooks::CommandHooks;
use dsh_core::around::{MetricsLayer, RetryLayer, TimeoutLayer};
use dsh_core::{ApprovalResponder, Hooks, ToolRegistry};
use dsh_guards::KnownTools;
use dsh_mcp::{McpOptions, McpServers, McpToolSource};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, SessionStore};
use dsh_session::SessionLog;
use dsh_tool_fs::FsToolset;
use dsh_tool_shell::{ShellConfig, ShellLimits, ShellTool};
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
    /// The `--hooks` command hooks: a signal kills their process groups, which a terminal's
    /// Ctrl-C never reaches.
    pub hooks: Option<CommandHooks>,
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

/// What `start` built before the session: stopped in reverse if a later part fails.
struct Parts {
    toolset: FsToolset,
    mcp: Option<McpToolSource>,
    log: Option<SessionLog>,
    /// The log file, when this run created it: a run that fails to start leaves no empty log.
    created: Option<PathBuf>,
}

impl Parts {
    async fn stop(self) {
        if let Some(log) = self.log {
            let _ = log.close().await;
        }
        if let Some(path) = self.created
            && std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() == 0)
        {
            let _ = std::fs::remove_file(&path);
        }
        stop_tools(&self.toolset, self.mcp.as_ref()).await;
    }
}

/// Builds the pipeline and opens (recovering, if it exists) the log.
///
/// The order matters: the log is opened (its lock taken, a crash's leftovers recovered)
/// before any `--mcp` server starts, so a second `dsh` on the same log starts nothing; a
/// server is started only if some of its tools may run under the policy; and every file that
/// sets up the run (the log, the policy, the hook settings and the scripts they name, the MCP
/// config and the server commands it names, the spill folder) is protected.
///
/// `approval` replaces the responder `--approve` names (`dsh serve` asks its MCP client).
pub async fn start(
    workspace: &Path,
    target: &crate::store::LogTarget,
    options: &PipelineOptions,
    stdin_free: bool,
    approval: Option<Arc<dyn ApprovalResponder>>,
) -> Result<Running, CliError> {
    let label = target.label();
    let log_path = label.as_path();
    let Assembled {
        harness,
        parts,
        recovery,
        hooks: command_hooks,
    } = assemble(
        workspace,
        Logs::One(target),
        log_path,
        options,
        stdin_free,
        approval,
    )
    .await?;
    let recovery = recovery.unwrap_or_default();
    if recovery.repaired() {
        note(format!(
            "recovered {}: {}",
            log_path.display(),
            crate::replay::describe_recovery(&recovery).join("; ")
        ));
        // A write the crash cut short left its temporary file beside its target.
        match parts.toolset.remove_stale_temp_files().await {
            Ok(removed) if !removed.is_empty() => note(format!(
                "removed {} temporary file(s) of writes the crash cut short",
                removed.len()
            )),
            Ok(_) => {}
            Err(e) => note(format!(
                "warning: looking for temporary files of cut-short writes failed: {e}"
            )),
        }
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
        first_step: recovery.next_step,
        ..scheduler_config(options)
    };
    let Some(log) = parts.log.clone() else {
        parts.stop().await;
        return Err(CliError::Start("the log was not opened".into()));
    };
    let session = match harness.open(log, config, None).await {
        Ok(s) => s,
        Err(e) => {
            harness.shutdown().await;
            parts.stop().await;
            return Err(CliError::Start(e.to_string()));
        }
    };
    Ok(Running {
        harness,
        session,
        toolset: parts.toolset,
        mcp: parts.mcp,
        log_path: log_path.to_path_buf(),
        hooks: command_hooks,
    })
}

/// A pipeline built to judge calls (`dsh run --dry-run`): the same tools, sandbox, hooks,
/// rules and guards as [`start`], but no log is opened or created, no session started, and
/// `ask`s are never put to anyone (the harness has no approver it would use: judging answers
/// them). `transcript` is what hooks get as `transcript_path`.
pub struct Judging {
    /// The harness; its pipeline judges the calls.
    pub harness: Harness,
    /// The file tools (their read-before-edit records are the dry run's).
    pub toolset: FsToolset,
    /// The `--mcp` servers (their tools are listed, never called).
    pub mcp: Option<McpToolSource>,
}

impl Judging {
    /// Stops the harness and the tools.
    pub async fn shutdown(self) {
        self.harness.shutdown().await;
        stop_tools(&self.toolset, self.mcp.as_ref()).await;
    }
}

/// Builds the pipeline for `dsh run --dry-run` (see [`Judging`]).
pub async fn start_judging(
    workspace: &Path,
    transcript: &Path,
    options: &PipelineOptions,
) -> Result<Judging, CliError> {
    let deny_asks: Arc<dyn ApprovalResponder> =
        approve::responder(crate::cli::Approve::Deny, false);
    let Assembled { harness, parts, .. } = assemble(
        workspace,
        Logs::Judged,
        transcript,
        options,
        false,
        Some(deny_asks),
    )
    .await?;
    Ok(Judging {
        harness,
        toolset: parts.toolset,
        mcp: parts.mcp,
    })
}

/// A started pipeline whose sessions are opened by id, each on its own log in a folder
/// (`dsh serve --http`: one per MCP client session).
pub struct Serving {
    /// The harness; its store is the log folder.
    pub harness: Harness,
    /// How each session's scheduler is configured (`--max-parallel`).
    pub scheduler: SchedulerConfig,
    /// The file tools (their fs-intent monitor is stopped last).
    pub toolset: FsToolset,
    /// The `--mcp` servers, stopped after the sessions.
    pub mcp: Option<McpToolSource>,
    /// The log folder.
    pub folder: PathBuf,
    /// The `--hooks` command hooks.
    pub hooks: Option<CommandHooks>,
}

impl Serving {
    /// Shuts every session down (calls in flight recorded `ABORTED`, logs closed), then the
    /// harness and the tools.
    pub async fn shutdown(self) {
        self.harness.shutdown().await;
        stop_tools(&self.toolset, self.mcp.as_ref()).await;
    }
}

/// Builds the pipeline of `start` with the folder `folder` as its session store (created if
/// missing): no session is opened here; `Harness::open_session(id)` opens `folder/<id>.jsonl`.
pub async fn start_many(
    workspace: &Path,
    folder: &Path,
    options: &PipelineOptions,
    approval: Option<Arc<dyn ApprovalResponder>>,
) -> Result<Serving, CliError> {
    let Assembled {
        harness,
        parts,
        hooks,
        ..
    } = assemble(
        workspace,
        Logs::Folder(folder),
        folder,
        options,
        false,
        approval,
    )
    .await?;
    Ok(Serving {
        harness,
        scheduler: scheduler_config(options),
        toolset: parts.toolset,
        mcp: parts.mcp,
        folder: folder.to_path_buf(),
        hooks,
    })
}

/// [`start_many`] with `store` as the session store (`dsh serve --http --store`: a node of a
/// fleet); `label` names it in messages and is what hooks get as `transcript_path`.
pub async fn start_shared(
    workspace: &Path,
    store: &SessionStore,
    label: &Path,
    options: &PipelineOptions,
    approval: Option<Arc<dyn ApprovalResponder>>,
) -> Result<Serving, CliError> {
    let Assembled {
        harness,
        parts,
        hooks,
        ..
    } = assemble(
        workspace,
        Logs::Shared(store),
        label,
        options,
        false,
        approval,
    )
    .await?;
    Ok(Serving {
        harness,
        scheduler: scheduler_config(options),
        toolset: parts.toolset,
        mcp: parts.mcp,
        folder: label.to_path_buf(),
        hooks,
    })
}

/// A session's scheduler as the options ask (`--max-parallel`).
fn scheduler_config(options: &PipelineOptions) -> SchedulerConfig {
    SchedulerConfig {
        max_parallel_tool_calls: usize::try_from(options.max_parallel).unwrap_or(usize::MAX),
        ..SchedulerConfig::default()
    }
}

/// What [`assemble`] built: the harness, and what it stands on.
struct Assembled {
    harness: Harness,
    parts: Parts,
    /// The log's recovery, when a log was opened.
    recovery: Option<dsh_session::Recovery>,
    hooks: Option<CommandHooks>,
}

/// Prints what the options mean for `command` (`--print-plan`) on stderr; starts nothing,
/// opens no log.
pub fn print_plan(
    workspace: &Path,
    logs: Logs<'_>,
    transcript_path: &Path,
    options: &PipelineOptions,
    command: &str,
) -> Result<u8, CliError> {
    let plan = Plan::new(workspace, logs, transcript_path, options)?;
    crate::plan::print(&plan, command);
    Ok(crate::error::EXIT_OK)
}

/// The pipeline of [`start`], with the log opened (recovered) when `logs` names one, or the
/// folder made and set as the harness's store when it names a folder; `log_path` is what
/// hooks get as `transcript_path`.
async fn assemble(
    workspace: &Path,
    logs: Logs<'_>,
    log_path: &Path,
    options: &PipelineOptions,
    stdin_free: bool,
    approval: Option<Arc<dyn ApprovalResponder>>,
) -> Result<Assembled, CliError> {
    let plan = Plan::new(workspace, logs, log_path, options)?;
    let approval = approval.unwrap_or_else(|| approve::responder(plan.approve, stdin_free));
    wire(&plan, approval).await
}

/// Builds what `plan` says. The order matters: the tools are registered (and the policy's
/// tool names checked against them) first, then the log is opened (its lock taken, a
/// crash's leftovers recovered) before any `--mcp` server starts, so a second `dsh` on the
/// same log starts nothing. Whatever was built is stopped if a later part fails.
async fn wire(
    plan: &Plan<'_>,
    approval: Arc<dyn ApprovalResponder>,
) -> Result<Assembled, CliError> {
    if let Some(mcp) = &plan.mcp {
        for name in &mcp.held_back {
            note(format!(
                "MCP server `{name}` not started: the policy denies every one of its tools"
            ));
        }
    }
    let toolset = FsToolset::builder(&plan.root)
        .read_only(plan.read_only)
        .build()
        .await
        .map_err(|e| CliError::Start(format!("the file tools: {e}")))?;
    let mut parts = Parts {
        toolset,
        mcp: None,
        log: None,
        created: None,
    };
    match wire_onto(plan, &mut parts, approval).await {
        Ok((harness, recovery)) => Ok(Assembled {
            harness,
            parts,
            recovery,
            hooks: plan.hooks.as_ref().map(|h| h.hooks.clone()),
        }),
        Err(e) => {
            parts.stop().await;
            Err(e)
        }
    }
}

/// [`wire`]'s steps after the file tools, each adding to `parts` what it started.
async fn wire_onto(
    plan: &Plan<'_>,
    parts: &mut Parts,
    approval: Arc<dyn ApprovalResponder>,
) -> Result<(Harness, Option<dsh_session::Recovery>), CliError> {
    let registry = Arc::new(ToolRegistry::new());
    register_tools(plan, &registry, &parts.toolset, &approval)?;
    check_policy_names(plan, &registry)?;
    let recovery = open_logs(plan, parts).await?;
    if let Some(mcp) = &plan.mcp {
        parts.mcp = Some(start_mcp(mcp.servers.clone(), &registry, plan.read_only).await?);
    }
    let hooks = pipeline_hooks(plan, parts);
    let harness = build_harness(plan, registry, hooks, approval, &parts.toolset).await?;
    Ok((harness, recovery))
}

/// The built-ins (under a profile, in a registry of their own, under the profile's tools).
fn register_tools(
    plan: &Plan<'_>,
    registry: &Arc<ToolRegistry>,
    toolset: &FsToolset,
    approval: &Arc<dyn ApprovalResponder>,
) -> Result<(), CliError> {
    let builtins = match plan.profile {
        ProfileArg::Dsh => registry.clone(),
        ProfileArg::ClaudeCode => Arc::new(ToolRegistry::new()),
    };
    register_run_code(&builtins, plan)?;
    register_shell(&builtins, plan, approval)?;
    toolset
        .register(&builtins)
        .map_err(|e| CliError::Start(format!("registering the file tools: {e}")))?;
    if plan.profile == ProfileArg::ClaudeCode {
        register_profile(registry, &builtins)?;
    }
    Ok(())
}

/// A rule of the policy file that names no tool (a typo in a deny rule) would protect
/// nothing: refused now, before the log is opened or any server started. The profile's
/// tools are registered by now, so its names count, and so do every configured MCP server's.
/// Claude Code settings are not checked: Claude Code itself ignores rules for tools it does
/// not have (WebFetch, Task…).
fn check_policy_names(plan: &Plan<'_>, registry: &ToolRegistry) -> Result<(), CliError> {
    let Some((file, policy)) = plan.rules.as_ref().and_then(|r| r.policy.as_ref()) else {
        return Ok(());
    };
    let known = plan
        .mcp
        .iter()
        .flat_map(|mcp| &mcp.prefixes)
        .fold(KnownTools::from_registry(registry), |k, p| {
            k.with_prefix(p.clone())
        });
    policy
        .check_tools(&known)
        .map_err(|e| CliError::Usage(format!("policy file {}: {e}", file.display())))
}

/// Opens (recovering) the one log, or makes the log folder; a judged run has none.
async fn open_logs(
    plan: &Plan<'_>,
    parts: &mut Parts,
) -> Result<Option<dsh_session::Recovery>, CliError> {
    match plan.logs {
        Logs::One(target) => {
            if let Some(file) = target.file()
                && std::fs::symlink_metadata(file).is_err()
            {
                parts.created = Some(file.to_path_buf());
            }
            let (log, recovered) = target
                .open(plan.durability.into(), plan.lock_wait)
                .await
                .map_err(|e| CliError::log(&target.label(), e))?;
            parts.log = Some(log);
            Ok(Some(recovered))
        }
        Logs::Folder(folder) => {
            std::fs::create_dir_all(folder)
                .and_then(|()| {
                    if std::fs::metadata(folder)?.is_dir() {
                        Ok(())
                    } else {
                        Err(std::io::Error::other("not a directory"))
                    }
                })
                .map_err(|e| CliError::io("make the log folder", folder, e))?;
            Ok(None)
        }
        Logs::Judged | Logs::Shared(_) => Ok(None),
    }
}

/// The handlers every call passes, in order.
fn pipeline_hooks(plan: &Plan<'_>, parts: &Parts) -> Hooks {
    let mut hooks = Hooks::new();
    // The sandbox runs first: nothing outside the workspace is even put to the rules.
    hooks.pre_execute_arc(parts.toolset.sandbox());
    // Read-only mode also holds for MCP tools: only those marked read-only run.
    if let Some(policy) = parts.mcp.as_ref().and_then(McpToolSource::read_only_policy) {
        hooks.pre_execute(policy);
    }
    // Command hooks before the rules, so that an input a hook rewrites is what the rules see.
    if let Some(command_hooks) = &plan.hooks {
        command_hooks.hooks.install(&mut hooks);
    }
    if let Some(rules) = &plan.rules {
        hooks.pre_execute(rules.merged.clone());
    }
    hooks.around(MetricsLayer::default());
    hooks.around(RetryLayer);
    hooks
}

/// The harness over `registry`: the hooks, the deadlines, the store, dsh's own files.
async fn build_harness(
    plan: &Plan<'_>,
    registry: Arc<ToolRegistry>,
    hooks: Hooks,
    approval: Arc<dyn ApprovalResponder>,
    toolset: &FsToolset,
) -> Result<Harness, CliError> {
    // The harness installs the timeout innermost (each retry gets its own deadline). With
    // `--timeout-ms` it caps every tool; without it, each tool keeps its own timeout and the
    // ones without get the default.
    let timeout = match plan.timeout_ms {
        Some(ms) => TimeoutLayer::default().with_default_ms(ms).with_cap_ms(ms),
        None => TimeoutLayer::default().with_default_ms(DEFAULT_TIMEOUT_MS),
    };
    // A session continued from its log remembers the reads read-before-edit needs.
    let mut builder = HarnessBuilder::new(registry).resumes(Arc::new(toolset.clone()));
    if let Logs::Folder(folder) = plan.logs {
        builder = builder.store(SessionStore::Directory {
            root: folder.to_path_buf(),
            durability: plan.durability.into(),
        });
    }
    if let Logs::Shared(store) = plan.logs {
        builder = builder.store(store.clone());
    }
    for file in &plan.own_files {
        builder = builder.protect(file);
    }
    builder
        .config(pipeline_config())
        .hooks(hooks)
        .timeout(timeout)
        .approval(approval)
        .build()
        .await
        .map_err(|e| CliError::Start(e.to_string()))
}

/// The pipeline's limits and timeouts; its approval timeout also bounds the network proxy's
/// questions about hosts under `ask`.
fn pipeline_config() -> dsh_scheduler::PipelineConfig {
    dsh_scheduler::PipelineConfig::default()
}

/// The claude-code profile's tools, each over the built-in of `builtins` it stands on.
fn register_profile(registry: &ToolRegistry, builtins: &ToolRegistry) -> Result<(), CliError> {
    let tools =
        dsh_claude_code::profile_tools(|name| builtins.get(name).map(|t| t.definition().clone()))
            .map_err(|e| CliError::Start(e.to_string()))?;
    for tool in tools {
        registry
            .register_arc(tool)
            .map_err(|e| CliError::Start(format!("registering the claude-code profile: {e}")))?;
    }
    Ok(())
}

/// The deadline of a tool that has none of its own, when `--timeout-ms` is not given.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// `run_code`: code mode, whose sub-calls pass the same sandbox, hooks, rules, approval and
/// wrappers.
fn register_run_code(registry: &ToolRegistry, plan: &Plan<'_>) -> Result<(), CliError> {
    let mut limits = dsh_code_mode::CodeLimits::default();
    if let Some(ms) = plan.timeout_ms {
        limits.timeout = limits.timeout.min(std::time::Duration::from_millis(ms));
    }
    registry
        .register(dsh_code_mode::RunCode::new(limits))
        .map_err(|e| CliError::Start(format!("registering run_code: {e}")))
}

/// The `shell` tool, in the plan's sandbox, its deadlines capped by `--timeout-ms`.
fn register_shell(
    registry: &ToolRegistry,
    plan: &Plan<'_>,
    approval: &Arc<dyn ApprovalResponder>,
) -> Result<(), CliError> {
    let mut config = ShellConfig::new(&plan.root)
        .sandbox(crate::net::asking(
            plan.sandbox.clone(),
            approval,
            pipeline_config().approval_timeout,
        ))
        .spill_dir(plan.spill_dir.clone());
    config.pass_env = plan.shell_env.clone();
    let mut limits = ShellLimits::default();
    if let Some(ms) = plan.timeout_ms {
        let cap = std::time::Duration::from_millis(ms);
        limits.default_timeout = limits.default_timeout.min(cap);
        limits.max_timeout = limits.max_timeout.min(cap);
    }
    crate::shell_limits::apply(&plan.shell_limits, &mut limits);
    config = config.limits(limits);
    let tool =
        ShellTool::new(config).map_err(|e| CliError::Start(format!("the shell tool: {e}")))?;
    registry
        .register(tool)
        .map_err(|e| CliError::Start(format!("registering shell: {e}")))
}

/// Starts the `--mcp` servers and registers their tools; every tool left out is named on
/// stderr, with the reason.
async fn start_mcp(
    servers: McpServers,
    registry: &ToolRegistry,
    read_only: bool,
) -> Result<McpToolSource, CliError> {
    let count = servers.len();
    let options = McpOptions {
        read_only,
        ..McpOptions::default()
    };
    let source = McpToolSource::start_with(servers, options)
        .await
        .map_err(|e| CliError::Start(e.to_string()))?;
    match source.register(registry) {
        Ok(names) => {
            for skipped in source.skipped() {
                note(format!("error: {skipped}"));
            }
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
