//! The `shell` tool: `bash -c COMMAND` in the workspace, sandboxed and supervised.

use crate::capture::Capture;
use crate::config::{SandboxMode, ShellConfig};
use crate::env;
use crate::error::ShellError;
use crate::git_dirs;
use crate::limits::CallLimits;
use crate::parse;
use crate::process::background::{self, Pending, StandbyPool};
use crate::process::plan::{ChildPlan, Stage};
use crate::process::{self, Ending, Launch, LaunchError};
use crate::sandbox::{self, PrivateDir};
use crate::spill::{SpillDir, SpillFile};
use async_trait::async_trait;
use dsh_core::{ContentBlock, ErrorCode, SubjectKind, ToolContext, ToolDefinition, ToolFailure};
use dsh_net::EgressReport;
use serde_json::{Map, Value, json};
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// The tool's name.
pub const SHELL: &str = "shell";

/// What keeps a sandboxed command from Unix sockets outside (the result's meta says it).
const UNIX_SOCKETS: &str = "no new AF_UNIX socket (seccomp; socketpair works): this kernel's \
Landlock has no right for connecting to socket files";

/// How long output pipes are drained after the tree is gone (only a process that escaped the
/// tree could still hold them open).
const DRAIN: Duration = Duration::from_millis(500);

const DESCRIPTION: &str = "Runs a bash command in the workspace and returns its exit code, \
stdout and stderr. stdin is empty; there is no terminal. Long output is shown head and tail; \
the whole of it is saved to a file you can read with read_file. The command runs in a sandbox: \
it may write only inside the workspace and $TMPDIR (the .git folder stays \
read-only), cannot create Unix sockets, has no network unless the user allowed it, and is \
bounded in memory, processes, CPU time, file size and open files; a refused write or connect \
fails like any error (EACCES, EPERM, EROFS). Everything the command starts is killed when it \
exits or times out: do not start servers or background jobs meant to outlive the call. \
Default timeout 120000 ms, at most 600000.";

/// The `shell` tool. Build it with [`ShellTool::new`] and register it like any tool.
///
/// ```no_run
/// use dsh_tool_shell::{ShellConfig, ShellTool};
/// let tool = ShellTool::new(ShellConfig::new("/work/project")).unwrap();
/// # let registry = dsh_core::ToolRegistry::new();
/// registry.register(tool).unwrap();
/// ```
#[derive(Debug)]
pub struct ShellTool {
    config: ShellConfig,
    workspace: PathBuf,
    spill: Arc<SpillDir>,
    shell: PathBuf,
    /// The workspace walk's memory between calls (`git_dirs::WalkCache`).
    walks: git_dirs::WalkCache,
    /// The next calls' cgroups, each with a standby already in them (`process::Standby`),
    /// made in the background; dropped (each standby reaped, then its cgroups removed) with
    /// the tool.
    standbys: Arc<StandbyPool>,
    /// What this tool's calls handed to the background thread (reaping, cgroup removal, the
    /// pool's refills): the tool waits for it when it goes.
    pending: Arc<Pending>,
    /// The sandboxed calls' private folder (`sandbox::PrivateDir`), made once: see
    /// [`ShellTool::private_dir`].
    skeleton: Mutex<Option<Arc<PrivateDir>>>,
}

/// A tool goes with everything it made: its standbys (reaped, their cgroups removed) and what
/// its calls handed to the background thread.
impl Drop for ShellTool {
    fn drop(&mut self) {
        self.standbys.close();
        self.pending.wait();
        self.standbys.close();
    }
}

/// Finds `bash` (or `sh` where there is none) on `PATH`.
fn find_shell() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    find_shell_in(&path)
}

