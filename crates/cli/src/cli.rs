//! The command line, as clap reads it.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// The exit codes, as `--help` shows them at the end of every command's help.
macro_rules! exit_codes {
    () => {
        "\
Exit codes:
  0  success
  1  `run`: some transcript lines were not assistant messages (each one is recorded
     as a TOOL_INPUT_ERROR result and named on stderr)
     `check`: the log violates an invariant, or needs recovery (`dsh recover`); the
     first problem is named on stderr
  2  usage: a bad option or argument, or a policy file that does not parse
  3  I/O or log failure: a file could not be read or created, or the session log
     could not be written or read (a directory, no permission, corrupt in the middle)
  130, 143  `run`: stopped by SIGINT or SIGTERM; the running calls were recorded as
     aborted and the log was closed cleanly (a second signal exits at once; the log
     may then need `dsh recover`)"
    };
}

const EXIT_CODES: &str = exit_codes!();

const TOP_HELP: &str = concat!(
    "New here? `dsh demo` runs a bundled example on a fresh temporary copy of a sample project.\n\n",
    exit_codes!()
);

/// Runs recorded model tool calls through the dsh pipeline, and replays and checks the
/// session log it writes.
#[derive(Debug, Parser)]
#[command(name = "dsh", version, after_help = TOP_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run each assistant message of a transcript as one step, confined to a workspace.
    ///
    /// TRANSCRIPT is JSON Lines, one assistant message a line, in the OpenAI/DeepSeek chat
    /// format (`tool_calls` with `function.arguments` as a JSON string) or the Anthropic format
    /// (`content` blocks of `type: "tool_use"`); the format is detected per line. Each step is
    /// printed on stdout in its line's format, one JSON message a line: the assistant message
    /// (with the call ids the log uses), then the results the model sees next. An existing LOG
    /// is recovered and continued.
    ///
    /// Bad calls are answered, not fatal: arguments that are not JSON get `TOOL_INPUT_ERROR`,
    /// an unknown tool `UNKNOWN_TOOL`, a refused call `DENIED`; a missing or repeated call id
    /// is replaced by a fresh one (reported on stderr). A line that is not an assistant message
    /// (not UTF-8, not JSON, another role, a bad `tool_calls`) still takes its step: it is
    /// recorded as one call `dsh_line_N` with an empty name and the line's text as its
    /// arguments, answered `TOOL_INPUT_ERROR` naming the line and why, printed in the format
    /// of the line before it (OpenAI's for a first line), and reported on stderr (exit code
    /// 1). A message without tool calls is noted on stderr and records nothing.
    ///
    /// A Claude Code session file (the JSON Lines under `~/.claude/projects/`) is read too,
    /// told by its first line: its assistant `tool_use` blocks are grouped into one step per
    /// message id; its other lines are skipped and counted on stderr.
    ///
    /// With `--dry-run` no tool runs and no log is written: each call is judged (command
    /// hooks are executed, then rules, confinement, guards, and read-before-edit simulated
    /// from the transcript's own earlier reads) and printed as one JSON line with its
    /// decision: allow, ask or deny.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Print the model-visible transcript rebuilt from a session log alone.
    ///
    /// Every step is rendered in the one format `--format` names (default: openai): the log
    /// does not record which format a transcript line was in. For a transcript in that format
    /// the output is exactly what `dsh run` printed; the steps of a transcript that mixes
    /// formats come out in the chosen one. A log left by a crash is shown as recovery would
    /// leave it (without changing the file).
    #[command(after_help = EXIT_CODES)]
    Replay(ReplayArgs),
    /// Verify a session log's invariants; exits 1 naming the first violation.
    ///
    /// A log left by a crash (a torn tail, calls of the last step without a result) fails too,
    /// but is named as needing recovery rather than as a violation: `dsh recover LOG` repairs
    /// it.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
    /// Recover a session log left by a crash, in place, and say what was repaired.
    ///
    /// Does what opening the log for `dsh run` does: cuts a torn tail, ends a last line that
    /// lacks its newline, and closes every call left without a result with an `ABORTED`
    /// result. Reports the repairs in one line on stderr and exits 0 (also when there was
    /// nothing to repair); a log that is corrupt in the middle is left untouched (exit 3).
    #[command(after_help = EXIT_CODES)]
    Recover(RecoverArgs),
    /// Write a `--store` session out as JSON Lines on stdout: byte for byte the log file the
    /// same run would have written.
    #[command(after_help = EXIT_CODES)]
    Export(ExportArgs),
    /// List the sessions of a store, one JSON object a line (`session`, `events`, `epoch`,
    /// `holder`: the writer holding its lease now, `updated_at`), or prune old ones.
    #[command(after_help = EXIT_CODES)]
    Sessions(SessionsArgs),
    /// Serve the pipeline as an MCP server on standard input and output, for a live agent.
    ///
    /// Every built-in tool (with `--profile claude-code`, Claude Code's Read, Write, Edit,
    /// MultiEdit, Glob, Grep, LS and Bash instead, as adapters over them; and every tool of the
    /// `--mcp` servers, as `mcp__NAME__TOOL`) is listed to the client; each `tools/call`
    /// passes the same policy (`--policy`, `--claude-settings`), hooks, sandbox and timeouts
    /// as `dsh run` and is recorded in LOG (created if missing, recovered and continued if
    /// present). Concurrent calls join one step: safe ones run side by side,
    /// the others one at a time; the step ends when no call is in flight. A policy `ask` is
    /// put to the client as an elicitation (`--approve allow` or `deny` answers them all
    /// instead); a client that cannot be asked gets `DENIED`. Standard output carries only
    /// MCP messages; notes go to stderr. It stops when standard input ends, or on SIGTERM or
    /// SIGINT: the calls still running are recorded as aborted and the log is closed.
    ///
    /// With `--http ADDR` it serves MCP's streamable HTTP transport instead, to any number of
    /// clients: each client session gets its own log in the `--log` folder (read-before-edit
    /// and steps are per session), and it stops on SIGTERM or SIGINT only. With `--store` in
    /// place of `--log` (no `--session`), every session lives in the PostgreSQL store and this
    /// is a node of a fleet: see `--advertise` and the book's "A fleet of servers".
    #[command(after_help = EXIT_CODES)]
    Serve(ServeArgs),
    /// Run a bundled example transcript on a fresh copy of a small sample project.
    ///
    /// Copies the sample project into a new temporary directory, runs the example (reads,
    /// parallel greps, an edit, a denied write outside the workspace, a patch), prints what
    /// `dsh run` prints, and tells where the workspace and the log are.
    #[command(after_help = EXIT_CODES)]
    Demo(DemoArgs),
    /// Print the tools `dsh run` offers, as the `tools` array of a model request.
    ///
    /// One JSON array on stdout, sorted by name, in OpenAI/DeepSeek's chat shape
    /// (`{"type":"function","function":{name, description, parameters}}`) or Anthropic's
    /// (`{name, description, input_schema}`): the built-in tools, and with `--mcp` the tools of
    /// every server that starts. Tools every call of which `--policy` denies are left out, and
    /// under `--read-only` the tools that could only be denied; a tool whose schema the
    /// provider would refuse is left out and named on stderr.
    #[command(after_help = EXIT_CODES)]
    Tools(ToolsArgs),
    /// Write a session's page: one self-contained HTML file (no server, no network) with the
    /// session's figures, a timeline of its steps and calls, and each call's arguments, result,
    /// error and meta on click.
    ///
    /// Every string from the log is shown as text, never as markup. A huge log gives a page of
    /// bounded size: long fields are cut with a note, and the page says how many calls it
    /// leaves out.
    #[command(after_help = EXIT_CODES)]
    View(ViewArgs),
    /// Operate a PostgreSQL store: `dsh store migrate` brings its schema up to date.
    #[command(after_help = EXIT_CODES)]
    Store(crate::fleet::StoreCommandArgs),
}

