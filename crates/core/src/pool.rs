//! A bounded pool of threads for user code the pipeline has to call synchronously
//! (`finalize_content`, `present`, `tools/result` observers, guards that may block).
//!
//! Such code may block for any time, or forever. Run on an async worker it would stall every
//! task of that worker (on a current-thread runtime, the whole runtime); run on tokio's
//! blocking pool, code that never returns would use that pool up, and with it every
//! `spawn_blocking` of the process (file I/O included). A [`BlockingPool`] is neither:
//!
//! - **Bounded threads**, at most [`BlockingPool::max_threads`]: its own, started when needed
//!   and ended after a while idle ([`BlockingPool::new`]: code stuck here takes nothing from
//!   the runtime), or borrowed from tokio's blocking pool one job queue at a time
//!   ([`BlockingPool::on_runtime`]: code stuck there holds at most that many of tokio's
//!   threads; and tokio knows they run, so a runtime with paused time, in tests, does not
//!   jump its clock ahead while a job runs).
//! - **A deadline per job, in real time.** The caller stops waiting when it passes
//!   ([`PoolError::TimedOut`]) and the job's thread is abandoned to finish on its own. The
//!   deadline is kept by a monitor thread of the pool, not by a tokio timer: code on another
//!   thread runs in real time, and a runtime with paused time (tests) would otherwise see every
//!   job time out as soon as it went idle.
//! - **Refusal at once when every thread is stuck.** A thread whose job outlived its deadline
//!   is *stuck*. When all of them are, a new job is refused ([`PoolError::Full`], naming what
//!   the stuck threads run) instead of queueing behind code that may never return. While some
//!   thread is only busy, jobs queue; a queued job whose deadline passes before it starts is
//!   answered [`PoolError::TimedOut`] and never runs.
//!
//! - **Few wake-ups per job.** A thread that finishes a job takes the next queued one without
//!   sleeping; a sleeping thread is woken only when no other thread is free for the job; a new
//!   thread is started at once only when the pool has none, else for a job that waited 500 µs
//!   while every thread was busy (so a burst of quick jobs keeps a few threads busy instead of
//!   waking one per job, and a job queued behind code that blocks still gets a thread soon);
//!   the deadline monitor is woken only for a deadline earlier than its next look; a job
//!   submitted from a task leaves the wake-up to a task that runs after the runtime's ready
//!   ones, so the jobs that many calls submit in one turn of the runtime share it. Before
//!   sleeping, a free thread spins for the next job and a caller polls for its answer, each
//!   for a window that follows what spinning achieved (the crate's private `spin` module): on
//!   a quiet machine a stream of calls then hands off without wake-ups; where spinning only
//!   takes a core from the work it waits for, its spins miss and it turns itself off; and
//!   neither side spins while more than a couple of callers wait, as a burst is served better
//!   by one wake-up while the callers' tasks keep the cores (`DSH_POOL_SPIN_US` and
//!   `DSH_POOL_CALLER_SPIN_US`, read once, fix the windows instead; `0` turns spinning off).
//!
//! A job's panic is caught and answered [`PoolError::Panicked`]. Each job gets an
//! [`Activity`], through which it can say what it is running now (a guard set running its
//! guards one after another names the guard), so a refusal names the code that is stuck.
//!
//! ```
//! use dsh_core::pool::{BlockingPool, PoolError};
//! use std::time::Duration;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let pool = BlockingPool::new("example", 2);
//! let four = pool.run("adding", Some(Duration::from_secs(5)), |_| 2 + 2).await;
//! assert_eq!(four, Ok(4));
//! let late = pool
//!     .run("sleeping", Some(Duration::from_millis(10)), |_| {
//!         std::thread::sleep(Duration::from_millis(200));
//!     })
//!     .await;
//! assert!(matches!(late, Err(PoolError::TimedOut { started: true })));
//! # });
//! ```

use crate::spin::{AdaptiveSpin, SpinTurn};
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a thread of the pool waits for work before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);

/// How long a thread borrowed from tokio's blocking pool waits for the next job before it is
/// given back. Short: the thread is tokio's (and, under a paused test clock, a running
/// blocking task holds the clock back), but long enough that a stream of jobs does not hand
/// a thread back and borrow it again, through tokio's pool lock, for every job.
const BORROWED_LINGER: Duration = Duration::from_millis(2);

/// The widest spin of an idle thread of the pool, looking for the next job before it sleeps
/// on the pool's condition variable (adaptive, see [`crate::spin`]; `DSH_POOL_SPIN_US` fixes
/// it). One thread of the process spins at a time.
const SPIN_MAX_US: u32 = 100;

