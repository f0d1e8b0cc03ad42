//! What a command line means, decided before anything starts: the tools, the rules, the
//! hooks, the MCP servers, the shell's sandbox, where the log goes and which files are dsh's
//! own. [`Plan::new`] only reads the files the options name; the wiring (`harness`) builds the
//! pipeline from the plan, and `--print-plan` shows it (see [`show`]).
//!
//! A new option is one field here, filled in [`Plan::new`], shown in [`show`], and one line
//! where `harness` wires it.

mod hooks;
mod rules;
mod show;

use crate::cli::{Approve, DurabilityArg, PipelineOptions, ProfileArg, ShellSandboxArg};
use crate::error::CliError;
use crate::store::LogTarget;
use dsh_command_hooks::CommandHooks;
use dsh_guards::PermissionRules;
use dsh_mcp::McpServers;
use dsh_tool_shell::{SandboxConfig, SandboxMode};
use std::path::{Path, PathBuf};

pub use show::print;

/// Where the sessions' logs go.
#[derive(Clone, Copy)]
pub enum Logs<'a> {
    /// One session on one log, opened (recovered) by the wiring.
    One(&'a LogTarget),
    /// A folder of logs, one per session, opened by id later (`dsh serve --http`).
    Folder(&'a Path),
    /// No log at all: the calls are judged, not run (`dsh run --dry-run`).
    Judged,
    /// A store every node of a fleet shares, one session per client session, opened by id
    /// later (`dsh serve --http --store`).
    Shared(&'a dsh_scheduler::SessionStore),
}

/// The rules the calls are put to.
pub struct RulesPlan {
    /// `--policy`, as written: its tool names are checked once the tools are known.
    pub policy: Option<(PathBuf, PermissionRules)>,
    /// The Claude Code settings files whose `permissions` were merged in.
    pub settings: Vec<PathBuf>,
    /// Every rule, merged (and, under the claude-code profile, bound to the built-ins).
    pub merged: PermissionRules,
}

/// The command hooks of `--hooks` and the Claude Code settings files.
pub struct HooksPlan {
    /// The files they come from.
    pub files: Vec<PathBuf>,
    /// The hooks, ready to install.
    pub hooks: CommandHooks,
}

/// The `--mcp` servers.
pub struct McpPlan {
    /// The config file.
    pub file: PathBuf,
    /// The servers to start.
    pub servers: McpServers,
    /// `mcp__NAME__` of every configured server, started or not: a rule may name their tools.
    pub prefixes: Vec<String>,
    /// The servers not started: the policy denies every one of their tools.
    pub held_back: Vec<String>,
    /// The files every configured server's command names, started this run or not (a later
    /// run may start it): dsh's own.
    pub command_paths: Vec<PathBuf>,
}

/// What a command line means (see the module docs).
pub struct Plan<'a> {
    /// The workspace, symlinks resolved.
    pub root: PathBuf,
    /// Where the log goes.
    pub logs: Logs<'a>,
    /// `--durability`.
    pub durability: DurabilityArg,
    /// `--profile`: the tools' names and shapes.
    pub profile: ProfileArg,
    /// `--read-only`.
    pub read_only: bool,
    /// The permission rules, if any.
    pub rules: Option<RulesPlan>,
    /// The command hooks, if any.
    pub hooks: Option<HooksPlan>,
    /// The MCP servers, if any.
    pub mcp: Option<McpPlan>,
    /// The `shell` tool's sandbox.
    pub sandbox: SandboxConfig,
    /// Where `shell` saves output too long to show (made only when a call spills).
    pub spill_dir: PathBuf,
    /// The variables `shell` commands get beside the core set (`--shell-env`, `[shell] env`).
    pub shell_env: Vec<String>,
    /// `--shell-limits`, in order.
    pub shell_limits: Vec<crate::shell_limits::Setting>,
    /// `--timeout-ms`: the cap on every tool's deadline.
    pub timeout_ms: Option<u64>,
    /// `--max-parallel`.
    pub max_parallel: u32,
    /// `--lock-wait-ms`: how long to wait for a log another writer holds.
    pub lock_wait: std::time::Duration,
    /// `--approve` (`dsh serve` asks its client instead under `prompt`).
    pub approve: Approve,
    /// dsh's own files: no tool may write them, `shell` commands see them read-only.
    pub own_files: Vec<PathBuf>,
}

impl<'a> Plan<'a> {
    /// Decides what `options` mean for a pipeline on `workspace` writing to `logs`; reads the
    /// files they name, starts nothing. `transcript_path` is what hooks get as
    /// `transcript_path`.
    pub fn new(
        workspace: &Path,
        logs: Logs<'a>,
        transcript_path: &Path,
        options: &PipelineOptions,
    ) -> Result<Plan<'a>, CliError> {
        let root = workspace_dir(workspace)?;
        let settings = rules::read_claude_settings(options, &root)?;
        let rules = rules::plan(options, &settings, &root)?;
        let hooks = hooks::plan(options, &settings, &root, transcript_path)?;
        let mcp = mcp_plan(options, &root, rules.as_ref().map(|r| &r.merged))?;
        let spill_dir = match &options.spill_dir {
            Some(dir) => std::path::absolute(dir).unwrap_or_else(|_| dir.clone()),
            None => root.join(".dsh").join("spill"),
        };
        let shell_env = crate::shell_env::names(options, rules.as_ref().map(|r| &r.merged));
        let mut plan = Plan {
            root,
            logs,
            durability: options.durability,
            profile: options.profile,
            read_only: options.read_only,
            rules,
            hooks,
            mcp,
            sandbox: SandboxConfig::default(),
            spill_dir,
            shell_env,
            shell_limits: options
                .shell_limits
                .iter()
                .flat_map(|s| s.0.clone())
                .collect(),
            timeout_ms: options.timeout_ms,
            max_parallel: options.max_parallel,
            lock_wait: options.lock_wait(),
            approve: options.approve,
            own_files: Vec::new(),
        };
        plan.own_files = own_files(&plan, options, &settings);
        plan.sandbox = sandbox(&plan, options)?;
        Ok(plan)
    }
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

/// The `--mcp` servers a run starts: every configured one but those the policy denies
/// every tool of.
fn mcp_plan(
    options: &PipelineOptions,
    root: &Path,
    rules: Option<&PermissionRules>,
) -> Result<Option<McpPlan>, CliError> {
    let Some(file) = &options.mcp else {
        return Ok(None);
    };
    let text =
        std::fs::read_to_string(file).map_err(|e| CliError::io("read the MCP config", file, e))?;
    let mut servers = McpServers::from_json(&text)
        .map(|servers| servers.with_default_cwd(root))
        .map_err(|e| CliError::Usage(format!("MCP config {}: {e}", file.display())))?;
    let prefix = |name: &str| format!("mcp__{name}__");
    let prefixes = servers.servers().iter().map(|s| prefix(&s.name)).collect();
    let command_paths = servers.command_paths();
    let mut held_back = Vec::new();
    if let Some(rules) = rules {
        servers.retain(|server| {
            let runs = !rules.denies_every_tool_with_prefix(&prefix(&server.name));
            if !runs {
                held_back.push(server.name.clone());
            }
            runs
        });
    }
    Ok(Some(McpPlan {
        file: file.clone(),
        servers,
        prefixes,
        held_back,
        command_paths,
    }))
}

/// Every file that sets up the run: the log (or the log folder), the policy, the hook
/// settings and the scripts they name, the MCP config and the server commands it names
/// (started this run or not: a later run may), and the spill folder.
fn own_files(
    plan: &Plan<'_>,
    options: &PipelineOptions,
    settings: &[(PathBuf, String)],
) -> Vec<PathBuf> {
    let mut own: Vec<PathBuf> = Vec::new();
    let mut add = |path: &Path| {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        if !own.contains(&path) {
            own.push(path);
        }
    };
    match plan.logs {
        Logs::One(target) => target.file().into_iter().for_each(&mut add),
        Logs::Folder(folder) => add(folder),
        Logs::Judged | Logs::Shared(_) => {}
    }
    [&options.policy, &options.hooks, &options.mcp]
        .into_iter()
        .flatten()
        .for_each(|f| add(f));
    settings.iter().for_each(|(file, _)| add(file));
    if let Some(hooks) = &plan.hooks {
        hooks
            .hooks
            .settings()
            .script_paths(&plan.root)
            .iter()
            .for_each(|p| add(p));
    }
    if let Some(mcp) = &plan.mcp {
        mcp.command_paths.iter().for_each(|p| add(p));
    }
    add(&plan.spill_dir);
    own
}

/// The `shell` tool's sandbox: its mode from `--shell-sandbox` (`--read-only` wins). dsh's
/// own files inside the workspace, and the paths the rules keep `write_file` from writing,
/// are read-only to every command; the paths the rules keep `read_file` from reading are
/// hidden.
fn sandbox(plan: &Plan<'_>, options: &PipelineOptions) -> Result<SandboxConfig, CliError> {
    let mode = match (options.read_only, options.shell_sandbox) {
        (true, _) | (false, ShellSandboxArg::ReadOnly) => SandboxMode::ReadOnly,
        (false, ShellSandboxArg::WorkspaceWrite) => SandboxMode::WorkspaceWrite,
        (false, ShellSandboxArg::Full) => SandboxMode::Full,
    };
    let mut sandbox = SandboxConfig::new(mode).with_network(options.shell_network);
    // Outside the workspace Landlock already keeps every command from writing.
    for file in &plan.own_files {
        let file = file.canonicalize().unwrap_or_else(|_| file.clone());
        if file.starts_with(&plan.root) {
            sandbox = sandbox.read_only_path(file);
        }
    }
    if let Some(rules) = &plan.rules {
        let (read_only, hidden) = crate::policy_paths::classify(&plan.root, &rules.merged)?;
        for path in read_only {
            sandbox = sandbox.read_only_path(path);
        }
        for path in hidden {
            sandbox = sandbox.hidden_path(path);
        }
        for path in crate::outside_paths::hidden(&plan.root, &rules.merged)? {
            sandbox = sandbox.hidden_path(path);
        }
        sandbox = sandbox.with_path_rules(crate::policy_paths::classifier(rules.merged.clone()));
    }
    if let Some(proxy) = crate::net::proxy(options, plan.rules.as_ref().map(|r| &r.merged))? {
        sandbox = sandbox.with_proxy(proxy);
    }
    Ok(sandbox)
}