/// `dsh view`.
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The session log.
    #[arg(
        value_name = "LOG",
        required_unless_present = "store",
        conflicts_with = "store"
    )]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Write the page to FILE (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Open the page with the desktop's opener once written (to a temporary file without -o).
    #[arg(long)]
    pub open: bool,
}

/// `dsh tools`.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// The provider's shape.
    #[arg(long, value_enum, default_value_t = FormatArg::Openai)]
    pub format: FormatArg,
    /// Permission rules (the TOML of `dsh run --policy`).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// MCP servers (the JSON of `dsh run --mcp`); they are started to list their tools.
    #[arg(long, value_name = "FILE")]
    pub mcp: Option<PathBuf>,
    /// Leave out the tools that change files.
    #[arg(long)]
    pub read_only: bool,
    /// With `--format openai`: the variant for strict function calling (`"strict": true`;
    /// every property required, the optional ones nullable). The tools take what it
    /// describes: an optional argument sent as `null` (or empty) is read as not given.
    #[arg(long)]
    pub strict: bool,
}

/// `dsh run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The transcript (JSON Lines of assistant messages); `-` reads standard input.
    #[arg(value_name = "TRANSCRIPT")]
    pub transcript: PathBuf,
    /// The directory the file tools are confined to.
    #[arg(long, value_name = "DIR")]
    pub workspace: PathBuf,
    /// The session log (JSON Lines); created if missing, recovered and continued if present.
    #[arg(
        long,
        value_name = "LOG",
        required_unless_present_any = ["session", "dry_run"],
        conflicts_with = "session"
    )]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Judge the calls instead of running them: "what would these rules have denied?". Each
    /// call passes prepare (the `--hooks`/`--claude-settings` command hooks, which ARE
    /// executed, the rules, workspace confinement, `--read-only`, the guards), with
    /// read-before-edit simulated from the transcript's own earlier reads and writes; no tool
    /// body runs, nothing in the workspace changes and no log is opened or written (`--log`
    /// and `--store` are ignored; `--mcp` servers are started, their tools judged, never
    /// called). Prints one JSON line per call: `step`, `callId`, `tool`,
    /// `decision` (`allow`, `ask`: a human would be asked, or `deny`), `reason` (null when
    /// allowed), and for a denial the error `code` the call would get.
    #[arg(long)]
    pub dry_run: bool,
    /// Print what this command line means on stderr (the tools, the rules, the hooks, the MCP
    /// servers, the shell's sandbox, the log, dsh's own files) and exit 0 without starting
    /// anything: no log is opened, no server started, no tool run.
    #[arg(long)]
    pub print_plan: bool,
    #[command(flatten)]
    pub options: PipelineOptions,
}