/// The widest spin of a caller of [`BlockingPool::run`] polling for its answer, yielding to the
/// runtime's other tasks in between, before it parks its task (adaptive;
/// `DSH_POOL_CALLER_SPIN_US` fixes it): an answer that comes meanwhile is picked up without a
/// cross-thread wake of the caller's worker.
const CALLER_SPIN_MAX_US: u32 = 50;

/// Spinning, on either side, is for a stream of calls one at a time: it is tried only while at
/// most this many callers wait for answers. With more, the jobs come in bursts (the calls of a
/// step, many sessions), which one wake-up serves together while the runtime's other tasks
/// keep the cores busy; a spinning thread would take a core from them and serve the burst one
/// job at a time.
const SPIN_CALLERS: usize = 2;

/// Counts a caller of [`BlockingPool::run`] as waiting while it lives (dropped futures too).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    /// Counts one more; answers the guard and how many wait now, this one included.
    fn enter(count: &'a AtomicUsize) -> (Waiting<'a>, usize) {
        let now = count.fetch_add(1, Ordering::Relaxed) + 1;
        (Waiting(count), now)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long the deadline monitor, having seen jobs, sleeps before it looks again when none of
/// them needs it sooner: a job submitted meanwhile whose deadline is later needs no wake-up of
/// the monitor (one futex call and context switch per job otherwise).
const MONITOR_TICK: Duration = Duration::from_millis(50);

/// How long a job waits in the queue, while every thread of the pool is running one, before
/// the pool starts another thread for it. A pool of quick jobs thus keeps a few threads busy
/// (each takes the next job as it finishes one) instead of waking a thread per job; a job
/// queued behind code that blocks waits this much longer, then gets a thread of its own.
const GROW_AFTER: Duration = Duration::from_micros(500);

/// Why a job gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Every thread of the pool is stuck in a job past its deadline; nothing was run.
    #[error("the pool `{pool}` is full: every thread is stuck ({})", .stuck.join("; "))]
    Full {
        /// The pool's name.
        pool: String,
        /// What each stuck thread is running (its job's current activity).
        stuck: Vec<String>,
    },
    /// The deadline passed: while the job ran (`started`), or before a thread was free.
    #[error("{}", if *.started { "the job did not return before its deadline" } else { "the job did not start before its deadline" })]
    TimedOut {
        /// The job had started (its thread is abandoned, still running it).
        started: bool,
    },
    /// The job panicked.
    #[error("the job panicked: {0}")]
    Panicked(String),
    /// The pool is shut down, or could not start a thread.
    #[error("the pool is unavailable: {0}")]
    Unavailable(String),
}

/// What a job is running now, as the pool reports it when the job's thread is stuck.
#[derive(Debug, Clone)]
pub struct Activity(Arc<Mutex<String>>);

