//! The body's side of a worker process: starting it, its lines in and out, and making sure it
//! is gone.
//!
//! A worker is started in a process group of its own (a terminal's Ctrl-C reaches the
//! program, which stops its scripts itself) with its three standard streams piped; nothing
//! else is inherited (Rust opens every other descriptor close-on-exec). It never starts a
//! process itself, so killing it (SIGKILL) ends everything it ran. A [`Worker`] that is
//! dropped, for whatever reason, kills its process and reaps it in the background; until
//! then the process counts as live ([`live`]) and keeps its script slot, so the number of
//! scripts alive at once never passes the slots, even while they die. When the runtime goes
//! before the background reap ran (a program's end), the reap happens where its task is
//! dropped, synchronously: no worker outlives the runtime that started it.

use crate::bridge::{FromWorker, PROTOCOL, ToWorker};
use crate::fork_server::{Ended, ForkServer, ForkedWorker};
use crate::worker::WORKER_ARG;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

/// How a script worker is started: a program and its arguments. The program must run
/// [`crate::worker_main`] (directly, or through [`crate::worker_main_if_requested`] when
/// started with [`WORKER_ARG`]).
///
/// ```
/// use dsh_code_mode::{WorkerCommand, WORKER_ARG};
/// let command = WorkerCommand::new("/usr/local/bin/my-agent").arg(WORKER_ARG);
/// assert_eq!(command.program(), std::path::Path::new("/usr/local/bin/my-agent"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    program: PathBuf,
    args: Vec<OsString>,
}

