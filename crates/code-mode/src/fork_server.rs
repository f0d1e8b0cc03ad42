//! The fork server: where script workers come from, fast.
//!
//! Starting the worker program for each script (exec, the dynamic loader, the program's own
//! start) costs milliseconds of CPU, and on a busy machine that is the script's wait. So a
//! [`crate::RunCode`] starts its worker program once more as a *fork server* (a zygote):
//! one process, one thread, that forks one fresh child per script. The child is a new process
//! that has run nothing (scripts share no state); it becomes an ordinary worker
//! ([`crate::worker`]) on the three pipes the body made for it. A program that is not a fork
//! server (an older build, or another program given to `RunCode::with_worker`) is told apart
//! by its hello and its workers are started the usual way.
//!
//! ```text
//! dsh ──(SOCK_SEQPACKET: fork + 2 fds, kill pid, quit)──> fork server ── fork ──> worker
//!     <──(forked pid, exited pid status)──────────────────
//!     <══(the worker's stdin, stdout and stderr pipes)═════════════════════════> worker
//! ```
//!
//! Lifetimes: a worker dies with the server (`PR_SET_PDEATHSIG`), the server ends when its
//! control socket ends (dsh gone) or is told to quit, and kills and reaps every child first.
//! Its handle in dsh ([`ForkServer`]) tells it to quit and waits for it when dropped, so no
//! worker outlives the `RunCode` (and the workers) that used it.

use crate::bridge::{FromWorker, PROTOCOL};
use crate::fork_sys::{self, Forked};
use crate::process::WorkerCommand;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Set in the environment of a worker program started to be a fork server.
pub(crate) const FORK_SERVER_ENV: &str = "DSH_CODE_MODE_FORK_SERVER";

/// How long a started program may take to say it is a fork server.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a fork server told to quit may take before it is killed.
const QUIT_LIMIT: Duration = Duration::from_secs(5);

/// dsh → server: one byte, then a pid for [`KILL`].
const FORK: u8 = b'F';
const KILL: u8 = b'K';
const QUIT: u8 = b'Q';

/// Server → dsh, one JSON object a message.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum FromServer {
    /// The child of the oldest fork request not yet answered.
    Forked { pid: u32 },
    /// That request failed.
    ForkFailed { why: String },
    /// A child ended (and was reaped): its raw wait status.
    Exited { pid: u32, status: i32 },
}

/// How a forked worker ended: `None` while it runs; `Some(None)` when its server ended
/// without saying (the worker ended with it).
pub(crate) type Ended = Option<Option<ExitStatus>>;

// ---------------------------------------------------------------------------------------
// The server's side.

/// Runs this process as a fork server if it was started as one and can be one (it has one
/// thread): answers the exit code. `None`: go on as a plain worker.
pub(crate) fn serve_if_asked() -> Option<i32> {
    std::env::var_os(FORK_SERVER_ENV)?;
    if threads() != Some(1) {
        // Forking a process with threads would leave the child with their locks held.
        return None;
    }
    let control = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    Some(serve(control))
}

/// Threads of this process (Linux: `/proc/self/stat`'s 20th field).
fn threads() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(17)?.parse().ok()
}

fn tell(control: &OwnedFd, message: &impl Serialize) -> bool {
    serde_json::to_vec(message)
        .ok()
        .is_some_and(|m| fork_sys::send(control.as_fd(), &m, &[]).is_ok())
}

fn serve(control: OwnedFd) -> i32 {
    let hello = FromWorker::Hello {
        protocol: PROTOCOL,
        forks: true,
    };
    if !tell(&control, &hello) {
        return 0;
    }
    let Ok((signals, mask)) = fork_sys::sigchld_fd() else {
        return 1;
    };
    let me = fork_sys::pid();
    let mut children: HashSet<libc::pid_t> = HashSet::new();
    let mut buf = [0u8; 16];
    while let Ok((asked, ended)) = fork_sys::poll_two(control.as_fd(), signals.as_fd()) {
        if ended {
            fork_sys::drain_signals(signals.as_fd());
        }
        while let Some((pid, status)) = fork_sys::reap_any() {
            if children.remove(&pid) {
                let pid = pid.unsigned_abs();
                tell(&control, &FromServer::Exited { pid, status });
            }
        }
        if !asked {
            continue;
        }
        let Ok((n, fds)) = fork_sys::recv(control.as_fd(), &mut buf) else {
            break;
        };
        match buf.get(..n) {
            Some([FORK, ..]) if fds.len() == 3 => match fork_sys::fork() {
                Ok(Forked::Child) => {
                    drop(control);
                    drop(signals);
                    fork_sys::restore_mask(&mask);
                    // Never returns, so `fds` (closed in there) is never dropped.
                    std::process::exit(become_worker(me, &fds));
                }
                Ok(Forked::Parent(pid)) => {
                    drop(fds);
                    children.insert(pid);
                    let pid = pid.unsigned_abs();
                    tell(&control, &FromServer::Forked { pid });
                }
                Err(e) => {
                    let why = format!("the fork server could not fork: {e}");
                    tell(&control, &FromServer::ForkFailed { why });
                }
            },
            Some([KILL, a, b, c, d, ..]) => {
                let pid = libc::pid_t::from_le_bytes([*a, *b, *c, *d]);
                // Only a child not yet reaped: its pid cannot be another process's.
                if children.contains(&pid) {
                    fork_sys::kill(pid);
                }
            }
            // The end of the control socket (dsh gone), a quit, or a message that is not
            // dsh's: everything forked goes with the server.
            _ => break,
        }
    }
    for pid in &children {
        fork_sys::kill(*pid);
    }
    for pid in children {
        fork_sys::reap(pid);
    }
    0
}

