//! Running one hook command: `sh -c` in a process group of its own, JSON on stdin, stdout and
//! stderr captured (bounded).
//!
//! The hook's exit decides: once its shell exits, its pipes get a short grace to deliver what
//! is still in flight, and then its whole process group is killed, so that a child it left
//! behind (`(sleep 30 &)`) neither holds the answer up nor outlives the hook. The group is
//! also killed at the deadline, when the run is dropped (its call was cancelled), and by
//! [`LiveGroups::kill_all`].
//!
//! The shell is reaped only after its group was killed: until then it stays a zombie, which
//! keeps its pid (the group's id) from being reused, so a kill never reaches a stranger.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};

/// The most of stdout or stderr kept; the rest is read and dropped, and the output is marked
/// as cut.
pub(crate) const MAX_OUTPUT: usize = 1024 * 1024;

/// How often the shell's exit is looked for when no `SIGCHLD` says so first.
const EXIT_POLL: Duration = Duration::from_millis(100);

/// How long the pipes are still read after the group was killed, for what is buffered.
const AFTER_KILL_DRAIN: Duration = Duration::from_secs(1);

/// How long a killed shell is waited for before it is left to the runtime to reap.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// What a hook printed on one stream, at most [`MAX_OUTPUT`] bytes of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Output {
    /// The bytes kept, as text (invalid UTF-8 replaced).
    pub text: String,
    /// True when the hook printed more than was kept.
    pub cut: bool,
}

/// How a hook command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It exited (`code` is `None` when a signal ended it).
    Exited {
        code: Option<i32>,
        stdout: Output,
        stderr: Output,
    },
    /// It was still running at its deadline, and was killed.
    TimedOut,
    /// It could not be started.
    CouldNotRun(String),
    /// It was killed (or never started) because every hook was stopped
    /// ([`LiveGroups::kill_all`]).
    Stopped,
}

/// How long a hook may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// From its start to its exit.
    pub timeout: Duration,
    /// From its exit to the end of its output.
    pub grace: Duration,
}

#[derive(Debug, Default)]
struct LiveState {
    next: u64,
    groups: HashMap<u64, Pid>,
    closed: bool,
}

/// The process groups of the hooks running now, so that they can all be killed at once.
#[derive(Debug, Default)]
pub(crate) struct LiveGroups {
    state: Mutex<LiveState>,
}

impl LiveGroups {
    fn lock(&self) -> MutexGuard<'_, LiveState> {
        // A panic while the lock was held cannot leave the map half-changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True once [`LiveGroups::kill_all`] ran: no hook starts any more.
    pub(crate) fn closed(&self) -> bool {
        self.lock().closed
    }

    /// Kills every live group and refuses new ones; the number of groups killed.
    pub(crate) fn kill_all(&self) -> usize {
        let mut state = self.lock();
        state.closed = true;
        let groups: Vec<Pid> = state.groups.drain().map(|(_, pgid)| pgid).collect();
        for pgid in &groups {
            // Under the lock: a group still in the map has an unreaped leader.
            let _ = killpg(*pgid, Signal::SIGKILL);
        }
        groups.len()
    }

    /// Registers a new group; `None` (after killing it) once every hook was stopped.
    fn enter(self: &Arc<Self>, pgid: Pid) -> Option<Group> {
        let mut state = self.lock();
        if state.closed {
            let _ = killpg(pgid, Signal::SIGKILL);
            return None;
        }
        state.next += 1;
        let id = state.next;
        state.groups.insert(id, pgid);
        Some(Group {
            pgid,
            id,
            live: self.clone(),
            killed: false,
            stopped: false,
        })
    }
}

/// A hook's process group; killed when dropped, unless it already was.
struct Group {
    pgid: Pid,
    id: u64,
    live: Arc<LiveGroups>,
    killed: bool,
    /// True when [`LiveGroups::kill_all`] killed it.
    stopped: bool,
}

impl Group {
    /// Kills the group (the leader must not have been reaped yet) and forgets it.
    fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        let mut state = self.live.lock();
        if state.groups.remove(&self.id).is_some() {
            let _ = killpg(self.pgid, Signal::SIGKILL);
        } else {
            self.stopped = true;
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running hook. The group is declared first, so that it is killed before the child is
/// dropped (and reaped by the runtime).
struct Running {
    group: Group,
    child: Child,
}

/// Waits until the shell `pid` has exited, without reaping it.
async fn exited(pid: Pid) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigchld = signal(SignalKind::child()).ok();
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) => {}
            // ECHILD: someone else reaped it; it is over either way.
            Ok(_) | Err(Errno::ECHILD) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        match sigchld.as_mut() {
            Some(signals) => {
                if let Ok(None) = tokio::time::timeout(EXIT_POLL, signals.recv()).await {
                    sigchld = None;
                }
            }
            None => tokio::time::sleep(EXIT_POLL).await,
        }
    }
}

