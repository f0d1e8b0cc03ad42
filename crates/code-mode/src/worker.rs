//! The worker: the process one script runs in.
//!
//! QuickJS polls its interrupt handler only every 10,000 calls, and never inside a long
//! built-in (a BigInt to text, a sort, a `forEach` over slow natives), so a script on a thread
//! of ours could run for an hour after its call ended. In a process of its own it can always
//! be stopped: the body kills it. The worker is the embedding program itself, run again with
//! [`WORKER_ARG`]: the program calls [`worker_main_if_requested`] first thing in `main`.
//!
//! The worker reads its job from stdin, runs the script on a thread sized for the stack
//! limit, writes sub-call requests and its report to stdout, and exits. A reader thread keeps
//! reading stdin: replies go to the engine, a stop sets the flag its interrupt handler reads,
//! and the end of stdin (the body, or the whole parent, is gone) ends the process at once. A
//! last watchdog ends it a little after its own deadline, should the parent be unable to.

use crate::bridge::{EngineReport, FromWorker, HostMsg, PROTOCOL, ScriptEnd, ToWorker};
use crate::engine::{self, EngineJob, Outbox, StopFlag, THREAD_STACK_MARGIN};
use std::io::{BufRead, Write};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The first argument that makes the embedding program a script worker (see
/// [`worker_main_if_requested`]).
pub const WORKER_ARG: &str = "--dsh-code-mode-worker";

/// How long after its own deadline a worker ends itself if nobody stopped it: the body kills
/// it well before; this is for a parent that cannot.
const SELF_GRACE: Duration = Duration::from_secs(2);

/// Exit codes of a worker.
const EXIT_DONE: i32 = 0;
const EXIT_PARENT_GONE: i32 = 0;
const EXIT_BAD_JOB: i32 = 2;
const EXIT_OVERTIME: i32 = 3;

static HOOKED: AtomicBool = AtomicBool::new(false);

/// Runs this process as a script worker if it was started as one (its first argument is
/// [`WORKER_ARG`]), and never returns then; otherwise returns at once, and from then on
/// `run_code` runs its scripts in this same program started as a worker.
///
/// Call it first thing in `main`, before parsing arguments or starting anything:
///
/// ```no_run
/// // The first line of `main`:
/// dsh_code_mode::worker_main_if_requested();
/// // ... the program as usual.
/// ```
pub fn worker_main_if_requested() {
    if std::env::args_os().nth(1).is_some_and(|a| a == WORKER_ARG) {
        std::process::exit(worker_main());
    }
    HOOKED.store(true, Ordering::SeqCst);
}

/// Whether this program called [`worker_main_if_requested`], so that it can be its own
/// worker.
pub(crate) fn hooked() -> bool {
    HOOKED.load(Ordering::SeqCst)
}

/// Writes one message as a line to stdout; false when nobody reads it any more.
fn write_message(message: &FromWorker) -> bool {
    let Ok(mut line) = serde_json::to_vec(message) else {
        return false;
    };
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line).and_then(|()| out.flush()).is_ok()
}

/// Reads one message; `None` at the end of stdin or on a line that is not one.
fn read_message(input: &mut impl BufRead) -> Option<ToWorker> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => serde_json::from_str(&line).ok(),
    }
}

/// Runs one script from this process's stdin, answering on its stdout, and answers the exit
/// code. [`worker_main_if_requested`] calls it; a program made only to be a worker (as this
/// crate's `dsh-code-worker`) calls it from `main`.
///
/// Started with `DSH_CODE_MODE_FORK_SERVER` set (as `run_code` does), it is a fork server
/// instead: it forks one fresh worker per script (see the crate's documentation).
pub fn worker_main() -> i32 {
    if let Some(code) = crate::fork_server::serve_if_asked() {
        return code;
    }
    run_worker()
}

/// The stack of the engine's thread for a stack limit: the script's, twice (QuickJS's own
/// frames), and Rust's.
fn engine_stack(stack_bytes: usize) -> usize {
    stack_bytes
        .saturating_mul(2)
        .saturating_add(THREAD_STACK_MARGIN)
}

/// What the engine's thread is given once the job came.
struct Start {
    job: EngineJob,
}