/// In a fresh child: the worker, on the descriptors dsh made for it. Answers the exit code.
fn become_worker(server: libc::pid_t, fds: &[OwnedFd]) -> i32 {
    let [stdin, stdout, err] = fds else {
        return 2;
    };
    let ready = fork_sys::die_with(server)
        .and_then(|()| fork_sys::dup_onto(stdin.as_fd(), 0))
        .and_then(|()| fork_sys::dup_onto(stdout.as_fd(), 1))
        .and_then(|()| fork_sys::dup_onto(err.as_fd(), 2));
    if let Err(e) = ready {
        let _ = writeln!(std::io::stderr(), "the forked worker could not start: {e}");
        return 2;
    }
    // Nothing but its own streams: not the server's control socket, not whatever the
    // program inherited. `fds` is never dropped: the process exits from here.
    fork_sys::close_from(3);
    crate::worker::run_worker()
}

// ---------------------------------------------------------------------------------------
// dsh's side.

/// dsh's handle on a running fork server. Dropping it (with the last worker it forked) tells
/// the server to quit and waits for it, so every worker it forked is killed and reaped by
/// then.
pub(crate) struct ForkServer {
    command: WorkerCommand,
    process: Mutex<std::process::Child>,
    control: OwnedFd,
    shared: Arc<Mutex<Shared>>,
    reader: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer")
            .field("command", &self.command)
            .finish()
    }
}

type ForkReply = Result<(u32, watch::Receiver<Ended>), String>;

#[derive(Default)]
struct Shared {
    /// Fork requests in the order they were sent (the server answers in that order).
    forks: VecDeque<oneshot::Sender<ForkReply>>,
    /// Children forked and not yet reported ended.
    running: HashMap<u32, watch::Sender<Ended>>,
    /// The server's control socket ended.
    gone: bool,
}

/// Ids of the fork servers running.
static SERVERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Process ids of the fork servers running.
pub(crate) fn server_pids() -> Vec<u32> {
    SERVERS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Why a program is not used as a fork server.
pub(crate) enum NotStarted {
    /// It is not one (or could not start at all): start its workers the usual way.
    NotOne,
}

impl ForkServer {
    /// Starts `command` as a fork server and waits for its hello (blocking).
    pub(crate) fn start(command: &WorkerCommand) -> Result<ForkServer, NotStarted> {
        let (ours, theirs) = fork_sys::seqpacket_pair().map_err(|_| NotStarted::NotOne)?;
        let theirs_out = theirs.try_clone().map_err(|_| NotStarted::NotOne)?;
        let mut cmd = std::process::Command::new(command.program());
        cmd.args(command.args())
            .env(FORK_SERVER_ENV, "1")
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::from(theirs_out))
            .stderr(Stdio::null());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let process = cmd.spawn();
        // Its copies of the server's end go with the command.
        drop(cmd);
        let mut process = process.map_err(|_| NotStarted::NotOne)?;
        let mut buf = vec![0u8; 4096];
        let hello = fork_sys::readable_within(ours.as_fd(), HELLO_TIMEOUT)
            .ok()
            .filter(|ready| *ready)
            .and_then(|_| fork_sys::recv(ours.as_fd(), &mut buf).ok())
            .and_then(|(n, _)| {
                serde_json::from_slice::<FromWorker>(buf.get(..n)?.trim_ascii()).ok()
            });
        if !matches!(hello, Some(FromWorker::Hello { protocol, forks: true }) if protocol == PROTOCOL)
        {
            let _ = process.kill();
            let _ = process.wait();
            return Err(NotStarted::NotOne);
        }
        let shared = Arc::new(Mutex::new(Shared::default()));
        let reading = ours.try_clone().map_err(|_| NotStarted::NotOne)?;
        let state = shared.clone();
        let reader = std::thread::Builder::new()
            .name("dsh-fork-server".into())
            .spawn(move || read_server(reading, state))
            .map_err(|_| NotStarted::NotOne)?;
        SERVERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(process.id());
        Ok(ForkServer {
            command: command.clone(),
            process: Mutex::new(process),
            control: ours,
            shared,
            reader: Mutex::new(Some(reader)),
        })
    }

    /// The command it was started with.
    pub(crate) fn command(&self) -> &WorkerCommand {
        &self.command
    }

    /// Whether it still runs.
    pub(crate) fn alive(&self) -> bool {
        !self.shared.lock().unwrap_or_else(|e| e.into_inner()).gone
    }

    /// Forks a fresh worker: its pid, how it ends, and dsh's ends of its stdin, stdout and
    /// stderr pipes.
    pub(crate) async fn fork(&self) -> Result<ForkedWorker, String> {
        // Pipes, as a started worker's (a round trip through them is cheaper than through a
        // socket).
        let (stdin_theirs, stdin) = std::io::pipe().map_err(|e| e.to_string())?;
        let (stdout, stdout_theirs) = std::io::pipe().map_err(|e| e.to_string())?;
        let (err, err_theirs) = std::io::pipe().map_err(|e| e.to_string())?;
        let (tx, rx) = oneshot::channel();
        {
            let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            if shared.gone {
                return Err("the fork server ended".into());
            }
            // Tiny messages on a socket the server reads at once: this does not wait.
            fork_sys::send(
                self.control.as_fd(),
                &[FORK],
                &[
                    stdin_theirs.as_fd(),
                    stdout_theirs.as_fd(),
                    err_theirs.as_fd(),
                ],
            )
            .map_err(|e| format!("the fork server could not be asked: {e}"))?;
            shared.forks.push_back(tx);
        }
        drop((stdin_theirs, stdout_theirs, err_theirs));
        let (pid, ended) = rx
            .await
            .map_err(|_| "the fork server ended".to_string())??;
        Ok(ForkedWorker {
            pid,
            ended,
            stdin: stdin.into(),
            stdout: stdout.into(),
            err: err.into(),
        })
    }

    /// Kills its child `pid` (if it has not ended yet).
    pub(crate) fn kill(&self, pid: u32) {
        let mut message = [KILL, 0, 0, 0, 0];
        message[1..].copy_from_slice(&pid.to_le_bytes());
        let _ = fork_sys::send(self.control.as_fd(), &message, &[]);
    }
}