async fn feed(stdin: Option<ChildStdin>, input: &[u8]) {
    if let Some(mut stdin) = stdin {
        // A hook that does not read its input is fine: a broken pipe is ignored.
        let _ = stdin.write_all(input).await;
        let _ = stdin.shutdown().await;
    }
}

/// What has been read of one stream so far.
#[derive(Default)]
struct Capture {
    kept: Vec<u8>,
    cut: bool,
}

impl Capture {
    fn output(self) -> Output {
        Output {
            text: String::from_utf8_lossy(&self.kept).into_owned(),
            cut: self.cut,
        }
    }
}

/// Reads `stream` to its end into `into` (at most [`MAX_OUTPUT`] bytes kept; the rest is
/// read and dropped, so that the hook never blocks on a full pipe). What was read, and
/// whether some was dropped, stays in `into` when the future is dropped half-way.
async fn drain(stream: Option<impl AsyncRead + Unpin>, into: &mut Capture) {
    let Some(mut stream) = stream else {
        return;
    };
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(into.kept.len());
                into.kept.extend_from_slice(&chunk[..n.min(room)]);
                into.cut |= n > room;
            }
        }
    }
}

/// How the wait for the shell ended.
enum Waited {
    Exited,
    Deadline,
    Failed(std::io::Error),
}

/// Runs `command` with `sh -c` in `cwd` (also `CLAUDE_PROJECT_DIR`), writes `input` to its
/// stdin, and waits for its exit at most `limits.timeout`.
pub(crate) async fn run(
    command: &str,
    cwd: &Path,
    input: &[u8],
    limits: Limits,
    live: &Arc<LiveGroups>,
) -> Ran {
    if live.closed() {
        return Ran::Stopped;
    }
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env("CLAUDE_PROJECT_DIR", cwd)
        .env_remove(dsh_core::STORE_ENV_VARS[0])
        .env_remove(dsh_core::STORE_ENV_VARS[1])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that whatever the script starts is killed with it.
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Ran::CouldNotRun(format!("cannot run `sh -c`: {e}")),
    };
    let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        let _ = child.start_kill();
        return Ran::CouldNotRun("it has no process id".into());
    };
    // A group leader's pid is its group's id.
    let Some(group) = live.enter(pid) else {
        return Ran::Stopped;
    };
    let mut hook = Running { group, child };
    let stdin = hook.child.stdin.take();
    let stdout = hook.child.stdout.take();
    let stderr = hook.child.stderr.take();
    let (mut out, mut err) = (Capture::default(), Capture::default());
    let waited = {
        let write = feed(stdin, input);
        let reads = async {
            tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err));
        };
        let exit = exited(pid);
        let deadline = tokio::time::sleep(limits.timeout);
        tokio::pin!(write, reads, exit, deadline);
        let (mut written, mut read) = (false, false);
        let waited = loop {
            tokio::select! {
                biased;
                r = &mut exit => break match r {
                    Ok(()) => Waited::Exited,
                    Err(e) => Waited::Failed(e),
                },
                () = &mut deadline => break Waited::Deadline,
                () = &mut write, if !written => written = true,
                () = &mut reads, if !read => read = true,
            }
        };
        if matches!(waited, Waited::Exited) && !read {
            // What the hook wrote before it exited is in the pipes already; a child it left
            // behind may hold them open, so they get a grace, not a wait.
            read = tokio::time::timeout(limits.grace, &mut reads).await.is_ok();
        }
        hook.group.kill();
        if matches!(waited, Waited::Exited) && !read {
            // Its children are gone now, and with them the pipes' other ends: what is still
            // buffered is read to the end, so that an answer is not taken half-read (unless a
            // writer that left the group holds them: then this gives up).
            let _ = tokio::time::timeout(AFTER_KILL_DRAIN, &mut reads).await;
        }
        waited
    };
    let stopped = hook.group.stopped;
    match waited {
        Waited::Exited => match hook.child.wait().await {
            Ok(status) if stopped && status.code().is_none() => Ran::Stopped,
            Ok(status) => Ran::Exited {
                code: status.code(),
                stdout: out.output(),
                stderr: err.output(),
            },
            Err(e) => Ran::CouldNotRun(format!("waiting for it failed: {e}")),
        },
        Waited::Deadline => {
            let _ = tokio::time::timeout(REAP_WAIT, hook.child.wait()).await;
            if stopped { Ran::Stopped } else { Ran::TimedOut }
        }
        Waited::Failed(e) => {
            let _ = tokio::time::timeout(REAP_WAIT, hook.child.wait()).await;
            Ran::CouldNotRun(format!("waiting for it failed: {e}"))
        }
    }
}