/// A session in a PostgreSQL store, in place of a log file.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// A PostgreSQL session store (`postgres://user@host:port/db`), in place of a log file:
    /// any node reaching it can resume any session. Name the session with `--session`. A URL
    /// holding a password is seen by every local user in `ps`: give it with `--store-file`,
    /// `DSH_STORE_FILE` or `DSH_STORE` instead.
    /// With `serve --http`, no `--session`: the store of every client session (a node of a
    /// fleet, see `--advertise`).
    #[arg(long, value_name = "URL", conflicts_with = "store_file")]
    pub store: Option<String>,
    /// A file holding the store's URL (its first line), read in place of `--store`; also
    /// `DSH_STORE_FILE` naming the file, or `DSH_STORE` holding the URL. Neither variable is
    /// passed to anything dsh starts.
    #[arg(long, value_name = "FILE")]
    pub store_file: Option<PathBuf>,
    /// The session's id in the store (1-128 of `[A-Za-z0-9_.-]`).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// How long a writer's lease on a store session lasts without renewal (the writer renews
    /// it in the background), at most 600000 (10 minutes). Opening waits up to twice this for
    /// another writer's lease, then fails saying who holds it. Every round trip to the
    /// database is bounded by the lease, kept between 2 and 10 seconds: past it the connection
    /// is dropped and the append fails as with a lost database.
    #[arg(long, value_name = "MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub lease_ms: u64,
}

/// Where a store is named, for the commands that only a store has.
#[derive(Debug, Clone, Args)]
pub struct StoreSource {
    /// The PostgreSQL session store (`postgres://user@host:port/db`); or `--store-file`,
    /// `DSH_STORE_FILE`, `DSH_STORE` (which keep a password out of `ps`).
    #[arg(long, value_name = "URL", conflicts_with = "store_file")]
    pub store: Option<String>,
    /// A file holding the store's URL (its first line), read in place of `--store`.
    #[arg(long, value_name = "FILE")]
    pub store_file: Option<PathBuf>,
}

