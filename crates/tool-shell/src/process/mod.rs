//! Process supervision: start a command in its sandbox, follow it, and make sure nothing of it
//! outlives the call.
//!
//! `child.rs` holds the fork and the code between fork and exec (the process chain is
//! described there); `spawner.rs` the thread every fork happens on; `background.rs` the work
//! done ahead of a call (standbys) and after it (reaping, cgroup removal); this module the
//! parent's side: the pipes and the kill protocol.
//!
//! # Invariants
//!
//! - The command's tree is gone when [`Running::finish`] returns: the keeper only exits after
//!   init, and init (PID 1 of the call's namespace, or a subreaper that kills every descendant)
//!   only after every other process of the call. dsh reads the end of the report pipe, which
//!   the keeper holds until it exits, as "the whole tree is gone".
//! - A [`Running`] dropped before it finished (the call was cancelled and its body dropped)
//!   still ends the tree: SIGTERM at once, SIGKILL after the grace, from a thread of its own.
//! - dsh's death ends the tree: the keeper has a parent-death signal, and init reads the end of
//!   the control pipe (which only dsh holds) as the order to kill everything.

pub(crate) mod background;
pub(crate) mod child;
pub(crate) mod child_net;
pub(crate) mod plan;
pub(crate) mod report;
mod spawner;