/// A worker just forked.
pub(crate) struct ForkedWorker {
    pub pid: u32,
    pub ended: watch::Receiver<Ended>,
    /// dsh's ends of the worker's stdin, stdout and stderr pipes.
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub err: OwnedFd,
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        let _ = fork_sys::send(self.control.as_fd(), &[QUIT], &[]);
        let mut process = self.process.lock().unwrap_or_else(|e| e.into_inner());
        let start = Instant::now();
        let mut nap = Duration::from_micros(50);
        loop {
            match process.try_wait() {
                Ok(None) if start.elapsed() < QUIT_LIMIT => {
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(5));
                }
                Ok(None) => {
                    tracing::warn!("a fork server did not quit; it is killed");
                    let _ = process.kill();
                    let _ = process.wait();
                    break;
                }
                _ => break,
            }
        }
        let pid = process.id();
        SERVERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != pid);
        if let Some(reader) = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = reader.join();
        }
    }
}

/// The reader thread: the server's answers, until its socket ends.
fn read_server(control: OwnedFd, shared: Arc<Mutex<Shared>>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let message = match fork_sys::recv(control.as_fd(), &mut buf) {
            Ok((0, _)) | Err(_) => break,
            Ok((n, _)) => serde_json::from_slice::<FromServer>(&buf[..n]),
        };
        let mut state = shared.lock().unwrap_or_else(|e| e.into_inner());
        match message {
            Ok(FromServer::Forked { pid }) => {
                let (tx, rx) = watch::channel(None);
                state.running.insert(pid, tx);
                if let Some(asked) = state.forks.pop_front()
                    && let Err(Ok((pid, _))) = asked.send(Ok((pid, rx)))
                {
                    // Nobody waits for it any more: it goes at once.
                    drop(state);
                    let mut message = [KILL, 0, 0, 0, 0];
                    message[1..].copy_from_slice(&pid.to_le_bytes());
                    let _ = fork_sys::send(control.as_fd(), &message, &[]);
                }
            }
            Ok(FromServer::ForkFailed { why }) => {
                if let Some(asked) = state.forks.pop_front() {
                    let _ = asked.send(Err(why));
                }
            }
            Ok(FromServer::Exited { pid, status }) => {
                if let Some(ended) = state.running.remove(&pid) {
                    let _ = ended.send(Some(Some(ExitStatus::from_raw(status))));
                }
            }
            Err(e) => {
                tracing::warn!(%e, "the fork server sent a message that is not its own");
            }
        }
    }
    let mut state = shared.lock().unwrap_or_else(|e| e.into_inner());
    state.gone = true;
    for (_, ended) in state.running.drain() {
        // Its children died with it (their parent-death signal).
        let _ = ended.send(Some(None));
    }
    for asked in state.forks.drain(..) {
        let _ = asked.send(Err("the fork server ended".into()));
    }
}