/// `dsh serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The directory the file tools are confined to.
    #[arg(long, value_name = "DIR")]
    pub workspace: PathBuf,
    /// The session log (JSON Lines); created if missing, recovered and continued if present.
    /// With `--http`, a folder (created if missing) holding one log per MCP client session,
    /// `<session-id>.jsonl` (or, with `--store` and no `--session`, none: see `--advertise`).
    #[arg(
        long,
        value_name = "LOG",
        required_unless_present_any = ["session", "store", "store_file"],
        conflicts_with = "session"
    )]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub fleet: crate::fleet::FleetArgs,
    /// Serve MCP's streamable HTTP transport on ADDR (`127.0.0.1:8080`; port 0 picks one; the
    /// URL is said on stderr) instead of stdio. Any address but the loopback needs a bearer
    /// token (`--token-file` or `DSH_SERVE_TOKEN`). Requests whose `Host` or `Origin` name
    /// another server are refused (403), as are requests without a valid token (401). Stops on
    /// SIGTERM or SIGINT (exit 0), never on stdin.
    #[arg(long, value_name = "ADDR", conflicts_with = "session")]
    pub http: Option<String>,
    /// With `--http`: the bearer tokens clients must send (`Authorization: Bearer TOKEN`), one
    /// per line (blank lines and `#` comments skipped), re-read on SIGHUP. When it is given,
    /// `DSH_SERVE_TOKEN` is ignored (the file alone says which tokens are valid).
    #[arg(long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// With `--http`: a host name clients reach the server by (accepted in `Host` and
    /// `Origin`), besides `localhost`, loopback addresses and the address they connected to.
    /// `NAME:PORT` (a load balancer's address, in front of a fleet) is accepted with that port.
    #[arg(long, value_name = "NAME", requires = "http")]
    pub allow_host: Vec<String>,
    /// With `--http`: also serve each session's page (the page of `dsh view`, reloading as
    /// the log grows) on ADDR, behind the same Host/Origin checks and tokens; a token sees
    /// only its own sessions (see `docs/src/view.md`).
    #[arg(long, value_name = "ADDR", requires = "http")]
    pub view: Option<String>,
    /// Print what this command line means on stderr (the tools, the rules, the hooks, the MCP
    /// servers, the shell's sandbox, the log, dsh's own files) and exit 0 without starting
    /// anything: no log is opened, no server started, no tool run.
    #[arg(long)]
    pub print_plan: bool,
    #[command(flatten)]
    pub limits: ServeLimitArgs,
    #[command(flatten)]
    pub options: PipelineOptions,
}

/// The bounds of `dsh serve --http` (see `docs/src/serve-limits.md`).
#[derive(Debug, Clone, Args)]
pub struct ServeLimitArgs {
    /// With `--http`: live sessions at most, of both protocol eras together; a new one past it
    /// is refused with a JSON-RPC error (`SESSION_LIMIT`), sessions already live are untouched.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "http")]
    pub max_sessions: usize,
    /// With `--http`: live sessions at most per bearer token (without tokens: in all).
    #[arg(long, value_name = "N", default_value_t = 64, requires = "http")]
    pub max_sessions_per_token: usize,
    /// With `--http`: open connections at most; more wait in the listen queue.
    #[arg(long, value_name = "N", default_value_t = 512, requires = "http")]
    pub max_connections: usize,
    /// With `--http`: requests of one token in flight at most (a POST's answer stream counts
    /// until it closes; GET streams do not); more are answered 429.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "http")]
    pub max_requests_per_token: usize,
    /// With `--http`: seconds a request gets to send its whole body (then 408, and the
    /// connection is closed).
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "http")]
    pub body_timeout: u64,
    /// With `--http`: seconds after which a session with nothing in flight gives back its log
    /// and memory (a 2025-11-25 session ends; a named session reopens from its log).
    #[arg(long, value_name = "SECS", default_value_t = 300, requires = "http")]
    pub idle_timeout: u64,
}