/// Starts the engine's thread: it runs the job it is given, reporting and saying it is
/// done; started with `warm`, it makes the runtime first, while the job is awaited.
fn engine_thread(
    stack: usize,
    warm: bool,
    reporter: Outbox,
    done: std::sync::mpsc::Sender<()>,
) -> std::io::Result<std::sync::mpsc::Sender<Start>> {
    let (give, given) = std::sync::mpsc::channel::<Start>();
    std::thread::Builder::new()
        .name("dsh-run-code".into())
        .stack_size(stack)
        .spawn(move || {
            let warm = if warm { engine::Warm::new().ok() } else { None };
            // No job (another thread got it, or the worker is ending): nothing to run.
            let Ok(Start { job }) = given.recv() else {
                return;
            };
            let report = std::panic::catch_unwind(AssertUnwindSafe(|| engine::run(job, warm)))
                .unwrap_or_else(|_| {
                    EngineReport::bare(ScriptEnd::Internal("the engine panicked".into()))
                });
            reporter(&FromWorker::Done(report));
            let _ = done.send(());
        })?;
    Ok(give)
}

/// The worker itself: one script from stdin, answered on stdout.
pub(crate) fn run_worker() -> i32 {
    let send: Outbox = Arc::new(write_message);
    // The engine's thread starts first and makes its runtime while the job is awaited, on a
    // stack for the default limits (a job that needs more gets a thread of its own).
    let (done, finished) = std::sync::mpsc::channel();
    let warm_stack = engine_stack(crate::CodeLimits::default().stack_bytes);
    let warm = engine_thread(warm_stack, true, send.clone(), done.clone()).ok();
    if !send(&FromWorker::Hello {
        protocol: PROTOCOL,
        forks: false,
    }) {
        return EXIT_PARENT_GONE;
    }
    // Stdin's buffer is shared, so each read locks it afresh: the reader thread goes on
    // where this read stopped.
    let job = match read_message(&mut std::io::stdin().lock()) {
        Some(ToWorker::Job(job)) => job,
        None => return EXIT_PARENT_GONE,
        Some(_) => return EXIT_BAD_JOB,
    };
    let deadline = Instant::now()
        .checked_add(Duration::from_millis(job.timeout_ms))
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600));
    let stop = Arc::new(StopFlag::default());
    let (to_engine, from_host) = std::sync::mpsc::channel();
    let flag = stop.clone();

    let stack = engine_stack(job.limits.stack_bytes);
    let start = Start {
        job: EngineJob {
            code: job.code,
            tools: job.tools,
            limits: job.limits,
            deadline,
            stop,
            send: send.clone(),
            from_host,
        },
    };
    let engine = match warm {
        Some(warm) if stack <= warm_stack => warm
            .send(start)
            .map_err(|_| std::io::Error::other("the engine's thread ended before its job came")),
        other => {
            // Ends the warm thread unused.
            drop(other);
            engine_thread(stack, false, send.clone(), done).and_then(|give| {
                give.send(start)
                    .map_err(|_| std::io::Error::other("the engine's thread ended at once"))
            })
        }
    };
    if let Err(e) = engine {
        send(&FromWorker::Done(EngineReport::bare(ScriptEnd::Internal(
            format!("could not start the engine's thread: {e}"),
        ))));
        return EXIT_DONE;
    }
    // The script starts first; the reader thread is started while it runs.
    let reader = std::thread::Builder::new()
        .name("dsh-code-reader".into())
        .spawn(move || {
            loop {
                match read_message(&mut std::io::stdin().lock()) {
                    Some(ToWorker::Reply { id, json }) => {
                        let _ = to_engine.send(HostMsg::Reply { id, json });
                    }
                    Some(ToWorker::Stop(why)) => {
                        flag.set(why);
                        let _ = to_engine.send(HostMsg::Wake);
                    }
                    Some(ToWorker::Job(_)) => {}
                    // Nobody is there to read what the script does: stop everything now.
                    None => std::process::exit(EXIT_PARENT_GONE),
                }
            }
        });
    if let Err(e) = reader {
        // The script runs already; this report is the one the body reads first, and the
        // process ends with it.
        send(&FromWorker::Done(EngineReport::bare(ScriptEnd::Internal(
            format!("could not start the worker's reader thread: {e}"),
        ))));
        std::process::exit(EXIT_DONE);
    }

    let left = deadline.saturating_duration_since(Instant::now()) + SELF_GRACE;
    match finished.recv_timeout(left) {
        Ok(()) => EXIT_DONE,
        Err(_) => EXIT_OVERTIME,
    }
}