impl Activity {
    /// Says what the job runs from now on.
    pub fn set(&self, label: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = label.into();
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The answer side of a job, typed away so the pool can expire it.
trait Answer: Send + Sync {
    /// Answers the caller with a timeout, unless the job answered first. True if it did so.
    fn expire(&self, started: bool) -> bool;
    /// True once the caller has its answer (or stopped waiting).
    fn answered(&self) -> bool;
}

type Deliver<T> = Box<dyn FnOnce(Result<T, PoolError>) + Send>;

struct Slot<T> {
    deliver: Mutex<Option<Deliver<T>>>,
}

impl<T> Slot<T> {
    fn take(&self) -> Option<Deliver<T>> {
        self.deliver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl<T: Send> Answer for Slot<T> {
    fn expire(&self, started: bool) -> bool {
        match self.take() {
            Some(deliver) => {
                deliver(Err(PoolError::TimedOut { started }));
                true
            }
            None => false,
        }
    }

    fn answered(&self) -> bool {
        self.deliver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }
}

struct Job {
    id: u64,
    /// When it was queued (see [`GROW_AFTER`]).
    queued_at: Instant,
    deadline: Option<Instant>,
    activity: Activity,
    answer: Arc<dyn Answer>,
    run: Box<dyn FnOnce(&Activity) + Send>,
}

struct Running {
    deadline: Option<Instant>,
    activity: Activity,
    answer: Arc<dyn Answer>,
    /// The deadline passed while it ran: its thread is stuck.
    stuck: bool,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    running: HashMap<u64, Running>,
    threads: usize,
    /// Threads without a job: spinning or sleeping.
    idle: usize,
    /// Threads started that have not looked at the queue yet (each will take a job).
    starting: usize,
    /// Threads sleeping on `work` (they need a notify to see a new job).
    sleeping: usize,
    /// A thread is spinning for the next job (it needs no notify).
    spinning: bool,
    /// A [`Kick`] is on its way: it wakes the sleeping threads for the jobs queued until it
    /// runs, so jobs submitted meanwhile need no wake-up of their own.
    kick_pending: bool,
    next_id: u64,
    closed: bool,
    monitor: bool,
    /// When the monitor wakes next (`None`: when told).
    monitor_wake: Option<Instant>,
    /// A job was submitted since the monitor last found nothing to watch.
    recent_jobs: bool,
    /// The runtime whose blocking pool lends the threads ([`Host::Runtime`]), as last seen by
    /// a caller: the monitor starts threads there too.
    runtime: Option<tokio::runtime::Handle>,
}

impl State {
    /// True when a queued job has no thread that could take it now.
    fn short_of_threads(&self, max_threads: usize) -> bool {
        self.queue.len() > self.idle + self.starting && self.threads < max_threads
    }
}

/// Where a pool's jobs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    /// Threads of the pool's own.
    Own,
    /// Threads borrowed from the current tokio runtime's blocking pool (own ones outside a
    /// runtime).
    Runtime,
}

struct Inner {
    name: String,
    host: Host,
    max_threads: usize,
    /// How many jobs are queued (the length of `State::queue`, readable without the lock by a
    /// spinning thread).
    queued: AtomicUsize,
    /// How many times a sleeping thread was told of work (read by tests).
    wakes: AtomicUsize,
    /// How many callers of [`BlockingPool::run`] wait for an answer now (see
    /// [`SPIN_CALLERS`]).
    callers: AtomicUsize,
    /// How long an idle thread spins for the next job.
    spin: AdaptiveSpin,
    /// How long a caller polls for its answer.
    caller_spin: AdaptiveSpin,
    state: Mutex<State>,
    work: Condvar,
    watch: Condvar,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells one sleeping thread that a job waits.
    fn wake_one(&self) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        self.work.notify_one();
    }
}

/// Closes the pool when the last handle goes.
struct Handle(Arc<Inner>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.state().closed = true;
        self.0.work.notify_all();
        self.0.watch.notify_all();
    }
}

/// A bounded pool of threads that runs blocking jobs under deadlines. Clones share the pool;
/// when the last clone is dropped, idle threads end and stuck ones end when their job returns.
#[derive(Clone)]
pub struct BlockingPool {
    handle: Arc<Handle>,
}

impl fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.handle.0;
        let state = inner.state();
        f.debug_struct("BlockingPool")
            .field("name", &inner.name)
            .field("max_threads", &inner.max_threads)
            .field("threads", &state.threads)
            .field("stuck", &state.running.values().filter(|r| r.stuck).count())
            .finish()
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

impl BlockingPool {
    /// A pool named `name` (for thread names and errors) of at most `max_threads` threads
    /// (at least one). No thread starts before the first job.
    pub fn new(name: impl Into<String>, max_threads: usize) -> BlockingPool {
        Self::hosted(name.into(), max_threads, Host::Own)
    }

    /// A pool whose jobs run on the current tokio runtime's blocking pool, at most
    /// `max_threads` of its threads at once (a thread is given back when no job came for a
    /// couple of milliseconds).
    /// Code stuck past its deadline holds its tokio thread until it returns; when every one
    /// of the `max_threads` is stuck, new jobs are refused ([`PoolError::Full`]), so the
    /// runtime never loses more. Outside a runtime, threads of the pool's own are used.
    pub fn on_runtime(name: impl Into<String>, max_threads: usize) -> BlockingPool {
        Self::hosted(name.into(), max_threads, Host::Runtime)
    }

    fn hosted(name: String, max_threads: usize, host: Host) -> BlockingPool {
        Self::hosted_spinning(
            name,
            max_threads,
            host,
            AdaptiveSpin::new("DSH_POOL_SPIN_US", SPIN_MAX_US),
            AdaptiveSpin::new("DSH_POOL_CALLER_SPIN_US", CALLER_SPIN_MAX_US),
        )
    }

    fn hosted_spinning(
        name: String,
        max_threads: usize,
        host: Host,
        spin: AdaptiveSpin,
        caller_spin: AdaptiveSpin,
    ) -> BlockingPool {
        BlockingPool {
            handle: Arc::new(Handle(Arc::new(Inner {
                name,
                host,
                max_threads: max_threads.max(1),
                queued: AtomicUsize::new(0),
                wakes: AtomicUsize::new(0),
                callers: AtomicUsize::new(0),
                spin,
                caller_spin,
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                watch: Condvar::new(),
            }))),
        }
    }

    /// The most threads it runs at once.
    pub fn max_threads(&self) -> usize {
        self.handle.0.max_threads
    }

    /// Threads stuck in a job past its deadline now, with what each runs.
    pub fn stuck(&self) -> Vec<String> {
        self.handle
            .0
            .state()
            .running
            .values()
            .filter(|r| r.stuck)
            .map(|r| r.activity.get())
            .collect()
    }