/// Options shared by `run`, `serve` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct PipelineOptions {
    /// Permission rules in TOML: top-level `allow`, `ask` and `deny` lists of `tool` or
    /// `tool(glob)` rules (`shell(git status*)`: commands starting with those words). Deny
    /// beats ask beats allow; unmatched calls get `default = "allow" | "ask" | "deny"`
    /// (allow unless set).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// How `ask` decisions are answered: `prompt` asks on the terminal (and denies when there
    /// is none), `deny` refuses them all, `allow` approves them all (guards still apply).
    #[arg(long, value_enum, default_value_t = Approve::Prompt, value_name = "MODE")]
    pub approve: Approve,
    /// The most calls of one step that run at the same time.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_parallel: u32,
    /// When an appended event counts as written: `always` fsyncs each event, `batch` fsyncs
    /// groups, `none` leaves it to the OS. On a `--store`, `none` commits asynchronously except
    /// a `tool/call` (always synchronous, so write-ahead holds): a crash of the database may
    /// lose the results and messages of its last fraction of a second, some the model saw.
    #[arg(long, value_enum, default_value_t = DurabilityArg::Batch, value_name = "MODE")]
    pub durability: DurabilityArg,
    /// Refuse every change to the workspace: write_file, edit_file and apply_patch are denied,
    /// every MCP tool its server does not mark read-only (`readOnlyHint`) is denied, and
    /// `shell` commands run in the `read-only` sandbox.
    #[arg(long)]
    pub read_only: bool,
    /// The `shell` tool's OS sandbox: `workspace-write` (write only the workspace, but
    /// the `.git` folder and dsh's own files, and a private temp folder),
    /// `read-only` (write nothing), or `full` (no sandbox: only if you mean it).
    #[arg(long, value_enum, default_value_t = ShellSandboxArg::WorkspaceWrite, value_name = "MODE")]
    pub shell_sandbox: ShellSandboxArg,
    /// Let `shell` commands use the network (off by default).
    #[arg(long)]
    pub shell_network: bool,
    /// With `net(…)` rules: resolve names from this hosts file (`ADDRESS NAME…` lines)
    /// instead of the system resolver; a name mapped there counts as naming its address.
    #[arg(long, value_name = "FILE")]
    pub net_hosts: Option<PathBuf>,
    /// Pass this variable of dsh's environment to `shell` commands, besides the core set
    /// (`PATH`, `HOME`, `LANG`, `LC_*`, `TERM`, `TZ`, `USER`, `LOGNAME`, `SHELL`, `TMPDIR`);
    /// `PREFIX*` passes a family (`CARGO_*`). Repeatable; adds to the policy's `[shell] env`.
    #[arg(long = "shell-env", value_name = "NAME", value_parser = crate::shell_env::parse_name)]
    pub shell_env: Vec<String>,
    /// What each `shell` call may consume: `NAME=VALUE` separated by commas, of `memory`
    /// (4G), `processes` (1024), `cpu` (seconds of each process, 600), `file-size` (4G),
    /// `open-files` (4096), `tmp` (the private temp folder, 256M); `none` lifts one.
    /// Repeatable.
    #[arg(long = "shell-limits", value_name = "NAME=VALUE,…", value_parser = crate::shell_limits::parse)]
    pub shell_limits: Vec<crate::shell_limits::Settings>,
    /// Where the `shell` tool saves output too long to show (default `.dsh/spill` in the
    /// workspace, where `read_file` can read it; commands cannot write there).
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Caps every tool's deadline, in milliseconds: a tool runs at most the smaller of its
    /// own timeout and this. Without it, each tool keeps its own timeout (run_code 60 s, shell
    /// its `timeout_ms` argument or 120 s, an MCP server's `timeout` or 60 s) and tools
    /// without one get 30 s.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: Option<u64>,
    /// MCP servers to start, in the shape other harnesses use:
    /// `{"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}}` (stdio
    /// servers; `timeout` in milliseconds; `cwd` defaults to the workspace). Their tools are
    /// called `mcp__NAME__TOOL` and go through the same policy, hooks and log as the others.
    #[arg(long, value_name = "FILE")]
    pub mcp: Option<PathBuf>,
    /// Command hooks in Claude Code's settings shape: `{"hooks": {"PreToolUse": [...],
    /// "PostToolUse": [...]}}`, so an existing `.claude/settings.json` works as it is. They
    /// run with `sh -c` in the workspace; matchers see the profile's tool names (dsh's, or
    /// Claude Code's with `--profile claude-code`). Only the file's hooks are read.
    #[arg(long, value_name = "FILE")]
    pub hooks: Option<PathBuf>,
    /// The tools offered: `dsh` (read_file, edit_file, shell, run_code, …) or `claude-code`
    /// (Claude Code's names and argument shapes: Read, Write, Edit, MultiEdit, Glob, Grep, LS,
    /// Bash, as thin adapters over dsh's tools: the same confinement, read-before-edit and
    /// rules). Under `claude-code`, a policy's unmatched Write, Edit, MultiEdit and Bash calls
    /// are asked about (unless the policy's default is deny), as in Claude Code.
    #[arg(long, value_enum, default_value_t = ProfileArg::Dsh, value_name = "PROFILE")]
    pub profile: ProfileArg,
    /// Claude Code settings files, loaded whole: their `permissions` (allow/ask/deny rules in
    /// Claude Code's syntax, merged with `--policy`; deny beats ask beats allow across every
    /// file) and their `hooks`. Repeatable. `auto` loads the workspace's
    /// `.claude/settings.json` and `.claude/settings.local.json` and `~/.claude/settings.json`,
    /// those that exist.
    #[arg(long = "claude-settings", value_name = "FILE|auto")]
    pub claude_settings: Vec<PathBuf>,
    /// How long opening the log file waits while another `dsh` holds it (one still finishing
    /// on the same log, as when a client starts a new `dsh serve` for every session), before
    /// failing with a message saying so.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub lock_wait_ms: u64,
}