impl WorkerCommand {
    /// Runs `program` with no arguments (a program that is only a worker).
    pub fn new(program: impl Into<PathBuf>) -> WorkerCommand {
        WorkerCommand {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> WorkerCommand {
        self.args.push(arg.into());
        self
    }

    /// This program, started with [`WORKER_ARG`]: right for a program whose `main` calls
    /// [`crate::worker_main_if_requested`] first.
    pub fn current_exe() -> std::io::Result<WorkerCommand> {
        Ok(WorkerCommand::new(std::env::current_exe()?).arg(WORKER_ARG))
    }

    /// The program it starts.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Its arguments.
    pub(crate) fn args(&self) -> &[OsString] {
        &self.args
    }
}

/// Where a `RunCode`'s workers come from: its fork server once started (see
/// [`crate::fork_server`]), or the program started anew for each worker when it is not one.
#[derive(Debug, Default)]
pub(crate) struct Servers {
    state: tokio::sync::Mutex<ServerState>,
}

#[derive(Debug, Default)]
enum ServerState {
    #[default]
    Untried,
    Running(Arc<ForkServer>),
    /// This command is not a fork server: its workers are started one by one.
    NotOne(WorkerCommand),
}

impl Servers {
    /// The fork server of `command`, started now if it is not running.
    async fn get(&self, command: &WorkerCommand) -> Option<Arc<ForkServer>> {
        let mut state = self.state.lock().await;
        match &*state {
            ServerState::Running(server) if server.command() == command && server.alive() => {
                return Some(server.clone());
            }
            ServerState::NotOne(c) if c == command => return None,
            _ => {}
        }
        // A server that ended is replaced (dropping it reaps it).
        *state = ServerState::Untried;
        let started = {
            let command = command.clone();
            tokio::task::spawn_blocking(move || ForkServer::start(&command)).await
        };
        match started {
            Ok(Ok(server)) => {
                let server = Arc::new(server);
                *state = ServerState::Running(server.clone());
                Some(server)
            }
            _ => {
                *state = ServerState::NotOne(command.clone());
                None
            }
        }
    }
}

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Worker processes started and not yet reaped.
pub(crate) fn live() -> usize {
    LIVE.load(Ordering::SeqCst)
}

struct LiveGuard;

impl LiveGuard {
    fn enter() -> LiveGuard {
        LIVE.fetch_add(1, Ordering::SeqCst);
        LiveGuard
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How much of a worker's stderr is kept to explain a failure.
const STDERR_KEPT: usize = 4 << 10;

/// How long a started program may take to say it is a worker.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker's process: a child of dsh's, or of its fork server.
enum Process {
    Spawned(Child),
    Forked {
        pid: u32,
        ended: watch::Receiver<Ended>,
        server: Arc<ForkServer>,
    },
}

impl Process {
    fn start_kill(&mut self) {
        match self {
            Process::Spawned(child) => {
                let _ = child.start_kill();
            }
            Process::Forked { pid, server, .. } => server.kill(*pid),
        }
    }

    /// Whether it has ended and been reaped.
    fn reaped_now(&mut self) -> bool {
        match self {
            Process::Spawned(child) => matches!(child.try_wait(), Ok(Some(_)) | Err(_)),
            Process::Forked { ended, .. } => ended.borrow().is_some(),
        }
    }

    /// Waits for its end.
    async fn wait(&mut self) -> Option<ExitStatus> {
        match self {
            Process::Spawned(child) => child.wait().await.ok(),
            Process::Forked { ended, .. } => ended
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|e| e.flatten()),
        }
    }
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// A running worker process.
pub(crate) struct Worker {
    child: Option<Process>,
    to_child: mpsc::UnboundedSender<Vec<u8>>,
    stdout: BufReader<Reader>,
    /// The start of a line whose end has not come yet: kept here, not in `next`'s future,
    /// so that `next` can be dropped (in a `select!`) without losing what it read.
    partial: Vec<u8>,
    max_line: usize,
    stderr: Arc<Mutex<String>>,
    /// The task reading stderr, until its end is read.
    stderr_read: Option<tokio::task::JoinHandle<()>>,
    held: Option<(LiveGuard, OwnedSemaphorePermit)>,
    /// Its process id while it is an idle spare (listed in [`spare_pids`]).
    spare: Option<u32>,
}

/// The worker process the next script of a [`crate::RunCode`] (and its clones) will run in,
/// started ahead of time so a script does not wait for a process to start.
///
/// A spare is fresh: started after the script before it took the last one, it has run
/// nothing, and it is used by one script only (scripts never share a process, so they cannot
/// share state). It holds no script slot and is not counted by [`crate::live_engines`] until
/// a script takes it. It lives in a task of the runtime that started it, which hands it over
/// when asked: if that runtime is gone, so is the spare (killed with its task), and the
/// script starts a worker of its own. Dropping every clone of the `RunCode` kills it.
#[derive(Debug, Default)]
pub(crate) struct Spare {
    next: Mutex<Option<SpareHandle>>,
    /// Where its workers come from.
    pub(crate) servers: Arc<Servers>,
}

struct SpareHandle {
    command: WorkerCommand,
    max_line: usize,
    ask: tokio::sync::oneshot::Sender<tokio::sync::oneshot::Sender<Worker>>,
}

impl std::fmt::Debug for SpareHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpareHandle")
            .field("command", &self.command)
            .finish()
    }
}

/// Ids of the spare processes started and not yet taken by a script.
static SPARES: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Ids of the idle spare worker processes (started ahead of the next script, not yet running
/// one).
pub(crate) fn spare_pids() -> Vec<u32> {
    SPARES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn forget_spare(pid: Option<u32>) {
    if let Some(pid) = pid {
        SPARES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != pid);
    }
}

impl Spare {
    /// The spare started with `command` (waiting for it to be ready if it is still starting),
    /// if there is one; a spare started with another command is dropped (killed).
    pub(crate) async fn take(&self, command: &WorkerCommand, max_line: usize) -> Option<Worker> {
        let handle = self.next.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        if handle.command != *command || handle.max_line != max_line {
            return None;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        handle.ask.send(tx).ok()?;
        rx.await.ok()
    }

    /// Starts the next spare in the background (replacing one not yet taken).
    pub(crate) fn prepare(&self, command: &WorkerCommand, max_line: usize) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (ask, asked) = tokio::sync::oneshot::channel::<tokio::sync::oneshot::Sender<Worker>>();
        let started = command.clone();
        let servers = self.servers.clone();
        runtime.spawn(async move {
            let worker = Worker::start_idle(&servers, &started, max_line, true).await;
            drop(servers);
            let worker = match worker {
                Ok(worker) => worker,
                Err(why) => {
                    tracing::debug!(%why, "a spare script worker did not start");
                    return;
                }
            };
            // Kept here until a script asks; dropped (killed) when nobody will.
            if let Ok(reply) = asked.await {
                let _ = reply.send(worker);
            }
        });
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(SpareHandle {
            command: command.clone(),
            max_line,
            ask,
        });
    }
}

impl Worker {
    /// Starts `command` and waits for its hello. `max_line` bounds every line it may send.
    pub(crate) async fn start(
        servers: &Servers,
        command: &WorkerCommand,
        slot: OwnedSemaphorePermit,
        max_line: usize,
    ) -> Result<Worker, String> {
        let mut worker = Self::start_idle(servers, command, max_line, false).await?;
        worker.hold(slot);
        Ok(worker)
    }

    /// Gives a worker started by [`Worker::start_idle`] its script slot: from now on it counts
    /// as a script's ([`crate::live_engines`]).
    pub(crate) fn hold(&mut self, slot: OwnedSemaphorePermit) {
        forget_spare(self.spare.take());
        self.held = Some((LiveGuard::enter(), slot));
    }

    /// Starts `command` and waits for its hello, holding no script slot (a `spare` started
    /// ahead of the next script is listed by [`spare_pids`] until a script takes it or it is
    /// reaped; see [`Spare`]).
    pub(crate) async fn start_idle(
        servers: &Servers,
        command: &WorkerCommand,
        max_line: usize,
        spare: bool,
    ) -> Result<Worker, String> {
        if let Some(server) = servers.get(command).await {
            match server.fork().await {
                Ok(forked) => return Self::forked(server, forked, command, max_line, spare).await,
                Err(why) => {
                    tracing::debug!(%why, "the fork server did not fork; starting a worker")
                }
            }
        }
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "could not start the script worker `{}`: {e}",
                command.program.display()
            )
        })?;
        let spare = if spare { child.id() } else { None };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.start_kill();
            return Err("the script worker's pipes were not set up".into());
        };
        Self::connect(
            Process::Spawned(child),
            (Box::new(stdin), Box::new(stdout), Box::new(stderr)),
            command,
            max_line,
            spare,
        )
        .await
    }

    /// A worker just forked by `server`.
    async fn forked(
        server: Arc<ForkServer>,
        forked: ForkedWorker,
        command: &WorkerCommand,
        max_line: usize,
        spare: bool,
    ) -> Result<Worker, String> {
        let ForkedWorker {
            pid,
            ended,
            stdin,
            stdout,
            err,
        } = forked;
        let process = Process::Forked { pid, ended, server };
        use tokio::net::unix::pipe;
        let streams = pipe::Sender::from_owned_fd(stdin).and_then(|stdin| {
            Ok((
                stdin,
                pipe::Receiver::from_owned_fd(stdout)?,
                pipe::Receiver::from_owned_fd(err)?,
            ))
        });
        let (stdin, stdout, err) = match streams {
            Ok(streams) => streams,
            Err(e) => {
                // Dropped as a worker, it is killed and reaped.
                drop(Self::bare(process));
                return Err(format!("the forked worker's pipes were not set up: {e}"));
            }
        };
        Self::connect(
            process,
            (Box::new(stdin), Box::new(stdout), Box::new(err)),
            command,
            max_line,
            spare.then_some(pid),
        )
        .await
    }

    /// A worker that is only its process (to be dropped: killed and reaped).
    fn bare(process: Process) -> Worker {
        let (to_child, _) = mpsc::unbounded_channel();
        Worker {
            child: Some(process),
            to_child,
            stdout: BufReader::new(Box::new(tokio::io::empty())),
            partial: Vec::new(),
            max_line: 0,
            stderr: Arc::default(),
            stderr_read: None,
            held: None,
            spare: None,
        }
    }

    /// Wires a started process's streams and waits for its hello.
    async fn connect(
        process: Process,
        (stdin, stdout, stderr): (Writer, Reader, Reader),
        command: &WorkerCommand,
        max_line: usize,
        spare: Option<u32>,
    ) -> Result<Worker, String> {
        let held = None;
        if let Some(pid) = spare {
            SPARES.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        }
        let (to_child, mut lines) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = lines.recv().await {
                if stdin.write_all(&line).await.is_err() {
                    break;
                }
            }
        });
        let kept = Arc::new(Mutex::new(String::new()));
        let stderr_read = tokio::spawn(drain_stderr(stderr, kept.clone()));
        let mut worker = Worker {
            child: Some(process),
            to_child,
            stdout: BufReader::new(stdout),
            partial: Vec::new(),
            max_line,
            stderr: kept,
            stderr_read: Some(stderr_read),
            held,
            spare,
        };
        let hello = tokio::time::timeout(HELLO_TIMEOUT, worker.next()).await;
        match hello {
            Ok(Ok(Some(FromWorker::Hello {
                protocol,
                forks: false,
            }))) if protocol == PROTOCOL => Ok(worker),
            Ok(Ok(Some(FromWorker::Hello { protocol, .. }))) => Err(format!(
                "the script worker `{}` speaks protocol {protocol}, not {PROTOCOL}: it is another \
                 build",
                command.program.display()
            )),
            Ok(Ok(None)) => {
                let status = worker.exit_status().await;
                Err(format!(
                    "`{}` is not a script worker: it {} without a word{}",
                    command.program.display(),
                    describe(status),
                    worker.stderr_tail().await
                ))
            }
            Ok(Ok(Some(_)) | Err(_)) => Err(format!(
                "`{}` is not a script worker: its first line is not a worker's hello (a program \
                 that embeds run_code must call dsh_code_mode::worker_main_if_requested() first \
                 thing in main){}",
                command.program.display(),
                worker.stderr_tail().await
            )),
            Err(_) => Err(format!(
                "the script worker `{}` did not start within {} s",
                command.program.display(),
                HELLO_TIMEOUT.as_secs()
            )),
        }
    }

    /// Sends a message (never waits: a writer task of the worker's writes it).
    pub(crate) fn send(&self, message: &ToWorker) {
        if let Ok(mut line) = serde_json::to_vec(message) {
            line.push(b'\n');
            let _ = self.to_child.send(line);
        }
    }

    /// The next message; `None` when the worker closed its stdout (it ended). Cancel-safe:
    /// a call dropped midway loses nothing.
    pub(crate) async fn next(&mut self) -> Result<Option<FromWorker>, String> {
        loop {
            let buf = self
                .stdout
                .fill_buf()
                .await
                .map_err(|e| format!("reading the script worker's output failed: {e}"))?;
            if buf.is_empty() {
                return if self.partial.is_empty() {
                    Ok(None)
                } else {
                    Err("the script worker's output ended in the middle of a line".into())
                };
            }
            let (chunk, used) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], i + 1),
                None => (buf, buf.len()),
            };
            if self.partial.len() + chunk.len() > self.max_line {
                return Err(format!(
                    "the script worker sent a line longer than {} bytes",
                    self.max_line
                ));
            }
            self.partial.extend_from_slice(chunk);
            let ended = used > chunk.len();
            self.stdout.consume(used);
            if ended {
                let line = std::mem::take(&mut self.partial);
                return serde_json::from_slice(&line).map(Some).map_err(|e| {
                    format!("the script worker sent a line that is not its own: {e}")
                });
            }
        }
    }

    /// Kills the process now (it is reaped when the worker is dropped).
    pub(crate) fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            child.start_kill();
        }
    }

    /// How the process ended, waiting a moment for it; `None` if it is still running.
    pub(crate) async fn exit_status(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        tokio::time::timeout(Duration::from_secs(1), child.wait())
            .await
            .ok()?
    }

    /// What the worker wrote to stderr, as the end of a message: all of it (up to what is
    /// kept) once the worker has ended, waiting a moment for the last of it.
    pub(crate) async fn stderr_tail(&mut self) -> String {
        if let Some(read) = self.stderr_read.take() {
            let _ = tokio::time::timeout(Duration::from_millis(500), read).await;
        }
        let kept = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        let kept = kept.trim();
        if kept.is_empty() {
            String::new()
        } else {
            format!("; its stderr says: {kept}")
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let Some(child) = self.child.take() else {
            return;
        };
        // Done or not, it ends now: a worker that answered is exiting anyway.
        let mut dying = Dying {
            child,
            held: self.held.take(),
            spare: self.spare.take(),
            reaped: false,
        };
        dying.child.start_kill();
        if dying.reaped_now() {
            return;
        }
        // Reaped in the background while the runtime runs. Should the runtime go first (its
        // tasks are dropped at shutdown, and a task spawned then is dropped at once), the
        // `Dying` is dropped with the task and waits for the process there: no worker
        // outlives the runtime that started it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = dying.child.wait().await;
                dying.reaped_now();
            });
        }
    }
}