    /// Runs `job` on a thread of the pool and waits for it, at most `deadline` (real time)
    /// from now; `None` waits as long as it takes. Dropping the future stops waiting (the job
    /// still runs, unheard, if it had started). `label` names the job while it runs.
    pub async fn run<T, F>(
        &self,
        label: impl Into<String>,
        deadline: Option<Duration>,
        job: F,
    ) -> Result<T, PoolError>
    where
        T: Send + 'static,
        F: FnOnce(&Activity) -> T + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Counted before the job is queued, so a pool thread that finishes it sees this caller.
        let (_waiting, callers) = Waiting::enter(&self.handle.0.callers);
        self.submit(
            label.into(),
            deadline,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
            job,
            Wake::Deferred,
        )?;
        let mut rx = rx;
        let polling = Instant::now();
        let spin = &self.handle.0.caller_spin;
        let window = if callers <= SPIN_CALLERS {
            spin.window()
        } else {
            Duration::ZERO
        };
        while !window.is_zero() {
            match rx.try_recv() {
                Ok(answer) => {
                    spin.record(window, true);
                    return answer;
                }
                Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                    return Err(PoolError::Unavailable("the job was dropped".into()));
                }
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
            }
            if polling.elapsed() >= window {
                spin.record(window, false);
                break;
            }
            tokio::task::yield_now().await;
        }
        rx.await
            .unwrap_or_else(|_| Err(PoolError::Unavailable("the job was dropped".into())))
    }

    /// [`BlockingPool::run`] for a caller that is not async: blocks the calling thread until
    /// the job answers or the deadline passes.
    pub fn run_blocking<T, F>(
        &self,
        label: impl Into<String>,
        deadline: Option<Duration>,
        job: F,
    ) -> Result<T, PoolError>
    where
        T: Send + 'static,
        F: FnOnce(&Activity) -> T + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit(
            label.into(),
            deadline,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
            job,
            // This thread waits right here: nothing else would run a deferred wake-up.
            Wake::Now,
        )?;
        rx.recv()
            .unwrap_or_else(|_| Err(PoolError::Unavailable("the job was dropped".into())))
    }

    fn submit<T, F>(
        &self,
        label: String,
        deadline: Option<Duration>,
        deliver: Deliver<T>,
        job: F,
        wake: Wake,
    ) -> Result<(), PoolError>
    where
        T: Send + 'static,
        F: FnOnce(&Activity) -> T + Send + 'static,
    {
        let inner = &self.handle.0;
        let slot = Arc::new(Slot {
            deliver: Mutex::new(Some(deliver)),
        });
        let answer: Arc<dyn Answer> = slot.clone();
        let run = Box::new(move |activity: &Activity| {
            let outcome = catch_unwind(AssertUnwindSafe(|| job(activity)))
                .map_err(|p| PoolError::Panicked(panic_message(p.as_ref())));
            if let Some(deliver) = slot.take() {
                deliver(outcome);
            }
        });
        let deadline = deadline.map(|d| Instant::now() + d);
        let mut state = inner.state();
        if state.closed {
            return Err(PoolError::Unavailable(format!(
                "the pool `{}` is shut down",
                inner.name
            )));
        }
        if state.threads >= inner.max_threads
            && state.idle == 0
            && state.running.len() >= state.threads
            && state.running.values().all(|r| r.stuck)
        {
            let mut stuck: Vec<String> = state.running.values().map(|r| r.activity.get()).collect();
            stuck.sort();
            return Err(PoolError::Full {
                pool: inner.name.clone(),
                stuck,
            });
        }
        let id = state.next_id;
        state.next_id += 1;
        let queued_at = Instant::now();
        state.queue.push_back(Job {
            id,
            queued_at,
            deadline,
            activity: Activity(Arc::new(Mutex::new(label))),
            answer,
            run,
        });
        inner.queued.fetch_add(1, Ordering::SeqCst);
        state.recent_jobs = true;
        if inner.host == Host::Runtime
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            state.runtime = Some(runtime);
        }
        // The monitor starts a thread for a job that waited [`GROW_AFTER`]: when it wakes.
        let mut monitor_at = deadline;
        let mut kick = None;
        if state.short_of_threads(inner.max_threads) {
            if state.threads == 0 {
                if let Err(e) = grow(inner, &mut state) {
                    state.queue.retain(|j| j.id != id);
                    inner.queued.store(state.queue.len(), Ordering::SeqCst);
                    return Err(PoolError::Unavailable(format!(
                        "could not start a thread: {e}"
                    )));
                }
            } else {
                let grow_at = queued_at + GROW_AFTER;
                monitor_at = Some(monitor_at.map_or(grow_at, |d| d.min(grow_at)));
            }
        } else if state.sleeping > 0 && state.queue.len() > usize::from(state.spinning) {
            // A spinning thread takes the first queued job without being told; a sleeping
            // one must be woken for any beyond it. From a task, the wake-up waits for the
            // runtime's queued tasks ([`Kick`]): the jobs they submit meanwhile share it.
            match (wake, tokio::runtime::Handle::try_current()) {
                (Wake::Now, _) => inner.wake_one(),
                _ if state.kick_pending => {}
                // Only where the sleeping threads are the runtime's: one of those looks at the
                // queue every [`BORROWED_LINGER`] anyway, so if the runtime cannot run the kick
                // (its threads all blocked), the job still starts that soon.
                (Wake::Deferred, Ok(runtime)) if inner.host == Host::Runtime => {
                    state.kick_pending = true;
                    kick = Some((runtime, Kick(inner.clone())));
                }
                _ => inner.wake_one(),
            }
        }
        if let Some(wake_at) = monitor_at {
            if !state.monitor {
                let monitor = inner.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("dsh-{}-deadlines", inner.name))
                    .spawn(move || watch(&monitor));
                match spawned {
                    Ok(_) => state.monitor = true,
                    Err(e) => {
                        // Without the monitor no deadline would be kept: refuse rather
                        // than wait forever.
                        state.queue.retain(|j| j.id != id);
                        inner.queued.store(state.queue.len(), Ordering::SeqCst);
                        return Err(PoolError::Unavailable(format!(
                            "could not start the deadline monitor: {e}"
                        )));
                    }
                }
            }
            if state.monitor_wake.is_none_or(|w| wake_at < w) {
                inner.watch.notify_one();
            }
        }
        drop(state);
        if let Some((runtime, kick)) = kick {
            // Spawned outside the lock: a runtime that is shutting down drops the task, and
            // with it the kick, at once.
            drop(runtime.spawn(async move {
                tokio::task::yield_now().await;
                drop(kick);
            }));
        }
        Ok(())
    }
}