/// `bash` on `path` if any folder holds one, else `sh`, else `/bin/sh`.
fn find_shell_in(path: &std::ffi::OsStr) -> PathBuf {
    for name in ["bash", "sh"] {
        for dir in std::env::split_paths(path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    PathBuf::from("/bin/sh")
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// What the walk at a call's start gives: the read-only paths, the hidden paths, the `.git`
/// entries.
type Walked = (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>);

/// One output stream: what is kept in memory, shared with the partial-output view.
type Shared = Arc<Mutex<Capture>>;

fn locked(c: &Shared) -> std::sync::MutexGuard<'_, Capture> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a finished call shows.
struct Report {
    exit_code: Option<i32>,
    signal: Option<String>,
    timed_out: Option<u64>,
    stdout: (String, u64, u64),
    stderr: (String, u64, u64),
    spill: Vec<(String, PathBuf, u64)>,
    notes: Vec<String>,
}

fn show_path(workspace: &Path, path: &Path) -> String {
    path.strip_prefix(workspace)
        .unwrap_or(path)
        .display()
        .to_string()
}

impl Report {
    fn value(&self, workspace: &Path) -> Value {
        let spill: Map<String, Value> = self
            .spill
            .iter()
            .map(|(stream, path, bytes)| {
                (
                    stream.clone(),
                    json!({"path": show_path(workspace, path), "bytes": bytes}),
                )
            })
            .collect();
        json!({
            "exitCode": self.exit_code,
            "signal": self.signal,
            "timedOutMs": self.timed_out,
            "stdout": self.stdout.0,
            "stderr": self.stderr.0,
            "stdoutBytes": self.stdout.1,
            "stderrBytes": self.stderr.1,
            "stdoutOmitted": self.stdout.2,
            "stderrOmitted": self.stderr.2,
            "spill": spill,
            "notes": self.notes,
        })
    }
}

/// The text the model reads, from the canonical value.
fn render(value: &Value) -> String {
    let mut out = String::new();
    if let Some(ms) = value["timedOutMs"].as_u64() {
        out.push_str(&format!(
            "timed out after {ms} ms: the command and everything it started were killed\n"
        ));
    } else if let Some(sig) = value["signal"].as_str() {
        out.push_str(&format!("killed by {sig}\n"));
    } else if let Some(code) = value["exitCode"].as_i64() {
        out.push_str(&format!("exit code {code}\n"));
    }
    for stream in ["stdout", "stderr"] {
        let text = value[stream].as_str().unwrap_or("");
        if text.is_empty() {
            continue;
        }
        out.push_str(&format!("--- {stream} ---\n{text}"));
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    if value["stdout"].as_str().unwrap_or("").is_empty()
        && value["stderr"].as_str().unwrap_or("").is_empty()
    {
        out.push_str("(no output)\n");
    }
    if let Some(spill) = value["spill"].as_object() {
        for (stream, file) in spill {
            out.push_str(&format!(
                "[the whole {stream} ({} bytes kept) is in {}: read it with read_file]\n",
                file["bytes"],
                file["path"].as_str().unwrap_or("")
            ));
        }
    }
    if let Some(notes) = value["notes"].as_array() {
        for note in notes.iter().filter_map(Value::as_str) {
            out.push_str(&format!("note: {note}\n"));
        }
    }
    out.trim_end().to_string()
}

/// Where a stream spills once the model's view of it is cut.
struct SpillTo {
    dir: Arc<SpillDir>,
    call_id: String,
    stream: &'static str,
    cap: u64,
}

/// Reads one stream to its end into the capture, spilling once the model's view is cut.
async fn read_stream(
    mut pipe: tokio::net::unix::pipe::Receiver,
    capture: Shared,
    to: SpillTo,
    threshold: u64,
) -> Option<(PathBuf, u64)> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut spill: Option<SpillFile> = None;
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let start = {
            let mut c = locked(&capture);
            c.push(chunk);
            if spill.is_none() && c.total() > threshold {
                // Everything so far is still in the head: the view's cap is below the head's.
                Some(c.head().to_vec())
            } else {
                None
            }
        };
        match (start, spill.as_mut()) {
            (Some(start), _) => {
                let mut file = to.dir.open(&to.call_id, to.stream, to.cap).await;
                file.write(&start).await;
                spill = Some(file);
            }
            (None, Some(file)) => file.write(chunk).await,
            (None, None) => {}
        }
    }
    match spill {
        Some(file) => file.close().await,
        None => None,
    }
}

/// Aborts the stream readers if the call's future is dropped.
struct Readers(Vec<tokio::task::JoinHandle<Option<(PathBuf, u64)>>>);

impl Drop for Readers {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

fn input_error(message: impl Into<String>) -> ToolFailure {
    ToolFailure::with_code(ErrorCode::ToolInputError, message)
}

/// How the "may have refused this" note names the call's network: the whole network (nothing
/// said), only through dsh's proxy (naming the hosts it refused), or none.
fn network_words(whole: bool, proxied: bool, egress: Option<&EgressReport>) -> (String, String) {
    if whole {
        return (String::new(), String::new());
    }
    if !proxied {
        return (", network off".into(), ", and have no network".into());
    }
    let refused = egress.map(EgressReport::refused_hosts).unwrap_or_default();
    let refused = if refused.is_empty() {
        String::new()
    } else {
        format!("; it refused {}", refused.join(", "))
    };
    (
        ", network only through dsh's proxy".into(),
        format!(
            ", and reach the network only through dsh's proxy, by the policy's net(…) \
             rules{refused}"
        ),
    )
}

fn sandbox_refusal(text: &str) -> bool {
    [
        "Read-only file system",
        "Permission denied",
        "Operation not permitted",
        "Network is unreachable",
        "Address family not supported",
        "Cannot assign requested address",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

impl ShellTool {
    /// A shell tool over `config.workspace` (which must exist).
    pub fn new(config: ShellConfig) -> Result<ShellTool, ShellError> {
        let workspace =
            config
                .workspace
                .canonicalize()
                .map_err(|source| ShellError::Workspace {
                    path: config.workspace.clone(),
                    source,
                })?;
        // Made by the first call that spills: a session without one leaves no folder.
        let spill_dir = crate::spill::resolved(&match &config.spill_dir {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => workspace.join(dir),
            None => workspace.join(".dsh").join("spill"),
        });
        let spill = Arc::new(SpillDir::new(spill_dir, config.limits.keep_spilled_calls));
        let standbys = Arc::new(StandbyPool::new(
            config.limits.clone(),
            config.sandbox.mode != SandboxMode::Full,
        ));
        Ok(ShellTool {
            config,
            workspace,
            spill,
            shell: find_shell(),
            walks: git_dirs::WalkCache::default(),
            standbys,
            pending: Arc::new(Pending::default()),
            skeleton: Mutex::new(None),
        })
    }

    /// The workspace, with its symlinks resolved.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The spill folder (dsh's own: read-only to every command).
    pub fn spill_dir(&self) -> &Path {
        self.spill.path()
    }

    /// The sandbox mode.
    pub fn mode(&self) -> SandboxMode {
        self.config.sandbox.mode
    }

    fn workdir(&self, input: &Value) -> Result<PathBuf, ToolFailure> {
        let Some(given) = input.get("workdir").and_then(Value::as_str) else {
            return Ok(self.workspace.clone());
        };
        let joined = if Path::new(given).is_absolute() {
            PathBuf::from(given)
        } else {
            self.workspace.join(given)
        };
        let resolved = joined
            .canonicalize()
            .map_err(|e| input_error(format!("workdir `{given}` cannot be used: {e}")))?;
        if !resolved.starts_with(&self.workspace) {
            return Err(ToolFailure::with_code(
                ErrorCode::Denied,
                format!("workdir `{given}` is outside the workspace"),
            ));
        }
        if !resolved.is_dir() {
            return Err(input_error(format!("workdir `{given}` is not a folder")));
        }
        Ok(resolved)
    }

    fn timeout(&self, input: &Value) -> Duration {
        let limits = &self.config.limits;
        input
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or(limits.default_timeout)
            .min(limits.max_timeout)
            .max(Duration::from_millis(1))
    }

    /// One walk at each call: the paths the tool keeps read-only to commands (the spill
    /// folder; in `workspace-write`, every git control entry of the workspace; what the path
    /// rules keep read-only), the paths the rules hide, and the `.git` entries found. An
    /// `Err` (a folder the walk cannot list) denies the call.
    fn protected(&self) -> Result<Walked, String> {
        let mut paths = vec![self.spill.path().to_path_buf()];
        let writes = self.config.sandbox.mode == SandboxMode::WorkspaceWrite;
        let rules = self.config.sandbox.path_rules.as_ref();
        if !writes && rules.is_none() {
            return Ok((paths, Vec::new(), Vec::new()));
        }
        let found = self
            .walks
            .walk(&self.workspace, rules, git_dirs::MAX_ENTRIES)?;
        paths.extend(found.read_only);
        if writes {
            // The workspace's own, even where the walk found none (a `.git` made by a racing
            // command is still covered if it exists when the mounts are made).
            paths.extend(git_dirs::control_paths(&self.workspace.join(".git")));
            for dot_git in &found.git {
                paths.extend(git_dirs::control_paths(dot_git));
            }
        }
        Ok((paths, found.hidden, found.git))
    }

    /// The call's private folder. Unsandboxed (`full`), the command writes in its `TMPDIR`
    /// itself: a fresh folder per call. Sandboxed, the folder holds only mount points (the
    /// call's tmpfs `TMPDIR` is mounted on `w/tmp` inside the call's own mount namespace) and
    /// the empty stand-ins of hidden paths, none of which a command can change (every mount
    /// outside the workspace is read-only to it), so one folder serves every call of the tool
    /// and is removed with it: a call then creates no inode on the host (creating one costs
    /// milliseconds on a busy file system without a journal, where ext4 skips every
    /// recently deleted inode). Where the folder would lie inside the workspace (a command
    /// could write there), each call gets its own again.
    fn private_dir(&self) -> std::io::Result<Arc<PrivateDir>> {
        if self.config.sandbox.mode == SandboxMode::Full {
            return PrivateDir::new().map(Arc::new);
        }
        let mut slot = self.skeleton.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = slot.as_ref() {
            return Ok(shared.clone());
        }
        let made = Arc::new(PrivateDir::new()?);
        let inside = made
            .path()
            .canonicalize()
            .map(|p| p.starts_with(&self.workspace))
            .unwrap_or(true);
        if !inside {
            *slot = Some(made.clone());
        }
        Ok(made)
    }

    /// The `.git` entries that appeared during a `workspace-write` call (relative paths).
    fn new_git_entries(&self, before: &[PathBuf]) -> Result<Vec<String>, String> {
        if self.config.sandbox.mode != SandboxMode::WorkspaceWrite {
            return Ok(Vec::new());
        }
        let after = self
            .walks
            .walk(&self.workspace, None, git_dirs::MAX_ENTRIES)?
            .git;
        Ok(after
            .iter()
            .filter(|p| !before.contains(p))
            .map(|p| show_path(&self.workspace, p))
            .collect())
    }

    fn plan(
        &self,
        command: &str,
        workdir: &Path,
        private: &PrivateDir,
        prepared: sandbox::Prepared,
    ) -> Result<Launch, ToolFailure> {
        let c = |bytes: &[u8], what: &str| {
            CString::new(bytes).map_err(|_| input_error(format!("the {what} holds a NUL byte")))
        };
        let tmp = private.tmp();
        let extra: Vec<(&str, &OsStr)> = vec![
            ("TMPDIR", tmp.as_os_str()),
            ("TMP", tmp.as_os_str()),
            ("TEMP", tmp.as_os_str()),
        ];
        let base: Vec<(OsString, OsString)> = match &self.config.base_env {
            Some(vars) => vars.clone(),
            None => std::env::vars_os().collect(),
        };
        let envp = env::scrubbed(base, &self.config.pass_env, &extra)
            .into_iter()
            .filter_map(|(name, value)| {
                let mut pair: OsString = name;
                pair.push("=");
                pair.push(value);
                CString::new(pair.into_vec()).ok()
            })
            .collect();
        let argv0 = self
            .shell
            .file_name()
            .map(|n| n.as_bytes().to_vec())
            .unwrap_or_else(|| b"sh".to_vec());
        let plan = ChildPlan {
            parent_pid: 0,
            stdin_null: -1,
            stdout_w: -1,
            stderr_w: -1,
            report_w: -1,
            control_r: -1,
            landlock_fd: None,
            net: None,
            namespaces: prepared.namespaces,
            mount_proc: prepared.mount_proc,
            sandboxed: prepared.sandboxed,
            last_cap: sandbox::last_cap(),
            seccomp: prepared.seccomp,
            workdir: c(workdir.as_os_str().as_bytes(), "workdir")?,
            program: c(self.shell.as_os_str().as_bytes(), "shell path")?,
            argv: vec![
                c(&argv0, "shell name")?,
                c(b"-c", "flag")?,
                c(command.as_bytes(), "command")?,
            ],
            envp,
            rlimits: Vec::new(),
            cgroup_procs: Vec::new(),
            joined: false,
            dsh_blocks: crate::process::plan::own_argument_blocks(),
        };
        Ok(Launch {
            plan,
            landlock: prepared.landlock,
        })
    }

    fn denied(&self, what: impl std::fmt::Display) -> ToolFailure {
        ToolFailure::with_code(
            ErrorCode::Denied,
            format!(
                "the shell's sandbox ({}) cannot be set up here: {what}; the command was not run \
                 (sandbox `full` runs without one, when the user asks for it)",
                self.config.sandbox.mode.as_str()
            ),
        )
    }

    fn launch_failure(&self, error: LaunchError) -> ToolFailure {
        match error {
            LaunchError::Io(e) => ToolFailure::new(format!("the command could not start: {e}")),
            LaunchError::Setup {
                stage,
                index,
                errno,
            } => {
                let cause = std::io::Error::from_raw_os_error(errno);
                let what =
                    if stage == Stage::Bind || stage == Stage::ReadOnly || stage == Stage::Hide {
                        format!("{} (mount #{index}) failed: {cause}", stage.describe())
                    } else {
                        format!("{} failed: {cause}", stage.describe())
                    };
                if stage.is_sandbox() && self.config.sandbox.mode != SandboxMode::Full {
                    self.denied(what)
                } else {
                    ToolFailure::new(format!("the command could not start: {what}"))
                }
            }
        }
    }

    fn meta(
        &self,
        ending: &Ending,
        fallback: Option<i32>,
        elapsed: Duration,
        refused: bool,
    ) -> Map<String, Value> {
        let mut meta = Map::new();
        meta.insert("sandbox".into(), json!(self.config.sandbox.mode.as_str()));
        // The whole network (`--shell-network`), never the proxy's: a proxied call says
        // `networkProxy: true` beside it (`net::record`).
        meta.insert("network".into(), json!(self.config.sandbox.network));
        let isolation = match fallback {
            None => json!("pid-namespace"),
            Some(_) => json!("subreaper"),
        };
        meta.insert("processIsolation".into(), isolation);
        if let Some(errno) = fallback.filter(|e| *e != 0) {
            meta.insert(
                "pidNamespaceUnavailable".into(),
                json!(std::io::Error::from_raw_os_error(errno).to_string()),
            );
        }
        meta.insert("durationMs".into(), json!(elapsed.as_millis() as u64));
        if ending.killed_leftovers {
            meta.insert("killedLeftovers".into(), json!(true));
        }
        if refused {
            meta.insert("sandboxRefusal".into(), json!(true));
        }
        meta
    }
}

#[async_trait]
impl ToolDefinition for ShellTool {
    fn name(&self) -> &str {
        SHELL
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1, "description": "The bash command."},
                "timeout_ms": {"type": "integer", "minimum": 1,
                    "description": "Kill the command after this long (default 120000, at most 600000)."},
                "workdir": {"type": "string",
                    "description": "The folder to run in, inside the workspace (default: its root)."},
                "description": {"type": "string", "description": "What the command does, in a few words."}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.config.limits.default_timeout.as_millis() as u64)
    }

    fn timeout_ms_for(&self, input: &Value) -> Option<u64> {
        Some(self.timeout(input).as_millis() as u64)
    }

    // Strict function calling sends these empty for "not given".
    fn empty_means_absent(&self) -> &[&'static str] {
        &["timeout_ms", "workdir"]
    }

    fn owns_deadline(&self) -> bool {
        true
    }

    fn permission_subject_kind(&self) -> SubjectKind {
        SubjectKind::Command
    }

    fn permission_subjects(&self, input: &Value) -> Vec<String> {
        input
            .get("command")
            .and_then(Value::as_str)
            .map(parse::subjects)
            .unwrap_or_default()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        let started = Instant::now();
        let command = input
            .get("command")
            .and_then(Value::as_str)
            .ok_or_else(|| input_error("`command` is required"))?
            .to_string();
        let timeout = self.timeout(&input);
        let workdir = self.workdir(&input)?;
        let limits = &self.config.limits;
        let private = self
            .private_dir()
            .map_err(|e| ToolFailure::new(format!("no private temp folder: {e}")))?;
        let (protected, hidden, git_before) = self.protected().map_err(|why| self.denied(why))?;
        let prepared = sandbox::prepare(
            &self.config.sandbox,
            &self.workspace,
            &sandbox::Paths {
                protected: &protected,
                hidden: &hidden,
            },
            &private,
            limits.tmp_bytes,
        )
        .map_err(|why| self.denied(why))?;
        let call_net =
            crate::net::CallNet::new(&self.config.sandbox).map_err(|why| self.denied(why))?;
        let sandboxed = prepared.sandboxed;
        let (standby, mut bounds) = match self.standbys.take() {
            Some((standby, bounds)) => (Some(standby), bounds),
            None => (
                None,
                CallLimits::prepare(limits, sandboxed).map_err(|why| self.denied(why))?,
            ),
        };
        let mut launch = self.plan(&command, &workdir, &private, prepared)?;
        launch.plan.rlimits = bounds.rlimits.clone();
        launch.plan.cgroup_procs = bounds.procs_fds();
        let uses_cgroups = !launch.plan.cgroup_procs.is_empty();
        if let Some(net) = &call_net {
            net.apply(&mut launch);
        }
        let launched = process::launch(launch, limits.kill_grace, standby).await;
        bounds.forked();
        if uses_cgroups {
            // The next calls' cgroups are made and joined in the background.
            self.standbys.refill(&self.pending);
        }
        let mut running = launched.map_err(|e| self.launch_failure(e))?;
        let call_proxy = match call_net {
            Some(net) => match net.serve(&ctx.agent, &ctx.call_id).await {
                Ok(proxy) => Some(proxy),
                // The keeper's report says why; without the proxy the command has no way out.
                Err(why) => {
                    tracing::warn!(%why, "the network proxy did not start");
                    None
                }
            },
            None => None,
        };

        let stdout = Arc::new(Mutex::new(Capture::new(limits.keep_head, limits.keep_tail)));
        let stderr = Arc::new(Mutex::new(Capture::new(limits.keep_head, limits.keep_tail)));
        let (show_head, show_tail) = (limits.show_head, limits.show_tail);
        {
            let (out, err) = (stdout.clone(), stderr.clone());
            ctx.partial.publish(move || {
                let mut text = String::from("output so far:\n");
                for (name, stream) in [("stdout", &out), ("stderr", &err)] {
                    let (shown, _) = locked(stream).render(show_head, show_tail);
                    if !shown.is_empty() {
                        text.push_str(&format!("--- {name} ---\n{shown}\n"));
                    }
                }
                vec![ContentBlock::text(text.trim_end())]
            });
        }
        let threshold = (show_head + show_tail) as u64;
        let mut readers = Readers(Vec::new());
        for (stream, capture, name) in [
            (running.stdout.take(), stdout.clone(), "stdout"),
            (running.stderr.take(), stderr.clone(), "stderr"),
        ] {
            let Some(pipe) = stream else { continue };
            let to = SpillTo {
                dir: self.spill.clone(),
                call_id: ctx.call_id.clone(),
                stream: name,
                cap: limits.max_spill_bytes,
            };
            readers
                .0
                .push(tokio::spawn(read_stream(pipe, capture, to, threshold)));
        }

        let ending = running
            .finish(started + timeout, &ctx.signal)
            .await
            .map_err(|e| self.launch_failure(e))?;
        // Every connection of the call ends with it.
        let egress = match call_proxy {
            Some(proxy) => Some(proxy.finish().await),
            None => None,
        };
        let mut spilled = Vec::new();
        for (handle, name) in std::mem::take(&mut readers.0)
            .into_iter()
            .zip(["stdout", "stderr"])
        {
            let abort = handle.abort_handle();
            match tokio::time::timeout(DRAIN, handle).await {
                Ok(Ok(Some((path, bytes)))) => spilled.push((name.to_string(), path, bytes)),
                Ok(_) => {}
                Err(_) => abort.abort(),
            }
        }
        self.spill
            .remember(spilled.iter().map(|(_, p, _)| p.clone()).collect());

        let render_stream = |c: &Shared| {
            let c = locked(c);
            let (text, omitted) = c.render(show_head, show_tail);
            (text, c.total(), omitted)
        };
        let (exit_code, signal) = match ending.status {
            Some(status) if libc::WIFSIGNALED(status) => {
                (None, Some(signal_name(libc::WTERMSIG(status))))
            }
            Some(status) => (Some(libc::WEXITSTATUS(status)), None),
            None => (None, None),
        };
        let mut report = Report {
            exit_code,
            signal,
            timed_out: ending.timed_out.then_some(timeout.as_millis() as u64),
            stdout: render_stream(&stdout),
            stderr: render_stream(&stderr),
            spill: spilled,
            notes: Vec::new(),
        };
        let outcome = bounds.outcome(
            ending
                .status
                .filter(|s| libc::WIFSIGNALED(*s))
                .map(|s| libc::WTERMSIG(s)),
            report.exit_code,
            &format!("{}\n{}", report.stderr.0, report.stdout.0),
        );
        if !outcome.hit.is_empty() {
            report.notes.push(format!(
                "the command hit the call's limit on {} and was stopped there",
                outcome.hit.join(", ")
            ));
        }
        if !outcome.maybe.is_empty() {
            report.notes.push(format!(
                "the command may have hit the call's limit on {} (the mechanism cannot tell)",
                outcome.maybe.join(", ")
            ));
        }
        let new_git = self.new_git_entries(&git_before);
        match &new_git {
            Ok(new) if !new.is_empty() => report.notes.push(format!(
                "the command made git repositories ({}): do not run git there outside the \
                 sandbox before checking their config and hooks",
                new.join(", ")
            )),
            Ok(_) => {}
            Err(why) => report.notes.push(format!(
                "the workspace could not be checked for git repositories the command made: {why}"
            )),
        }
        let fallback = running.fallback;
        if fallback.is_some() && self.config.sandbox.mode != SandboxMode::Full {
            report.notes.push(
                "this kernel gave no PID namespace: a child subreaper tracked the command's processes instead"
                    .into(),
            );
        }
        let failed = report.exit_code != Some(0);
        let refused = self.config.sandbox.mode != SandboxMode::Full
            && failed
            && (sandbox_refusal(&report.stderr.0) || sandbox_refusal(&report.stdout.0));
        if refused {
            let (network, reach) = network_words(
                self.config.sandbox.network,
                crate::net::proxied(&self.config.sandbox),
                egress.as_ref(),
            );
            report.notes.push(format!(
                "the sandbox ({}{network}) may have refused this: commands may write only inside \
                 the workspace and $TMPDIR (the .git folder and dsh's own files stay \
                 read-only){reach}",
                self.config.sandbox.mode.as_str(),
            ));
        }
        if ending.killed_leftovers && !ending.timed_out {
            report
                .notes
                .push("processes the command left running were killed when it exited".into());
        }
        let mut meta = self.meta(&ending, fallback, started.elapsed(), refused);
        meta.insert("limits".into(), bounds.meta());
        // The tree is gone: the keeper's reaping (its exit may still be tearing down the
        // namespaces), the cgroups' removal and, unsandboxed, the private folder's go off the
        // call's path.
        background::after_call(
            running.keeper_to_reap(),
            Box::new((bounds, private)),
            Some(self.pending.clone()),
        );
        if let Ok(new) = &new_git
            && !new.is_empty()
        {
            meta.insert("newGitEntries".into(), json!(new));
        }
        if !outcome.hit.is_empty() {
            meta.insert("limitHit".into(), json!(outcome.hit));
        }
        if !outcome.maybe.is_empty() {
            meta.insert("limitMayHaveHit".into(), json!(outcome.maybe));
        }
        if self.config.sandbox.mode != SandboxMode::Full {
            meta.insert("unixSockets".into(), json!(UNIX_SOCKETS));
            meta.insert("landlock".into(), sandbox::landlock_report());
        }
        if let Some(egress) = &egress {
            let mut net_meta = Map::new();
            crate::net::record(egress, &mut net_meta, &mut report.notes);
            meta.extend(net_meta);
        }
        let value = report.value(&self.workspace);
        meta.insert("exitCode".into(), value["exitCode"].clone());
        meta.insert("signal".into(), value["signal"].clone());
        meta.insert("stdoutBytes".into(), value["stdoutBytes"].clone());
        meta.insert("stderrBytes".into(), value["stderrBytes"].clone());
        if let Some(spill) = value["spill"].as_object().filter(|s| !s.is_empty()) {
            meta.insert("spill".into(), Value::Object(spill.clone()));
        }
        if ending.timed_out {
            let content = vec![ContentBlock::text(render(&value))];
            return Err(ToolFailure::with_code(
                ErrorCode::ToolTimeout,
                format!(
                    "the command did not finish within {} ms and was killed",
                    timeout.as_millis()
                ),
            )
            .with_content(content)
            .with_meta(meta));
        }
        if ending.cancelled {
            let reason = ctx
                .signal
                .reason()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "cancelled".into());
            let message = format!("the call was cancelled while it ran: {reason}");
            let content = vec![
                ContentBlock::text(&message),
                ContentBlock::text(render(&value)),
            ];
            return Err(ToolFailure::with_code(ErrorCode::Aborted, message)
                .with_content(content)
                .with_meta(meta));
        }
        let mut value = value;
        if let Value::Object(map) = &mut value {
            map.insert("meta".into(), Value::Object(meta));
        }
        Ok(value)
    }

    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(render(value))]
    }

    fn result_meta(&self, value: &Value) -> Option<Map<String, Value>> {
        value.get("meta").and_then(Value::as_object).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_is_preferred_and_sh_is_the_fallback() {
        let only_sh = tempfile::tempdir().unwrap();
        let with_bash = tempfile::tempdir().unwrap();
        let empty = tempfile::tempdir().unwrap();
        std::fs::write(only_sh.path().join("sh"), "").unwrap();
        std::fs::write(with_bash.path().join("bash"), "").unwrap();
        let path = |dirs: &[&Path]| std::env::join_paths(dirs).unwrap();
        assert_eq!(
            find_shell_in(&path(&[only_sh.path()])),
            only_sh.path().join("sh")
        );
        assert_eq!(
            find_shell_in(&path(&[only_sh.path(), with_bash.path()])),
            with_bash.path().join("bash"),
            "bash anywhere on PATH wins over sh earlier on it"
        );
        assert_eq!(
            find_shell_in(&path(&[empty.path()])),
            PathBuf::from("/bin/sh")
        );
    }

    #[test]
    fn signals_have_names() {
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(77), "signal 77");
    }

    #[test]
    fn the_rendering_names_spill_files_and_notes() {
        let text = render(&json!({
            "exitCode": 2, "signal": null, "timedOutMs": null,
            "stdout": "a\n… 10 bytes omitted …\nz", "stderr": "",
            "spill": {"stdout": {"path": ".dsh/spill/c.stdout.txt", "bytes": 12}},
            "notes": ["n1"]
        }));
        assert!(text.starts_with("exit code 2\n--- stdout ---\na\n… 10 bytes omitted …\nz"));
        assert!(text.contains(".dsh/spill/c.stdout.txt"));
        assert!(text.ends_with("note: n1"));
    }
}
