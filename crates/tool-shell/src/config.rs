//! How the shell tool is set up: the workspace, the sandbox, the output limits, the spill
//! folder and the environment.

use crate::error::ShellError;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// How much the OS sandbox allows a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Read everything (but hidden paths); write nothing but the call's private temp folder.
    ReadOnly,
    /// Read everything (but hidden paths); write only the workspace (but read-only paths, such
    /// as the `.git` folder) and the call's private temp folder. The default.
    #[default]
    WorkspaceWrite,
    /// No sandbox at all: only when the user asks for it by name. Processes are still
    /// supervised (nothing outlives the call) and the environment still the core set.
    Full,
}

impl SandboxMode {
    /// The mode's name, as the `--shell-sandbox` flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::Full => "full",
        }
    }
}

impl FromStr for SandboxMode {
    type Err = ShellError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" => Ok(SandboxMode::ReadOnly),
            "workspace-write" => Ok(SandboxMode::WorkspaceWrite),
            "full" => Ok(SandboxMode::Full),
            other => Err(ShellError::UnknownMode(other.to_string())),
        }
    }
}

/// What a path rule makes of a workspace path, for the shell's sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathClass {
    /// Nothing: the mode decides.
    Open,
    /// The command may read it, never write it (a read-only mount).
    ReadOnly,
    /// The command may neither read nor write it (covered by an empty stand-in).
    Hidden,
}

/// The policy's path rules, asked about every entry of the workspace at each call (a walk
/// that stops at a classified folder): what a rule hides is hidden whenever the file appeared,
/// a `.env` made during a long session included.
///
/// The rules must answer from the path alone, the same way for the tool's whole life: the
/// walk remembers each entry's answer while the folder holding it is unchanged (a new policy
/// means a new tool, whose walk starts with no memory).
#[derive(Clone)]
pub struct PathRules(pub std::sync::Arc<dyn Fn(&std::path::Path) -> PathClass + Send + Sync>);

impl std::fmt::Debug for PathRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PathRules(..)")
    }
}

/// The OS sandbox of every command (Linux: user, mount, PID and network namespaces, Landlock,
/// seccomp). The policy reaches the shell through it: whoever builds the tool passes
///
/// - `read_only_paths`: every path a command must not write although its mode would let it:
///   paths a rule denies writing (`write_file`'s deny rules, the intent rules), dsh's own files
///   (the log, the policy, the hook settings and scripts). They become read-only bind mounts.
///   The `.git` folder (and a `gitdir:` file's target) and the spill folder are added by the
///   tool itself.
/// - `hidden_paths`: every path a rule denies reading. An empty, unreadable file or folder is
///   mounted over each.
///
/// Paths are absolute or relative to the workspace; a path that does not exist when a call
/// starts is not covered (there is nothing to mount over), so pass folders rather than globs.
///
/// ```
/// use dsh_tool_shell::{SandboxConfig, SandboxMode};
/// let sandbox = SandboxConfig::workspace_write()
///     .read_only_path("secrets")
///     .hidden_path("/home/me/.ssh")
///     .with_network(false);
/// assert_eq!(sandbox.mode, SandboxMode::WorkspaceWrite);
/// ```
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    /// What the command may write.
    pub mode: SandboxMode,
    /// Whether the command may use the network (off by default).
    pub network: bool,
    /// Paths the command may read but never write.
    pub read_only_paths: Vec<PathBuf>,
    /// Paths the command may neither read nor write.
    pub hidden_paths: Vec<PathBuf>,
    /// Rules asked about every workspace entry at each call (see [`PathRules`]).
    pub path_rules: Option<PathRules>,
    /// The network by policy (`net(…)` rules): with the network otherwise off, the command
    /// gets a network namespace of its own with loopback only, and one port on it leads to
    /// this proxy, which judges every connection (see the `net` module).
    pub proxy: Option<dsh_net::NetProxy>,
    /// Testing: act as if the kernel had no Landlock (the call must then be `DENIED`).
    pub(crate) pretend_no_landlock: bool,
}

impl SandboxConfig {
    /// A sandbox of this mode, network off.
    pub fn new(mode: SandboxMode) -> SandboxConfig {
        SandboxConfig {
            mode,
            ..SandboxConfig::default()
        }
    }

    /// `workspace-write`, network off: the default.
    pub fn workspace_write() -> SandboxConfig {
        SandboxConfig::new(SandboxMode::WorkspaceWrite)
    }

    /// `read-only`, network off (what `dsh run --read-only` uses).
    pub fn read_only() -> SandboxConfig {
        SandboxConfig::new(SandboxMode::ReadOnly)
    }

    /// No sandbox (`full`).
    pub fn full() -> SandboxConfig {
        SandboxConfig::new(SandboxMode::Full)
    }

    /// Network on or off.
    pub fn with_network(mut self, network: bool) -> SandboxConfig {
        self.network = network;
        self
    }

    /// Commands reach the network only through this proxy (ignored with the whole network on,
    /// and in `full`).
    pub fn with_proxy(mut self, proxy: dsh_net::NetProxy) -> SandboxConfig {
        self.proxy = Some(proxy);
        self
    }

    /// Adds a path the command must not write.
    pub fn read_only_path(mut self, path: impl Into<PathBuf>) -> SandboxConfig {
        self.read_only_paths.push(path.into());
        self
    }

    /// Adds a path the command must not read.
    pub fn hidden_path(mut self, path: impl Into<PathBuf>) -> SandboxConfig {
        self.hidden_paths.push(path.into());
        self
    }