/// Whether a submitted job may wait for a [`Kick`] to wake a thread for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// The caller is a task: wake a thread once the runtime has run the tasks queued now.
    Deferred,
    /// The caller blocks its thread until the answer: wake a thread now.
    Now,
}

/// Wakes as many sleeping threads as there are queued jobs no spinning thread will take.
/// Sent by [`BlockingPool::run`] of a pool on the runtime ([`BlockingPool::on_runtime`]) as
/// a task that first yields, so the jobs that the
/// runtime's other ready tasks submit meanwhile share one wake-up: a stream of quick jobs
/// from many calls costs a few wake-ups instead of one each. It wakes when dropped, so a
/// runtime that shuts down before running it still wakes the threads.
struct Kick(Arc<Inner>);

impl Drop for Kick {
    fn drop(&mut self) {
        let inner = &self.0;
        let mut state = inner.state();
        state.kick_pending = false;
        let waiting = state
            .queue
            .len()
            .saturating_sub(usize::from(state.spinning));
        for _ in 0..waiting.min(state.sleeping) {
            inner.wake_one();
        }
    }
}

/// Starts one more thread for the pool: one of the runtime's blocking pool
/// ([`Host::Runtime`], when a runtime was seen), else one of its own.
fn grow(inner: &Arc<Inner>, state: &mut State) -> std::io::Result<()> {
    state.threads += 1;
    state.starting += 1;
    let worker = inner.clone();
    let runtime = match inner.host {
        Host::Runtime => state.runtime.clone(),
        Host::Own => None,
    };
    let spawned = match runtime {
        Some(runtime) => {
            // Given back soon after no job waits: tokio's threads are shared.
            drop(runtime.spawn_blocking(move || work(&worker, false)));
            Ok(())
        }
        None => std::thread::Builder::new()
            .name(format!("dsh-{}", inner.name))
            .spawn(move || work(&worker, true))
            .map(drop),
    };
    if spawned.is_err() {
        state.threads -= 1;
        state.starting -= 1;
    }
    spawned
}

