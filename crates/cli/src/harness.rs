//! The pipeline `run` drives: the file tools confined to the workspace (and the tools of
//! `--mcp` servers), the sandbox first, then the `--hooks` command hooks, the permission
//! rules, approval, and the around-wrappers; one session on the log.

use crate::approve;
use crate::cli::{PipelineOptions, ProfileArg};
use crate::error::CliError;
use crate::output::note;
use dsh_command_hooks::{CommandHooks, HookSettings};
use dsh_core::around::{MetricsLayer, RetryLayer, TimeoutLayer};
use dsh_core::{ApprovalResponder, Hooks, ToolRegistry};
use dsh_guards::{KnownTools, PermissionRules, Rule, RuleClass};
use dsh_mcp::{McpOptions, McpServers, McpToolSource};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, SessionStore};
use dsh_session::SessionLog;
use dsh_tool_fs::FsToolset;
use dsh_tool_shell::{SandboxConfig, SandboxMode, ShellConfig, ShellLimits, ShellTool};
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

fn permission_rules(file: &Path) -> Result<PermissionRules, CliError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| CliError::io("read the policy file", file, e))?;
    PermissionRules::from_toml(&text)
        .map_err(|e| CliError::Usage(format!("policy file {}: {e}", file.display())))
}

/// The Claude Code settings files `--claude-settings` names (`auto`: those of the workspace
/// and the user that exist), in the order they are loaded.
fn claude_settings_files(options: &PipelineOptions, root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for file in &options.claude_settings {
        if file.as_os_str() == "auto" {
            let project = root.join(".claude");
            let user = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".claude"));
            for candidate in [
                user.map(|u| u.join("settings.json")),
                Some(project.join("settings.json")),
                Some(project.join("settings.local.json")),
            ]
            .into_iter()
            .flatten()
            {
                if candidate.is_file() && !files.contains(&candidate) {
                    files.push(candidate);
                }
            }
        } else if !files.contains(file) {
            files.push(file.clone());
        }
    }
    files
}

/// The rules of `--policy` and of the Claude Code settings files, one rule engine; under the
/// claude-code profile each rule naming a profile tool also binds the built-in under it, and
/// unmatched calls of tools that change things are asked about.
fn all_rules(
    options: &PipelineOptions,
    settings: &[(PathBuf, String)],
    root: &Path,
) -> Result<Option<PermissionRules>, CliError> {
    let mut rules = match &options.policy {
        Some(file) => Some(permission_rules(file)?),
        None => None,
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut lists = dsh_claude_code::settings::PermissionLists::default();
    for (file, text) in settings {
        let places = dsh_claude_code::settings::Places {
            home: home.as_deref(),
            root: Some(root),
        };
        lists.add_json(text, places).map_err(|e| {
            CliError::Usage(format!("Claude Code settings {}: {e}", file.display()))
        })?;
    }
    if !settings.is_empty() {
        let rules = rules.get_or_insert_with(PermissionRules::default);
        for (class, list) in [
            (RuleClass::Allow, &lists.allow),
            (RuleClass::Ask, &lists.ask),
            (RuleClass::Deny, &lists.deny),
        ] {
            for text in list {
                let rule = Rule::parse(text)
                    .map_err(|e| CliError::Usage(format!("Claude Code settings: {e}")))?;
                rules.add(class, rule);
            }
        }
    }
    let Some(mut rules) = rules else {
        return Ok(None);
    };
    if options.profile == ProfileArg::ClaudeCode {
        let mut aliases = Vec::new();
        for (class, rule) in rules.rules() {
            for entry in &dsh_claude_code::PROFILE {
                if rule.names_tool(entry.name) && !rule.names_tool(entry.builtin) {
                    let alias = rule
                        .for_tool(entry.builtin)
                        .map_err(|e| CliError::Usage(e.to_string()))?;
                    aliases.push((class, alias));
                }
            }
        }
        for (class, alias) in aliases {
            rules.add(class, alias);
        }
        if rules.default_class() == RuleClass::Allow {
            for entry in dsh_claude_code::PROFILE.iter().filter(|t| t.changes_things) {
                rules = rules.with_default_for(entry.name, RuleClass::Ask);
            }
        }
    }
    Ok(Some(rules.with_root(root)))
}

/// The `--hooks` command hooks, and the script files their commands name (dsh's own files:
/// no tool may write them).
fn command_hooks(
    files: &[(PathBuf, String)],
    root: &Path,
    log_path: &Path,
) -> Result<(CommandHooks, Vec<PathBuf>), CliError> {
    // Several files' hooks run together, as Claude Code merges its settings files' hooks.
    let mut merged = serde_json::Map::new();
    for (file, text) in files {
        let bad = |e: String| CliError::Usage(format!("hooks file {}: {e}", file.display()));
        // Each file must be valid on its own, so its errors name it.
        HookSettings::from_json(text).map_err(|e| bad(e.to_string()))?;
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if let Some(serde_json::Value::Object(events)) = value.get("hooks") {
            for (event, groups) in events {
                let entry = merged
                    .entry(event.clone())
                    .or_insert_with(|| serde_json::Value::Array(Vec::new()));
                if let (serde_json::Value::Array(all), serde_json::Value::Array(groups)) =
                    (entry, groups)
                {
                    all.extend(groups.iter().cloned());
                }
            }
        }
    }
    let text = serde_json::json!({ "hooks": merged }).to_string();
    let settings =
        HookSettings::from_json(&text).map_err(|e| CliError::Usage(format!("hooks files: {e}")))?;
    // Hooks get the log as `transcript_path`, and its name as a `session_id` that stays the
    // same when a later run continues the log.
    let log = std::path::absolute(log_path).unwrap_or_else(|_| log_path.to_path_buf());
    let session_id = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dsh".into());
    let scripts = settings.script_paths(root);
    let hooks = CommandHooks::new(settings, root)
        .with_session_id(session_id)
        .with_transcript_path(log)
        // A hook that failed or gave an answer dsh could not read is said on stderr.
        .with_warnings(Arc::new(|line: &str| note(line)));
    Ok((hooks, scripts))
}

fn mcp_servers(file: &Path, root: &Path) -> Result<McpServers, CliError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| CliError::io("read the MCP config", file, e))?;
    McpServers::from_json(&text)
        .map(|servers| servers.with_default_cwd(root))
        .map_err(|e| CliError::Usage(format!("MCP config {}: {e}", file.display())))
}

