//! The spawner thread: every fork happens here.
//!
//! A child's parent-death signal fires when the *thread* that forked it exits, not the process.
//! Tokio's blocking threads come and go, so forking from one would kill the command when that
//! thread retires. This thread is started once and never exits: the keeper it forks dies with
//! dsh, and only with dsh.

use super::child;
use super::plan::{ChildPlan, ExecPtrs};
use libc::pid_t;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use tokio::sync::oneshot;

struct Job {
    plan: ChildPlan,
    reply: oneshot::Sender<(ChildPlan, std::io::Result<pid_t>)>,
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
                let exec = ExecPtrs::of(&job.plan);
                let result = child::fork_keeper(&job.plan, &exec);
                drop(exec);
                if let Err((_, Ok(keeper))) = job.reply.send((job.plan, result)) {
                    // The caller is gone (cancelled while waiting): its end of the control
                    // pipe is closed, so the tree kills itself; reap the keeper when it exits.
                    let _ = std::thread::Builder::new()
                        .name("dsh-shell-reaper".into())
                        .spawn(move || super::reap_now(keeper));
                }
            }
        })?;
    *slot = Some(tx.clone());
    Ok(tx)
}

/// Forks the keeper of `plan` on the spawner thread; answers the plan back (its descriptors
/// are the caller's to close) with the keeper's pid.
pub(crate) async fn fork(plan: ChildPlan) -> (Option<ChildPlan>, std::io::Result<pid_t>) {
    let sender = match jobs() {
        Ok(tx) => tx,
        Err(e) => return (Some(plan), Err(e)),
    };
    let (reply, answer) = oneshot::channel();
    if let Err(mpsc::SendError(job)) = sender.send(Job { plan, reply }) {
        return (
            Some(job.plan),
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
