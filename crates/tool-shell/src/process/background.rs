//! Work a call needs done before it starts and after its result is known, kept off its path
//! (issue 31): one thread per process does it.
//!
//! - **Before**: a pool of standbys ([`StandbyPool`]), each already in the cgroups of a call to
//!   come. Joining a cgroup waits for an RCU grace period (6 to 18 ms on a loaded VM); with two
//!   standbys made ahead, a call that follows another at once still finds one that has
//!   joined. Each standby is used by one call and its cgroups by that call alone.
//! - **After**: reaping the call's keeper, which may still be tearing down the call's
//!   namespaces, then removing the call's cgroups (a memory cgroup's removal takes
//!   milliseconds on cgroup v1). This runs only once the call's whole tree is gone: dsh hands
//!   a call over when the keeper closed the report pipe, and the keeper only exits after init,
//!   and init only after every other process of the call. Nothing of the call can still run;
//!   what is left is dsh's own bookkeeping.
//!
//! A tool waits for the work it handed over ([`Pending::wait`]) before it goes, so no cgroup
//! or process of its outlives it.

use super::{Standby, reap_now, spawner};
use crate::config::ShellLimits;
use crate::limits::CallLimits;
use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// How many standbys a tool keeps ready.
const DEPTH: usize = 2;

/// How long a tool that goes waits for the work it handed over.
const FLUSH: Duration = Duration::from_secs(30);

/// The work one tool handed over and that is not done yet.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    count: Mutex<usize>,
    done: Condvar,
}

impl Pending {
    fn add(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    fn finish(&self) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.done.notify_all();
        }
    }

    /// Waits until everything handed over is done (at most [`FLUSH`]).
    pub(crate) fn wait(&self) {
        let until = Instant::now() + FLUSH;
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        while *count > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    jobs = *count,
                    "the shell tool goes before its background work is done"
                );
                return;
            }
            count = self
                .done
                .wait_timeout(count, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

enum Job {
    /// Reap `keeper` (when there is one), then drop `rest` (the call's cgroups, its private
    /// folder).
    After {
        keeper: Option<i32>,
        rest: Box<dyn Send>,
        pending: Option<Arc<Pending>>,
    },
    /// Fill the pool up to [`DEPTH`].
    Refill {
        pool: Weak<StandbyPool>,
        pending: Arc<Pending>,
    },
}

fn run(job: Job) {
    match job {
        Job::After {
            keeper,
            rest,
            pending,
        } => {
            if let Some(keeper) = keeper {
                reap_now(keeper);
            }
            drop(rest);
            if let Some(pending) = pending {
                pending.finish();
            }
        }
        Job::Refill { pool, pending } => {
            if let Some(pool) = pool.upgrade() {
                pool.fill();
            }
            pending.finish();
        }
    }
}

/// Hands `job` to the background thread (started once), or does it here where no thread can
/// be started.
fn submit(job: Job) {
    static JOBS: OnceLock<Mutex<Option<mpsc::Sender<Job>>>> = OnceLock::new();
    let slot = JOBS.get_or_init(|| Mutex::new(None));
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("dsh-shell-background".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    run(job);
                }
            });
        match started {
            Ok(_) => *slot = Some(tx),
            Err(e) => tracing::debug!(error = %e, "no background thread for the shell tool"),
        }
    }
    let job = match slot.as_ref() {
        Some(tx) => match tx.send(job) {
            Ok(()) => return,
            Err(mpsc::SendError(job)) => job,
        },
        None => job,
    };
    drop(slot);
    run(job);
}

/// After a call whose tree is gone: reap `keeper`, then drop `rest`, off the call's path.
pub(crate) fn after_call(keeper: Option<i32>, rest: Box<dyn Send>, pending: Option<Arc<Pending>>) {
    if let Some(pending) = &pending {
        pending.add();
    }
    submit(Job::After {
        keeper,
        rest,
        pending,
    });
}

/// Standbys made ahead, each already in the cgroups of a call to come.
#[derive(Debug)]
pub(crate) struct StandbyPool {
    ready: Mutex<VecDeque<(Standby, CallLimits)>>,
    limits: ShellLimits,
    sandboxed: bool,
    /// No more standbys once the tool goes.
    closed: std::sync::atomic::AtomicBool,
}

impl StandbyPool {
    /// An empty pool for calls with `limits` (`sandboxed`: the calls get the tmpfs limit).
    pub(crate) fn new(limits: ShellLimits, sandboxed: bool) -> StandbyPool {
        StandbyPool {
            ready: Mutex::new(VecDeque::new()),
            limits,
            sandboxed,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The oldest standby (the likeliest to have joined its cgroups) and its call's limits.
    pub(crate) fn take(&self) -> Option<(Standby, CallLimits)> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    /// Fills the pool in the background.
    pub(crate) fn refill(self: &Arc<Self>, pending: &Arc<Pending>) {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        pending.add();
        submit(Job::Refill {
            pool: Arc::downgrade(self),
            pending: pending.clone(),
        });
    }

    fn fill(&self) {
        loop {
            if self.closed.load(std::sync::atomic::Ordering::SeqCst)
                || self.ready.lock().unwrap_or_else(|e| e.into_inner()).len() >= DEPTH
            {
                return;
            }
            let Ok(bounds) = CallLimits::prepare(&self.limits, self.sandboxed) else {
                return;
            };
            if bounds.procs_fds().is_empty() {
                // No cgroup to join: nothing to make ahead.
                return;
            }
            match spawner::standby_blocking(bounds.procs_fds()) {
                Ok(standby) => self
                    .ready
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_back((standby, bounds)),
                Err(e) => {
                    tracing::debug!(error = %e, "no standby for the next shell call");
                    return;
                }
            }
        }
    }

    /// No more standbys; the ready ones go (each reaped, then its cgroups removed).
    pub(crate) fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let ready = std::mem::take(&mut *self.ready.lock().unwrap_or_else(|e| e.into_inner()));
        drop(ready);
    }
}