    /// Asks `rules` about every entry of the workspace at each call (once per entry while
    /// its folder is unchanged: see [`PathRules`]).
    pub fn with_path_rules(
        mut self,
        rules: impl Fn(&std::path::Path) -> PathClass + Send + Sync + 'static,
    ) -> SandboxConfig {
        self.path_rules = Some(PathRules(std::sync::Arc::new(rules)));
        self
    }

    /// For tests of the fail-closed path: every sandboxed call then answers `DENIED` naming
    /// Landlock as missing, as on a kernel without it.
    #[doc(hidden)]
    pub fn pretend_landlock_is_missing(mut self) -> SandboxConfig {
        self.pretend_no_landlock = true;
        self
    }
}

/// Deadlines, output caps, and what a call may consume (see the book's chapter "The shell
/// sandbox" for which mechanism holds each limit).
#[derive(Debug, Clone)]
pub struct ShellLimits {
    /// A call without `timeout_ms` gets this (120 s).
    pub default_timeout: Duration,
    /// The most a call may ask for (600 s).
    pub max_timeout: Duration,
    /// After SIGTERM, how long the processes get before SIGKILL.
    pub kill_grace: Duration,
    /// Bytes of each stream kept in memory from its start, and from its end (256 KiB each:
    /// 1 MiB per call for both streams).
    pub keep_head: usize,
    /// See `keep_head`.
    pub keep_tail: usize,
    /// Bytes of each stream the model is shown from its start and from its end.
    pub show_head: usize,
    /// See `show_head`.
    pub show_tail: usize,
    /// The most of one stream a spill file holds (64 MiB); the rest is counted.
    pub max_spill_bytes: u64,
    /// Spill files of the last this-many spilling calls are kept (20).
    pub keep_spilled_calls: usize,
    /// Memory of the whole call (a cgroup where dsh can make one, else `RLIMIT_AS` per
    /// process): 4 GiB. `None`: unbounded.
    pub memory_bytes: Option<u64>,
    /// Processes of the call (a cgroup's `pids.max`, else `RLIMIT_NPROC` in the call's user
    /// namespace): 1,024.
    pub processes: Option<u64>,
    /// CPU seconds of each process (`RLIMIT_CPU`; SIGXCPU past it): 600.
    pub cpu_seconds: Option<u64>,
    /// Size of each file a process writes (`RLIMIT_FSIZE`; SIGXFSZ past it): 4 GiB. The total
    /// written into the workspace is not bounded.
    pub file_size_bytes: Option<u64>,
    /// Open files of each process (`RLIMIT_NOFILE`): 4,096.
    pub open_files: Option<u64>,
    /// Size of the call's private temp folder (a tmpfs, in the sandboxed modes): 256 MiB.
    pub tmp_bytes: u64,
}

impl Default for ShellLimits {
    fn default() -> Self {
        ShellLimits {
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(1),
            keep_head: 256 * 1024,
            keep_tail: 256 * 1024,
            show_head: 8 * 1024,
            show_tail: 24 * 1024,
            max_spill_bytes: 64 * 1024 * 1024,
            keep_spilled_calls: 20,
            memory_bytes: Some(4 << 30),
            processes: Some(1024),
            cpu_seconds: Some(600),
            file_size_bytes: Some(4 << 30),
            open_files: Some(4096),
            tmp_bytes: 256 << 20,
        }
    }
}

/// Everything the shell tool needs.
///
/// ```
/// use dsh_tool_shell::{SandboxConfig, ShellConfig};
/// let config = ShellConfig::new("/work/project")
///     .sandbox(SandboxConfig::workspace_write())
///     .pass_env("GITHUB_TOKEN");
/// ```
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// The workspace commands run in.
    pub workspace: PathBuf,
    /// The OS sandbox.
    pub sandbox: SandboxConfig,
    /// Where cut output goes (default `.dsh/spill` in the workspace).
    pub spill_dir: Option<PathBuf>,
    /// Variables passed to commands besides the core set (`PATH`, `HOME`, `LANG`, `LC_*`,
    /// `TERM`, `TZ`, `USER`, `LOGNAME`, `SHELL`, `TMPDIR`): exact names, or a prefix ending
    /// in `*` (`CARGO_*`). Every other variable of dsh's environment stays out.
    pub pass_env: Vec<String>,
    /// The environment commands start from, before scrubbing (default: dsh's own).
    pub base_env: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
    /// Deadlines and caps.
    pub limits: ShellLimits,
}

impl ShellConfig {
    /// The defaults for a workspace: `workspace-write`, network off, spill to `.dsh/spill`.
    pub fn new(workspace: impl Into<PathBuf>) -> ShellConfig {
        ShellConfig {
            workspace: workspace.into(),
            sandbox: SandboxConfig::default(),
            spill_dir: None,
            pass_env: Vec::new(),
            base_env: None,
            limits: ShellLimits::default(),
        }
    }

    /// Sets the sandbox.
    pub fn sandbox(mut self, sandbox: SandboxConfig) -> ShellConfig {
        self.sandbox = sandbox;
        self
    }

    /// Moves the spill folder (relative paths are taken from the workspace).
    pub fn spill_dir(mut self, dir: impl Into<PathBuf>) -> ShellConfig {
        self.spill_dir = Some(dir.into());
        self
    }

    /// Passes a variable (or, ending in `*`, every variable with that prefix) to commands
    /// besides the core set.
    pub fn pass_env(mut self, name: impl Into<String>) -> ShellConfig {
        self.pass_env.push(name.into());
        self
    }

    /// Starts commands from this environment instead of dsh's own (it is scrubbed all the
    /// same).
    pub fn base_env<K: Into<std::ffi::OsString>, V: Into<std::ffi::OsString>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> ShellConfig {
        self.base_env = Some(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: ShellLimits) -> ShellConfig {
        self.limits = limits;
        self
    }
}