/// A worker thread: runs queued jobs until idle for [`IDLE_EXIT`] (when it may `linger`;
/// otherwise [`BORROWED_LINGER`]) or the pool closes. Between jobs it first spins for
/// a window learnt from earlier spins ([`crate::spin`]; one thread of the process at a time,
/// and only while few callers wait, see [`SPIN_CALLERS`]), so that a job submitted soon after the last
/// one is taken without a wake-up.
fn work(inner: &Inner, linger: bool) {
    let idle_exit = if linger { IDLE_EXIT } else { BORROWED_LINGER };
    let mut state = inner.state();
    state.starting -= 1;
    loop {
        if let Some(job) = state.queue.pop_front() {
            inner.queued.fetch_sub(1, Ordering::SeqCst);
            if job.answer.answered() {
                continue; // Timed out while queued: it never runs.
            }
            state.running.insert(
                job.id,
                Running {
                    deadline: job.deadline,
                    activity: job.activity.clone(),
                    answer: job.answer.clone(),
                    stuck: false,
                },
            );
            drop(state);
            (job.run)(&job.activity);
            state = inner.state();
            state.running.remove(&job.id);
            continue;
        }
        if state.closed {
            break;
        }
        state.idle += 1;
        if !state.spinning && inner.callers.load(Ordering::Relaxed) <= SPIN_CALLERS {
            let window = inner.spin.window();
            if !window.is_zero()
                && let Some(turn) = SpinTurn::take()
            {
                state.spinning = true;
                drop(state);
                let hit = spin_for_work(inner, window);
                drop(turn);
                inner.spin.record(window, hit);
                state = inner.state();
                state.spinning = false;
                if !state.queue.is_empty() || state.closed {
                    state.idle -= 1;
                    continue;
                }
            }
        }
        state.sleeping += 1;
        let (next, waited) = inner
            .work
            .wait_timeout(state, idle_exit)
            .unwrap_or_else(|e| e.into_inner());
        state = next;
        state.sleeping -= 1;
        state.idle -= 1;
        if waited.timed_out() && state.queue.is_empty() {
            break;
        }
    }
    state.threads -= 1;
}