/// A worker process sent SIGKILL and not yet reaped. It keeps the worker's script slot and
/// its place in [`live`] (or [`spare_pids`]) until the process is gone; dropped before that,
/// it waits for the process there (the last resort, when no runtime is left to wait in).
struct Dying {
    child: Process,
    held: Option<(LiveGuard, OwnedSemaphorePermit)>,
    spare: Option<u32>,
    reaped: bool,
}

/// How long a dropped [`Dying`] waits for a killed process before giving up on it (a
/// process in an uninterruptible wait can take this long; none has been seen to).
const REAP_LIMIT: Duration = Duration::from_secs(5);

impl Dying {
    /// Whether the process is already gone (and reaped now).
    fn reaped_now(&mut self) -> bool {
        self.reaped = self.child.reaped_now();
        self.reaped
    }
}

impl Drop for Dying {
    fn drop(&mut self) {
        if !self.reaped {
            // SIGKILL was sent: it ends within moments. Waiting here blocks this thread for
            // those moments, which only happens when the runtime is shutting down.
            self.child.start_kill();
            let start = std::time::Instant::now();
            let mut nap = Duration::from_micros(50);
            while !self.reaped_now() {
                if start.elapsed() > REAP_LIMIT {
                    tracing::warn!("a killed script worker did not end; it is left to the system");
                    break;
                }
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
        drop(self.held.take());
        forget_spare(self.spare.take());
    }
}

/// Reads a worker's stderr to its end (so the worker never blocks on it), keeping its start.
async fn drain_stderr(mut stderr: Reader, kept: Arc<Mutex<String>>) {
    let mut buf = vec![0u8; 4096];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                tracing::debug!(target: "dsh_code_mode::worker", "{}", text.trim_end());
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                let room = STDERR_KEPT.saturating_sub(kept.len());
                if room > 0 {
                    kept.push_str(dsh_core::content::truncate_at_char_boundary(&text, room));
                }
            }
        }
    }
}

/// "exited with status 2", "was killed by signal 9".
pub(crate) fn describe(status: Option<ExitStatus>) -> String {
    let Some(status) = status else {
        return "did not end".into();
    };
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    "ended".into()
}