/// dsh's own files: no tool may write them whatever the rules say, and `shell` commands see
/// them read-only. The tools check each resolved target, so a symlink or a hard link to one is
/// refused too.
#[derive(Debug, Default)]
struct OwnFiles(Vec<PathBuf>);

impl OwnFiles {
    fn add(&mut self, path: &Path) {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        if !self.0.contains(&path) {
            self.0.push(path);
        }
    }
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
    /// The shell's spill folder, outside the workspace; removed with it.
    _spill: tempfile::TempDir,
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
    // The shell tool makes its spill folder when it is built: not in the workspace, which a
    // dry run leaves as it is, unless the command line names one.
    let spill = tempfile::Builder::new()
        .prefix("dsh-dry-run-")
        .tempdir()
        .map_err(|e| CliError::Start(format!("a temporary folder for the dry run: {e}")))?;
    let mut options = options.clone();
    if options.spill_dir.is_none() {
        options.spill_dir = Some(spill.path().join("spill"));
    }
    let Assembled { harness, parts, .. } = assemble(
        workspace,
        Logs::Judged,
        transcript,
        &options,
        false,
        Some(deny_asks),
    )
    .await?;
    Ok(Judging {
        harness,
        toolset: parts.toolset,
        mcp: parts.mcp,
        _spill: spill,
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

/// A session's scheduler as the options ask (`--max-parallel`).
fn scheduler_config(options: &PipelineOptions) -> SchedulerConfig {
    SchedulerConfig {
        max_parallel_tool_calls: usize::try_from(options.max_parallel).unwrap_or(usize::MAX),
        ..SchedulerConfig::default()
    }
}

/// Where the sessions' logs go.
#[derive(Clone, Copy)]
enum Logs<'a> {
    /// One session on one log, opened (recovered) by `assemble`.
    One(&'a crate::store::LogTarget),
    /// A folder of logs, one per session, opened by id later.
    Folder(&'a Path),
    /// No log at all: the calls are judged, not run (`dsh run --dry-run`).
    Judged,
}

/// What [`assemble`] built: the harness, and what it stands on.
struct Assembled {
    harness: Harness,
    parts: Parts,
    /// The log's recovery, when a log was opened.
    recovery: Option<dsh_session::Recovery>,
    hooks: Option<CommandHooks>,
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
    let root = workspace_dir(workspace)?;
    let mut settings = Vec::new();
    for file in claude_settings_files(options, &root) {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| CliError::io("read the Claude Code settings", &file, e))?;
        settings.push((file, text));
    }
    let rules = all_rules(options, &settings, &root)?;
    let mut own = OwnFiles::default();
    let log_file = match logs {
        Logs::One(target) => target.file(),
        // The folder and everything in it is dsh's own.
        Logs::Folder(folder) => Some(folder),
        Logs::Judged => None,
    };
    if let Some(file) = log_file {
        own.add(file);
    }
    for file in [&options.policy, &options.hooks, &options.mcp]
        .into_iter()
        .flatten()
    {
        own.add(file);
    }
    settings.iter().for_each(|(file, _)| own.add(file));
    let mut hook_files = Vec::new();
    if let Some(file) = &options.hooks {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::io("read the hooks file", file, e))?;
        hook_files.push((file.clone(), text));
    }
    hook_files.extend(settings.iter().cloned());
    let command_hooks = if hook_files.is_empty() {
        None
    } else {
        let (hooks, scripts) = command_hooks(&hook_files, &root, log_path)?;
        scripts.iter().for_each(|p| own.add(p));
        Some(hooks)
    };
    // Every configured server's tools may be named by a rule, started this run or not.
    let mut mcp_prefixes: Vec<String> = Vec::new();
    let servers = match &options.mcp {
        Some(file) => {
            let mut servers = mcp_servers(file, &root)?;
            mcp_prefixes.extend(
                servers
                    .servers()
                    .iter()
                    .map(|server| format!("mcp__{}__", server.name)),
            );
            // Every configured server's command, started this run or not: a later run may.
            servers.command_paths().iter().for_each(|p| own.add(p));
            if let Some(rules) = &rules {
                servers.retain(|server| {
                    let prefix = format!("mcp__{}__", server.name);
                    let runs = !rules.denies_every_tool_with_prefix(&prefix);
                    if !runs {
                        note(format!(
                            "MCP server `{}` not started: the policy denies every one of its tools",
                            server.name
                        ));
                    }
                    runs
                });
            }
            Some(servers)
        }
        None => None,
    };

    let registry = Arc::new(ToolRegistry::new());
    let toolset = FsToolset::builder(&root)
        .read_only(options.read_only)
        .build()
        .await
        .map_err(|e| CliError::Start(format!("the file tools: {e}")))?;
    let mut parts = Parts {
        toolset,
        mcp: None,
        log: None,
        created: None,
    };
    // Under a profile the built-ins go to a registry of their own, under the profile's tools.
    let builtins = match options.profile {
        ProfileArg::Dsh => registry.clone(),
        ProfileArg::ClaudeCode => Arc::new(ToolRegistry::new()),
    };
    match register_builtins(&builtins, &root, &own, rules.as_ref(), options) {
        Ok(spill_dir) => own.add(&spill_dir),
        Err(e) => {
            parts.stop().await;
            return Err(e);
        }
    }
    if let Err(e) = parts.toolset.register(&builtins) {
        parts.stop().await;
        return Err(CliError::Start(format!("registering the file tools: {e}")));
    }
    if options.profile == ProfileArg::ClaudeCode
        && let Err(e) = register_profile(&registry, &builtins)
    {
        parts.stop().await;
        return Err(e);
    }
    // A rule of the policy file that names no tool (a typo in a deny rule) would protect
    // nothing: refused now, before the log is opened or any server started. The profile's
    // tools are registered by now, so its names count. Claude Code settings are not checked:
    // Claude Code itself ignores rules for tools it does not have (WebFetch, Task…).
    if let Some(file) = &options.policy {
        let known = mcp_prefixes
            .iter()
            .fold(KnownTools::from_registry(&registry), |k, p| {
                k.with_prefix(p.clone())
            });
        let checked = permission_rules(file).and_then(|policy| {
            policy
                .check_tools(&known)
                .map_err(|e| CliError::Usage(format!("policy file {}: {e}", file.display())))
        });
        if let Err(e) = checked {
            parts.stop().await;
            return Err(e);
        }
    }

    // The log before the servers: its lock says whether this run may go on at all.
    let mut recovery = None;
    match logs {
        Logs::One(target) => {
            if let Some(file) = target.file()
                && std::fs::symlink_metadata(file).is_err()
            {
                parts.created = Some(file.to_path_buf());
            }
            match target
                .open(options.durability.into(), options.lock_wait())
                .await
            {
                Ok((log, recovered)) => {
                    parts.log = Some(log);
                    recovery = Some(recovered);
                }
                Err(e) => {
                    parts.stop().await;
                    return Err(CliError::log(log_path, e));
                }
            }
        }
        Logs::Folder(folder) => {
            let made = std::fs::create_dir_all(folder).and_then(|()| {
                if std::fs::metadata(folder)?.is_dir() {
                    Ok(())
                } else {
                    Err(std::io::Error::other("not a directory"))
                }
            });
            if let Err(e) = made {
                parts.stop().await;
                return Err(CliError::io("make the log folder", folder, e));
            }
        }
        Logs::Judged => {}
    }
    if let Some(servers) = servers {
        match start_mcp(servers, &registry, options.read_only).await {
            Ok(source) => parts.mcp = Some(source),
            Err(e) => {
                parts.stop().await;
                return Err(e);
            }
        }
    }

    let mut hooks = Hooks::new();
    // The sandbox runs first: nothing outside the workspace is even put to the rules.
    hooks.pre_execute_arc(parts.toolset.sandbox());
    // Read-only mode also holds for MCP tools: only those marked read-only run.
    if let Some(policy) = parts.mcp.as_ref().and_then(McpToolSource::read_only_policy) {
        hooks.pre_execute(policy);
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

    // The harness installs the timeout innermost (each retry gets its own deadline). With
    // `--timeout-ms` it caps every tool; without it, each tool keeps its own timeout and the
    // ones without get the default.
    let timeout = match options.timeout_ms {
        Some(ms) => TimeoutLayer::default().with_default_ms(ms).with_cap_ms(ms),
        None => TimeoutLayer::default().with_default_ms(DEFAULT_TIMEOUT_MS),
    };
    // A session continued from its log remembers the reads read-before-edit needs.
    let mut builder = HarnessBuilder::new(registry).resumes(Arc::new(parts.toolset.clone()));
    if let Logs::Folder(folder) = logs {
        builder = builder.store(SessionStore::Directory {
            root: folder.to_path_buf(),
            durability: options.durability.into(),
        });
    }
    for file in &own.0 {
        builder = builder.protect(file);
    }
    let harness = match builder
        .hooks(hooks)
        .timeout(timeout)
        .approval(approval.unwrap_or_else(|| approve::responder(options.approve, stdin_free)))
        .build()
        .await
    {
        Ok(h) => h,
        Err(e) => {
            parts.stop().await;
            return Err(CliError::Start(e.to_string()));
        }
    };
    Ok(Assembled {
        harness,
        parts,
        recovery,
        hooks: command_hooks,
    })
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

/// `run_code` and `shell` (the file tools register with their toolset). Answers the shell's
/// spill folder, one more of dsh's own files.
fn register_builtins(
    registry: &ToolRegistry,
    root: &Path,
    own: &OwnFiles,
    rules: Option<&PermissionRules>,
    options: &PipelineOptions,
) -> Result<PathBuf, CliError> {
    // Code mode: its sub-calls pass the same sandbox, hooks, rules, approval and wrappers.
    let mut limits = dsh_code_mode::CodeLimits::default();
    if let Some(ms) = options.timeout_ms {
        limits.timeout = limits.timeout.min(std::time::Duration::from_millis(ms));
    }
    registry
        .register(dsh_code_mode::RunCode::new(limits))
        .map_err(|e| CliError::Start(format!("registering run_code: {e}")))?;
    register_shell(registry, root, own, rules, options)
}

/// The `shell` tool: its sandbox mode from `--shell-sandbox` (`--read-only` wins). The
/// policy binds it through the sandbox: dsh's own files inside the workspace, and the paths
/// the rules keep `write_file` from writing, are read-only to every command; the paths the
/// rules keep `read_file` from reading are hidden.
fn register_shell(
    registry: &ToolRegistry,
    root: &Path,
    own: &OwnFiles,
    rules: Option<&PermissionRules>,
    options: &PipelineOptions,
) -> Result<PathBuf, CliError> {
    let mode = match (options.read_only, options.shell_sandbox) {
        (true, _) | (false, crate::cli::ShellSandboxArg::ReadOnly) => SandboxMode::ReadOnly,
        (false, crate::cli::ShellSandboxArg::WorkspaceWrite) => SandboxMode::WorkspaceWrite,
        (false, crate::cli::ShellSandboxArg::Full) => SandboxMode::Full,
    };
    let mut sandbox = SandboxConfig::new(mode).with_network(options.shell_network);
    // Outside the workspace Landlock already keeps every command from writing.
    for file in &own.0 {
        let file = file.canonicalize().unwrap_or_else(|_| file.clone());
        if file.starts_with(root) {
            sandbox = sandbox.read_only_path(file);
        }
    }
    if let Some(rules) = rules {
        let (read_only, hidden) = crate::policy_paths::classify(root, rules)?;
        for path in read_only {
            sandbox = sandbox.read_only_path(path);
        }
        for path in hidden {
            sandbox = sandbox.hidden_path(path);
        }
    }
    let mut config = ShellConfig::new(root).sandbox(sandbox);
    if let Some(dir) = &options.spill_dir {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        config = config.spill_dir(dir);
    }
    if let Some(ms) = options.timeout_ms {
        let cap = std::time::Duration::from_millis(ms);
        let defaults = ShellLimits::default();
        config = config.limits(ShellLimits {
            default_timeout: defaults.default_timeout.min(cap),
            max_timeout: defaults.max_timeout.min(cap),
            ..defaults
        });
    }
    let tool =
        ShellTool::new(config).map_err(|e| CliError::Start(format!("the shell tool: {e}")))?;
    let spill_dir = tool.spill_dir().to_path_buf();
    registry
        .register(tool)
        .map_err(|e| CliError::Start(format!("registering shell: {e}")))?;
    Ok(spill_dir)
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