use plan::{ChildPlan, Stage};
use report::{RECORD, Record, decode_record};
use rustix::process::{Pid, WaitOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::time::Instant;

/// What the command needs beyond its sandbox.
pub(crate) struct Launch {
    /// The plan, its descriptors still to be filled in.
    pub plan: ChildPlan,
    /// The Landlock ruleset, kept open until the fork.
    pub landlock: Option<OwnedFd>,
}

/// Why a command could not start.
#[derive(Debug)]
pub(crate) enum LaunchError {
    /// dsh could not make its pipes or fork.
    Io(std::io::Error),
    /// A setup step of the child failed.
    Setup {
        /// Which step.
        stage: Stage,
        /// Which item of it.
        index: u16,
        /// The errno.
        errno: i32,
    },
}

/// The parent's ends of a started command.
pub(crate) struct Running {
    keeper: i32,
    /// The command's stdout.
    pub stdout: Option<pipe::Receiver>,
    /// The command's stderr.
    pub stderr: Option<pipe::Receiver>,
    report: pipe::Receiver,
    control: Option<std::io::PipeWriter>,
    grace: Duration,
    /// No PID namespace (`Some(errno)` of the refused attempt, 0 when none was asked for).
    pub fallback: Option<i32>,
    done: bool,
    /// The keeper was handed over for reaping ([`Running::keeper_to_reap`]).
    handed_over: bool,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ending {
    /// Its wait status, if it ended (it always does, unless setup failed).
    pub status: Option<i32>,
    /// The deadline passed and the tree was killed.
    pub timed_out: bool,
    /// The signal fired and the tree was killed.
    pub cancelled: bool,
    /// Processes were still running after the command exited, and were killed.
    pub killed_leftovers: bool,
}

fn receiver(fd: OwnedFd) -> std::io::Result<pipe::Receiver> {
    pipe::Receiver::from_owned_fd(fd)
}

pub(crate) use spawner::Standby;

/// Starts the command: pipes, fork on the spawner thread (through `standby`, already in the
/// call's cgroups, where there is one), and the parent's ends.
pub(crate) async fn launch(
    mut launch: Launch,
    grace: Duration,
    standby: Option<Standby>,
) -> Result<Running, LaunchError> {
    let io = LaunchError::Io;
    let (stdout_r, stdout_w) = std::io::pipe().map_err(io)?;
    let (stderr_r, stderr_w) = std::io::pipe().map_err(io)?;
    let (report_r, report_w) = std::io::pipe().map_err(io)?;
    let (control_r, control_w) = std::io::pipe().map_err(io)?;
    let null = std::fs::File::open("/dev/null").map_err(io)?;
    let plan = &mut launch.plan;
    plan.parent_pid = rustix::process::getpid().as_raw_nonzero().get();
    plan.stdin_null = null.as_raw_fd();
    plan.stdout_w = stdout_w.as_raw_fd();
    plan.stderr_w = stderr_w.as_raw_fd();
    plan.report_w = report_w.as_raw_fd();
    plan.control_r = control_r.as_raw_fd();
    plan.landlock_fd = launch.landlock.as_ref().map(AsRawFd::as_raw_fd);
    let (_, forked) = spawner::fork(launch.plan, standby).await;
    // The child's ends close here: only the child chain holds them now.
    drop((
        null,
        stdout_w,
        stderr_w,
        report_w,
        control_r,
        launch.landlock,
    ));
    let keeper = forked.map_err(io)?;
    Ok(Running {
        keeper,
        stdout: Some(receiver(OwnedFd::from(stdout_r)).map_err(io)?),
        stderr: Some(receiver(OwnedFd::from(stderr_r)).map_err(io)?),
        report: receiver(OwnedFd::from(report_r)).map_err(io)?,
        control: Some(control_w),
        grace,
        fallback: None,
        done: false,
        handed_over: false,
    })
}

impl Running {
    fn send(&mut self, order: u8) {
        if let Some(control) = self.control.as_mut() {
            let _ = control.write_all(&[order]);
        }
    }

    /// Follows the command to its end: the command's exit, the deadline, or the signal; kills
    /// what is left; returns once the whole tree is gone (the keeper closed the report pipe on
    /// its way out, after init, and init after every other process). The keeper itself is
    /// reaped later, off the call's path ([`Running::keeper_to_reap`]): its exit may still be
    /// tearing down the call's namespaces.
    pub(crate) async fn finish(
        &mut self,
        deadline: Instant,
        signal: &dsh_core::Signal,
    ) -> Result<Ending, LaunchError> {
        let mut ending = Ending::default();
        let mut setup: Option<LaunchError> = None;
        // When SIGKILL follows the SIGTERM already sent.
        let mut kill_at: Option<Instant> = None;
        let mut killed = false;
        let mut buf = [0u8; RECORD];
        loop {
            let stopping = kill_at.is_some() || killed;
            tokio::select! {
                read = self.report.read_exact(&mut buf) => {
                    if read.is_err() {
                        // The keeper exited: the tree is gone.
                        break;
                    }
                    match decode_record(&buf) {
                        Some(Record::Error { stage, index, errno }) => {
                            setup.get_or_insert(LaunchError::Setup { stage, index, errno });
                        }
                        Some(Record::Fallback(errno)) => self.fallback = Some(errno),
                        Some(Record::Exit(status)) => ending.status = Some(status),
                        Some(Record::Leftovers) if !stopping => {
                            // Whatever it left running goes the same way.
                            ending.killed_leftovers = true;
                            self.send(b'T');
                            kill_at = Some(Instant::now() + self.grace);
                        }
                        Some(Record::Leftovers) => {}
                        None => {}
                    }
                }
                _ = tokio::time::sleep_until(deadline), if !stopping => {
                    ending.timed_out = true;
                    self.send(b'T');
                    kill_at = Some(Instant::now() + self.grace);
                }
                _ = signal.cancelled(), if !stopping => {
                    ending.cancelled = true;
                    self.send(b'T');
                    kill_at = Some(Instant::now() + self.grace);
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or(deadline)), if kill_at.is_some() => {
                    self.send(b'K');
                    // The end of the control pipe kills whatever is left, too.
                    self.control = None;
                    kill_at = None;
                    killed = true;
                }
            }
        }
        self.control = None;
        self.done = true;
        // A setup failure means the command never reached exec, whatever status the process
        // that failed then exited with.
        match setup {
            Some(error) => Err(error),
            None => Ok(ending),
        }
    }
}

pub(super) fn reap_now(keeper: i32) {
    if let Some(pid) = Pid::from_raw(keeper) {
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
    }
}

impl Running {
    /// The keeper, for the caller to reap (with `background::after_call`) once the call's
    /// result is known; `None` before [`Running::finish`] returned.
    pub(crate) fn keeper_to_reap(&mut self) -> Option<i32> {
        if !self.done || self.handed_over {
            return None;
        }
        self.handed_over = true;
        Some(self.keeper)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.done {
            if !self.handed_over {
                // Finished, but dropped before its keeper was handed over (a setup failure).
                background::after_call(Some(self.keeper), Box::new(()), None);
            }
            return;
        }
        // Dropped mid-run (the call was cancelled and its body dropped): SIGTERM now, SIGKILL
        // after the grace, then reap, from a thread that outlives this value.
        self.send(b'T');
        let control = self.control.take();
        let keeper = self.keeper;
        let grace = self.grace;
        let spawned = std::thread::Builder::new()
            .name("dsh-shell-reaper".into())
            .spawn(move || {
                std::thread::sleep(grace);
                if let Some(mut control) = control {
                    let _ = control.write_all(b"K");
                }
                reap_now(keeper);
            });
        if spawned.is_err() {
            // The closure, and with it the control pipe, was dropped: its end makes init kill
            // everything at once, rather than leave anything running.
            tracing::warn!("no reaper thread; the command's processes are killed at once");
        }
    }
}