/// Spins for at most `window` until a job is queued; true if one was.
fn spin_for_work(inner: &Inner, window: Duration) -> bool {
    let until = Instant::now() + window;
    loop {
        for _ in 0..64 {
            if inner.queued.load(Ordering::SeqCst) > 0 {
                return true;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= until {
            return false;
        }
    }
}

/// The monitor thread: answers every job whose deadline passed, marks the threads still
/// running one as stuck, and starts a thread for a job that waited [`GROW_AFTER`] while every
/// thread was busy.
fn watch(inner: &Arc<Inner>) {
    let mut state = inner.state();
    loop {
        let now = Instant::now();
        let mut expired: Vec<(Arc<dyn Answer>, bool)> = Vec::new();
        let mut next: Option<Instant> = None;
        if state.short_of_threads(inner.max_threads) {
            // The oldest job not yet taken: it has waited longest.
            let waiting = state.queue.len() - state.idle - state.starting;
            if let Some(oldest) = state
                .queue
                .iter()
                .filter(|j| !j.answer.answered())
                .map(|j| j.queued_at)
                .min()
            {
                let grow_at = oldest + GROW_AFTER;
                if grow_at > now {
                    next = Some(grow_at);
                } else if let Err(e) = grow(inner, &mut state) {
                    tracing::warn!(pool = %inner.name, error = %e, waiting, "could not start another thread");
                    next = Some(now + GROW_AFTER);
                } else {
                    continue;
                }
            }
        }
        for job in &state.queue {
            match job.deadline {
                Some(d) if d <= now => expired.push((job.answer.clone(), false)),
                Some(d) if !job.answer.answered() => next = Some(next.map_or(d, |n| n.min(d))),
                _ => {}
            }
        }
        for running in state.running.values_mut() {
            match running.deadline {
                Some(d) if d <= now && !running.stuck => {
                    running.stuck = true;
                    expired.push((running.answer.clone(), true));
                }
                Some(d) if d > now => next = Some(next.map_or(d, |n| n.min(d))),
                _ => {}
            }
        }
        if !expired.is_empty() {
            drop(state);
            for (answer, started) in expired {
                if answer.expire(started) && started {
                    tracing::warn!(
                        "a job of a blocking pool outlived its deadline; its thread is abandoned"
                    );
                }
            }
            state = inner.state();
            continue;
        }
        if state.closed && state.running.is_empty() && state.queue.is_empty() {
            state.monitor = false;
            return;
        }
        state.monitor_wake = next;
        state = match next {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                inner
                    .watch
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            // Nothing to watch now, but jobs came lately: look again after a tick, so that the
            // next jobs need not wake this thread.
            None if state.recent_jobs && !state.closed => {
                state.recent_jobs = false;
                state.monitor_wake = Some(Instant::now() + MONITOR_TICK);
                inner
                    .watch
                    .wait_timeout(state, MONITOR_TICK)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            // Nothing to watch: wait to be told (a new job, or the pool closing). A closed
            // pool with stuck threads is looked at again now and then, to end this thread.
            None if state.closed => {
                inner
                    .watch
                    .wait_timeout(state, IDLE_EXIT)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => inner.watch.wait(state).unwrap_or_else(|e| e.into_inner()),
        };
        state.monitor_wake = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[tokio::test]
    async fn jobs_answer_and_panics_are_caught() {
        let pool = BlockingPool::new("t", 2);
        assert_eq!(pool.run("one", None, |_| 1).await, Ok(1));
        let panicked = pool
            .run("boom", Some(Duration::from_secs(5)), |_| -> u8 {
                panic!("pool job exploded")
            })
            .await;
        assert!(
            matches!(&panicked, Err(PoolError::Panicked(m)) if m.contains("exploded")),
            "{panicked:?}"
        );
        assert_eq!(
            pool.run_blocking("two", Some(Duration::from_secs(5)), |_| 2),
            Ok(2)
        );
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_paused_clock_does_not_time_jobs_out() {
        for pool in [BlockingPool::new("t", 1), BlockingPool::on_runtime("t", 1)] {
            let slow = pool
                .run("nap", Some(Duration::from_secs(5)), |_| {
                    std::thread::sleep(Duration::from_millis(50));
                    "rested"
                })
                .await;
            assert_eq!(slow, Ok("rested"));
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn on_the_runtime_a_paused_clock_waits_for_the_job() {
        let pool = BlockingPool::on_runtime("t", 1);
        let before = tokio::time::Instant::now();
        let timer = tokio::spawn(tokio::time::sleep(Duration::from_secs(60)));
        pool.run("nap", Some(Duration::from_secs(5)), |_| {
            std::thread::sleep(Duration::from_millis(50))
        })
        .await
        .unwrap();
        assert!(
            before.elapsed() < Duration::from_secs(60),
            "the clock jumped to the next timer while the job ran"
        );
        timer.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn on_the_runtime_stuck_jobs_hold_at_most_their_share_of_it() {
        let pool = BlockingPool::on_runtime("t", 2);
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        for _ in 0..2 {
            let held = held.clone();
            let r = pool
                .run("stuck", Some(Duration::from_millis(20)), move |_| {
                    let _ = held.lock().unwrap().recv();
                })
                .await;
            assert_eq!(r, Err(PoolError::TimedOut { started: true }));
        }
        assert!(matches!(
            pool.run("next", Some(Duration::from_secs(5)), |_| ()).await,
            Err(PoolError::Full { .. })
        ));
        drop(release);
    }

    #[tokio::test]
    async fn when_every_thread_is_stuck_new_jobs_are_refused_at_once_naming_them() {
        let pool = BlockingPool::new("t", 2);
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        for n in 0..2 {
            let held = held.clone();
            let r = pool
                .run(
                    format!("stuck {n}"),
                    Some(Duration::from_millis(20)),
                    move |a| {
                        a.set(format!("stuck job {n}"));
                        let _ = held.lock().unwrap().recv();
                    },
                )
                .await;
            assert_eq!(r, Err(PoolError::TimedOut { started: true }));
        }
        let refused = pool.run("next", Some(Duration::from_secs(5)), |_| ()).await;
        match refused {
            Err(PoolError::Full { stuck, .. }) => {
                assert_eq!(stuck, vec!["stuck job 0", "stuck job 1"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(pool.stuck().len(), 2);
        // Once they return, the pool works again.
        release.send(()).unwrap();
        release.send(()).unwrap();
        let mut ok = false;
        for _ in 0..500 {
            if pool
                .run("again", Some(Duration::from_secs(5)), |_| ())
                .await
                == Ok(())
            {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(ok, "the pool did not recover");
    }

    #[tokio::test]
    async fn a_burst_of_quick_jobs_runs_on_a_few_threads_not_one_per_job() {
        let pool = BlockingPool::new("t", 64);
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let jobs: Vec<_> = (0..200)
            .map(|n| {
                let (pool, threads) = (pool.clone(), threads.clone());
                tokio::spawn(async move {
                    pool.run("quick", Some(Duration::from_secs(30)), move |_| {
                        threads.lock().unwrap().insert(std::thread::current().id());
                        n
                    })
                    .await
                })
            })
            .collect();
        for (n, job) in jobs.into_iter().enumerate() {
            assert_eq!(job.await.unwrap(), Ok(n));
        }
        let used = threads.lock().unwrap().len();
        // One thread per queued job would be 64 (the most the pool may start).
        assert!(used < 32, "200 quick jobs ran on {used} threads");
    }

    /// A pool on the runtime whose threads and callers never spin (so its thread sleeps).
    fn on_runtime_without_spinning(max_threads: usize) -> BlockingPool {
        BlockingPool::hosted_spinning(
            "t".into(),
            max_threads,
            Host::Runtime,
            AdaptiveSpin::off(),
            AdaptiveSpin::off(),
        )
    }

    /// True once the pool's one thread sleeps, waiting for work, within a millisecond (a
    /// borrowed thread sleeps two before it goes back to the runtime).
    fn its_thread_sleeps(pool: &BlockingPool) -> bool {
        let until = Instant::now() + Duration::from_millis(1);
        while Instant::now() < until {
            if pool.handle.0.state().sleeping == 1 {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    #[test]
    fn a_free_thread_spins_only_while_few_callers_wait() {
        let pool = BlockingPool::hosted_spinning(
            "t".into(),
            1,
            Host::Own,
            AdaptiveSpin::fixed(Duration::from_millis(20)),
            AdaptiveSpin::off(),
        );
        let callers = &pool.handle.0.callers;
        // One caller (as in a stream of calls one at a time): after its job the thread spins
        // for the next one instead of sleeping. The spin turn is the process's: a pool of
        // another test may hold it for a moment, so this is tried a few times.
        let spun = (0..20).any(|_| {
            let (_one, _) = Waiting::enter(callers);
            assert_eq!(pool.run_blocking("one", None, |_| 1), Ok(1));
            !its_thread_sleeps(&pool)
        });
        assert!(spun, "the thread never spun for a lone caller");
        // Many callers waiting (a burst): the thread sleeps at once, leaving the cores to them.
        let many: Vec<_> = (0..=SPIN_CALLERS)
            .map(|_| Waiting::enter(callers).0)
            .collect();
        for _ in 0..5 {
            assert_eq!(pool.run_blocking("burst", None, |_| 2), Ok(2));
            assert!(
                its_thread_sleeps(&pool),
                "the thread spun with {} callers waiting",
                many.len()
            );
        }
        drop(many);
        assert_eq!(callers.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn jobs_submitted_together_share_a_wake_up() {
        let pool = on_runtime_without_spinning(4);
        for _ in 0..100 {
            assert_eq!(pool.run("first", None, |_| 1).await, Ok(1));
            if !its_thread_sleeps(&pool) {
                continue;
            }
            let before = pool.handle.0.wakes.load(Ordering::Relaxed);
            // A hundred calls reach their user code in one turn of the runtime.
            let jobs: Vec<_> = (0..100)
                .map(|n| {
                    let pool = pool.clone();
                    tokio::spawn(async move { pool.run("quick", None, move |_| n).await })
                })
                .collect();
            for (n, job) in jobs.into_iter().enumerate() {
                assert_eq!(job.await.unwrap(), Ok(n));
            }
            let wakes = pool.handle.0.wakes.load(Ordering::Relaxed) - before;
            // One wake-up per job would be a hundred.
            assert!(
                wakes <= 2,
                "100 jobs submitted together took {wakes} wake-ups"
            );
            return;
        }
        panic!("the pool's thread never slept between jobs");
    }

    #[test]
    fn a_wake_up_left_to_a_runtime_that_cannot_run_it_still_comes_soon() {
        let pool = on_runtime_without_spinning(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let waited = runtime.block_on(async move {
            tokio::spawn(async move {
                for _ in 0..100 {
                    // A borrowed thread that just finished a job sleeps, waiting for the next.
                    assert_eq!(pool.run("first", None, |_| 1).await, Ok(1));
                    let (ran, ran_rx) = std::sync::mpsc::channel();
                    let submitted = Instant::now();
                    let job = pool.run("next", None, move |_| ran.send(Instant::now()).unwrap());
                    let mut job = std::pin::pin!(job);
                    assert!(futures::poll!(job.as_mut()).is_pending());
                    if !pool.handle.0.state().kick_pending {
                        // The thread had gone back already; the job got a thread at once.
                        let _ = job.await;
                        continue;
                    }
                    // The runtime's only worker blocks: the kick cannot run.
                    std::thread::sleep(Duration::from_millis(1_000));
                    let ran = ran_rx.try_recv().expect("the job had not run after 1 s");
                    return Some(ran.duration_since(submitted));
                }
                None
            })
            .await
            .unwrap()
        });
        let waited = waited.expect("the wake-up was never left to the runtime");
        assert!(
            waited < Duration::from_millis(500),
            "the job waited {waited:?} for a runtime that could not run its wake-up"
        );
    }

    #[tokio::test]
    async fn a_queued_job_past_its_deadline_never_runs() {
        let pool = BlockingPool::new("t", 1);
        let (release, held) = mpsc::channel::<()>();
        let busy = pool.clone();
        let first = tokio::spawn(async move {
            busy.run("busy", Some(Duration::from_secs(30)), move |_| {
                let _ = held.recv();
            })
            .await
        });
        while pool.handle.0.state().running.is_empty() {
            tokio::task::yield_now().await;
        }
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let queued = pool
            .run("queued", Some(Duration::from_millis(20)), move |_| {
                flag.store(true, std::sync::atomic::Ordering::SeqCst)
            })
            .await;
        assert_eq!(queued, Err(PoolError::TimedOut { started: false }));
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), Ok(()));
        assert_eq!(pool.run("after", None, |_| 3).await, Ok(3));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
