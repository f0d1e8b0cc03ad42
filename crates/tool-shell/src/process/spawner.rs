//! The spawner thread: every fork happens here.
//!
//! A child's parent-death signal fires when the *thread* that forked it exits, not the process.
//! Tokio's blocking threads come and go, so forking from one would kill the command when that
//! thread retires. This thread is started once and never exits: the keeper it forks dies with
//! dsh, and only with dsh.
//!
//! It also makes the standbys (`child.rs`): processes made ahead of a call, already in its
//! cgroups, that the call's keeper is forked from.

use super::child;
use super::plan::{ChildPlan, ExecPtrs};
use libc::pid_t;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicI64;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use tokio::sync::oneshot;

/// What the spawner thread is asked to do.
enum Job {
    /// Fork the keeper of `plan` (through `standby` where there is one).
    Fork {
        plan: Box<ChildPlan>,
        standby: Option<child::StandbyProcess>,
        reply: oneshot::Sender<(ChildPlan, std::io::Result<pid_t>)>,
    },
    /// Make a standby that joins the cgroups whose `cgroup.procs` are `procs`.
    Standby {
        procs: Vec<RawFd>,
        reply: oneshot::Sender<std::io::Result<child::StandbyProcess>>,
    },
}

fn fork_now(
    mut plan: ChildPlan,
    standby: Option<child::StandbyProcess>,
) -> (ChildPlan, std::io::Result<pid_t>) {
    let exec = ExecPtrs::of(&plan);
    if let Some(standby) = standby {
        plan.joined = true;
        let order = child::ForkOrder {
            plan: &plan,
            exec: &exec,
            keeper: AtomicI64::new(0),
        };
        let forked = child::fork_through(standby, &order);
        if let Ok(keeper) = forked {
            drop(exec);
            return (plan, Ok(keeper));
        }
        // The standby forked nothing: the keeper is forked here, and joins the cgroups itself.
        plan.joined = false;
    }
    let result = child::fork_keeper(&plan, &exec);
    drop(exec);
    (plan, result)
}

fn jobs() -> std::io::Result<mpsc::Sender<Job>> {
    static JOBS: OnceLock<Mutex<Option<mpsc::Sender<Job>>>> = OnceLock::new();
    let slot = JOBS.get_or_init(|| Mutex::new(None));
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = slot.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("dsh-shell-spawner".into())
        .spawn(move || {
            // Never returns while dsh runs: the channel's sender lives in a static.
            while let Ok(job) = rx.recv() {
                match job {
                    Job::Fork {
                        plan,
                        standby,
                        reply,
                    } => {
                        let (plan, result) = fork_now(*plan, standby);
                        if let Err((_, Ok(keeper))) = reply.send((plan, result)) {
                            // The caller is gone (cancelled while waiting): its end of the
                            // control pipe is closed, so the tree kills itself; reap the keeper
                            // when it exits.
                            let _ = std::thread::Builder::new()
                                .name("dsh-shell-reaper".into())
                                .spawn(move || super::reap_now(keeper));
                        }
                    }
                    Job::Standby { procs, reply } => {
                        let parent = rustix::process::getpid().as_raw_nonzero().get();
                        // An unwanted standby is dropped with the reply: it exits and is reaped.
                        let _ = reply.send(child::start_standby(parent, &procs));
                    }
                }
            }
        })?;
    *slot = Some(tx.clone());
    Ok(tx)
}

/// A process made ahead of a call, already in the call's cgroups (see `child.rs`): the
/// call's keeper is forked from it, so the call does not wait for the cgroup join.
#[derive(Debug)]
pub(crate) struct Standby(child::StandbyProcess);

/// Makes a standby that joins the cgroups whose `cgroup.procs` are `procs` (descriptors that
/// must stay open until the call forked through it). Blocks: called on the background
/// thread.
pub(crate) fn standby_blocking(procs: Vec<RawFd>) -> std::io::Result<Standby> {
    let sender = jobs()?;
    let (reply, answer) = oneshot::channel();
    sender
        .send(Job::Standby { procs, reply })
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    match answer.blocking_recv() {
        Ok(made) => made.map(Standby),
        Err(_) => Err(std::io::Error::other("the spawner thread is gone")),
    }
}

/// Forks the keeper of `plan` on the spawner thread; answers the plan back (its descriptors
/// are the caller's to close) with the keeper's pid.
pub(crate) async fn fork(
    plan: ChildPlan,
    standby: Option<Standby>,
) -> (Option<ChildPlan>, std::io::Result<pid_t>) {
    let sender = match jobs() {
        Ok(tx) => tx,
        Err(e) => return (Some(plan), Err(e)),
    };
    let (reply, answer) = oneshot::channel();
    let job = Job::Fork {
        plan: Box::new(plan),
        standby: standby.map(|s| s.0),
        reply,
    };
    if let Err(mpsc::SendError(job)) = sender.send(job) {
        let plan = match job {
            Job::Fork { plan, .. } => Some(*plan),
            Job::Standby { .. } => None,
        };
        return (
            plan,
            Err(std::io::Error::other("the spawner thread is gone")),
        );
    }
    match answer.await {
        Ok((plan, result)) => (Some(plan), result),
        Err(_) => (
            None,
            Err(std::io::Error::other("the spawner thread is gone")),
        ),
    }
}