impl PipelineOptions {
    /// `--lock-wait-ms`.
    pub fn lock_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.lock_wait_ms)
    }
}

/// `--profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// dsh's own tool names.
    Dsh,
    /// Claude Code's tool names and argument shapes.
    ClaudeCode,
}

/// `dsh replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The session log.
    #[arg(
        value_name = "LOG",
        required_unless_present = "session",
        conflicts_with = "session"
    )]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The format every step is printed in (the log does not record the transcript's).
    #[arg(long, value_enum, default_value_t = FormatArg::Openai)]
    pub format: FormatArg,
}

/// `dsh check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The session log.
    #[arg(
        value_name = "LOG",
        required_unless_present = "session",
        conflicts_with = "session"
    )]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `dsh recover`.
#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The session log (it must exist).
    #[arg(
        value_name = "LOG",
        required_unless_present = "session",
        conflicts_with = "session"
    )]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `dsh export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub store: StoreSource,
    /// The session to write out.
    #[arg(long, value_name = "ID")]
    pub session: String,
}

/// `dsh sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(flatten)]
    pub store: StoreSource,
    /// Delete the sessions (and their events) not changed for DAYS days and not held by a
    /// writer, instead of listing.
    #[arg(long, value_name = "DAYS", conflicts_with = "release")]
    pub prune_older_than: Option<u32>,
    /// End the lease of session ID, whose writer is known to be dead, instead of listing:
    /// like a takeover, that writer is fenced (should it wake, it writes nothing more) and the
    /// next writer takes the session at once. Its running tools are not stopped by this: only
    /// its own watchdog does that, so release only an owner that is gone.
    #[arg(long, value_name = "ID")]
    pub release: Option<String>,
}

/// `dsh demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Which bundled example to run.
    #[arg(long, value_enum, default_value_t = FormatArg::Openai)]
    pub format: FormatArg,
    /// Where to put the sample workspace and the log (default: a new temporary directory,
    /// kept afterwards so you can look at it). Must not exist yet or be empty.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub options: PipelineOptions,
}

/// `--shell-sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShellSandboxArg {
    /// Write nothing.
    ReadOnly,
    /// Write only the workspace (the default).
    WorkspaceWrite,
    /// No sandbox.
    Full,
}

/// `--approve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Approve {
    /// Ask on the terminal; deny when there is no terminal.
    Prompt,
    /// Deny every `ask`.
    Deny,
    /// Approve every `ask`.
    Allow,
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    /// fsync each event.
    Always,
    /// fsync groups of events (group commit).
    Batch,
    /// No fsync.
    None,
}

impl From<DurabilityArg> for dsh_session::Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Always => dsh_session::Durability::Always,
            DurabilityArg::Batch => dsh_session::Durability::Batch,
            DurabilityArg::None => dsh_session::Durability::None,
        }
    }
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// OpenAI/DeepSeek chat messages.
    #[value(alias = "deepseek")]
    Openai,
    /// Anthropic messages.
    Anthropic,
}

impl From<FormatArg> for dsh_formats::Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Openai => dsh_formats::Format::OpenAi,
            FormatArg::Anthropic => dsh_formats::Format::Anthropic,
        }
    }
}
