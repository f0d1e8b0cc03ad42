//! The engine thread: one QuickJS runtime per script, with hard limits.
//!
//! Each script gets a fresh runtime on a thread of its own, created on that thread (QuickJS
//! measures its stack limit from the stack of the thread that created the runtime, so the
//! thread's stack is sized from the limit). Nothing survives a script: a memory bomb or a
//! runaway recursion dies with its runtime. The runtime has QuickJS's core intrinsics only:
//! no module loader, no timers, no `std`/`os`, so the script reaches the world through
//! `tools` alone.
//!
//! Sub-calls: `tools.x(args)` makes a promise, sends the request to the body's task and
//! returns; several requests can be in flight at once (`Promise.all`). When nothing is left to
//! run, the thread blocks on its own channel for the next reply (up to the deadline), settles
//! that promise and runs the jobs it unlocked. The interrupt handler stops JavaScript that
//! keeps running: it fires once the deadline passed, the call's signal fired, the body's task
//! that reads the script's requests is gone, or the script went over its sub-call limit.

mod thrown;

use crate::bridge::{EngineReport, HostMsg, ScriptEnd, Stop, SubCallRequest};
use crate::limits::CodeLimits;
use dsh_core::Signal;
use dsh_core::content::truncate_at_char_boundary;
use rquickjs::context::EvalOptions;
use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Error as JsError, Exception, Function, Runtime, Value as JsValue};
use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;
use thrown::Thrown;
use tokio::sync::{mpsc, oneshot};

/// The file name QuickJS gives the script in locations (`run_code:3:9`).
pub(crate) const SCRIPT_NAME: &str = "run_code";

const PRELUDE: &str = include_str!("prelude.js");

/// Rust frames (ours and rquickjs's) that run on the engine thread besides JavaScript's.
const THREAD_STACK_MARGIN: usize = 1 << 20;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Engine threads alive right now (a script running or winding down).
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

/// Everything a script runs with.
pub(crate) struct EngineJob {
    pub code: String,
    pub tools: Vec<String>,
    pub limits: CodeLimits,
    pub deadline: Instant,
    pub signal: Signal,
    pub to_host: mpsc::UnboundedSender<SubCallRequest>,
    pub from_host: Receiver<HostMsg>,
}

/// Starts the script on its own thread; the answer comes when it is over and its runtime is
/// freed.
pub(crate) fn spawn(job: EngineJob) -> std::io::Result<oneshot::Receiver<EngineReport>> {
    let (done, answer) = oneshot::channel();
    let stack = job
        .limits
        .stack_bytes
        .saturating_mul(2)
        .saturating_add(THREAD_STACK_MARGIN);
    std::thread::Builder::new()
        .name("dsh-run-code".into())
        .stack_size(stack)
        .spawn(move || {
            let _live = LiveGuard::enter();
            let report =
                std::panic::catch_unwind(AssertUnwindSafe(|| run(job))).unwrap_or_else(|_| {
                    EngineReport::bare(ScriptEnd::Internal("the engine panicked".into()))
                });
            let _ = done.send(report);
        })?;
    Ok(answer)
}

/// The console: kept up to a cap, the rest counted.
struct Console {
    text: String,
    dropped: usize,
    cap: usize,
}

impl Console {
    fn line(&mut self, line: &str) {
        let needed = line.len() + usize::from(!self.text.is_empty());
        let room = self.cap.saturating_sub(self.text.len());
        if self.dropped == 0 && needed <= room {
            if !self.text.is_empty() {
                self.text.push('\n');
            }
            self.text.push_str(line);
            return;
        }
        if self.dropped == 0 && room > 1 {
            if !self.text.is_empty() {
                self.text.push('\n');
            }
            let kept = truncate_at_char_boundary(line, room - 1);
            self.text.push_str(kept);
            self.dropped += line.len() - kept.len();
        } else {
            self.dropped += needed;
        }
    }
}

/// What the interrupt handler, the bridge functions and the loop share on the engine thread.
struct RunState {
    deadline: Instant,
    signal: Signal,
    stop: Cell<Option<Stop>>,
    console: RefCell<Console>,
    made: Cell<u32>,
    waiting: Cell<usize>,
    max_subcalls: usize,
    to_host: mpsc::UnboundedSender<SubCallRequest>,
}

impl RunState {
    /// Why the script must stop now, if it must. Sticky: the first reason stays.
    fn check(&self) -> Option<Stop> {
        if let Some(stop) = self.stop.get() {
            return Some(stop);
        }
        // A body dropped without its signal firing (its call actor killed, say) closes the
        // channel back to it: nobody will read what the script does, so it stops too.
        let stop = if self.signal.is_cancelled() || self.to_host.is_closed() {
            Some(Stop::Cancelled)
        } else if Instant::now() >= self.deadline {
            Some(Stop::Deadline)
        } else {
            None
        };
        self.stop.set(stop);
        stop
    }

    fn send<'js>(&self, ctx: &Ctx<'js>, name: String, args: String) -> rquickjs::Result<u32> {
        if self.check().is_some() {
            return Err(Exception::throw_internal(ctx, "run_code is stopping"));
        }
        if self.made.get() as usize >= self.max_subcalls {
            self.stop.set(Some(Stop::SubcallLimit));
            return Err(Exception::throw_range(
                ctx,
                &format!(
                    "sub-call limit reached: a script may make at most {} sub-calls",
                    self.max_subcalls
                ),
            ));
        }
        let arguments = serde_json::from_str(&args).map_err(|e| {
            Exception::throw_type(
                ctx,
                &format!("the arguments of tools.{name} are not JSON: {e}"),
            )
        })?;
        let id = self.made.get();
        if self
            .to_host
            .send(SubCallRequest {
                id,
                name,
                arguments,
            })
            .is_err()
        {
            self.stop.set(Some(Stop::Cancelled));
            return Err(Exception::throw_internal(ctx, "run_code is stopping"));
        }
        self.made.set(id + 1);
        self.waiting.set(self.waiting.get() + 1);
        Ok(id)
    }
}

fn run(job: EngineJob) -> EngineReport {
    let state = Rc::new(RunState {
        deadline: job.deadline,
        signal: job.signal.clone(),
        stop: Cell::new(None),
        console: RefCell::new(Console {
            text: String::new(),
            dropped: 0,
            cap: job.limits.max_console_bytes,
        }),
        made: Cell::new(0),
        waiting: Cell::new(0),
        max_subcalls: job.limits.max_subcalls,
        to_host: job.to_host.clone(),
    });
    let end = match Runtime::new() {
        Ok(rt) => {
            rt.set_memory_limit(job.limits.memory_bytes);
            rt.set_max_stack_size(job.limits.stack_bytes);
            let watch = state.clone();
            rt.set_interrupt_handler(Some(Box::new(move || watch.check().is_some())));
            let end = match Context::full(&rt) {
                Ok(context) => context.with(|ctx| drive(&ctx, &state, &job)),
                Err(e) => ScriptEnd::Internal(format!("could not start the engine: {e}")),
            };
            // The closures the script held keep clones of `state`; they go with the runtime.
            drop(rt);
            end
        }
        Err(e) => ScriptEnd::Internal(format!("could not start the engine: {e}")),
    };
    let console = state.console.borrow();
    EngineReport {
        end,
        console: console.text.clone(),
        console_dropped: console.dropped,
    }
}

fn eval_options(filename: &str) -> EvalOptions {
    let mut options = EvalOptions::default();
    options.global = true;
    options.strict = false;
    options.backtrace_barrier = true;
    options.filename = Some(filename.to_string());
    options
}

/// Installs `tools`, `console` and the error classes; answers the function that settles a
/// sub-call's promise.
fn install<'js>(
    ctx: &Ctx<'js>,
    state: &Rc<RunState>,
    tools: &[String],
) -> rquickjs::Result<Function<'js>> {
    let factory: Function = ctx.eval_with_options(PRELUDE, eval_options("dsh-prelude"))?;
    let sender = state.clone();
    let send = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, name: String, args: String| sender.send(&ctx, name, args),
    )?;
    let printer = state.clone();
    let print = Function::new(ctx.clone(), move |line: String| {
        printer.console.borrow_mut().line(&line);
    })?;
    factory.call((send, print, tools.to_vec()))
}

/// The exception the engine holds now, as a script end (the stop reason wins: an interrupt
/// surfaces as an exception too).
fn failed(ctx: &Ctx<'_>, state: &RunState) -> ScriptEnd {
    let thrown = Thrown::read(&ctx.catch());
    match state.check() {
        Some(stop) => ScriptEnd::Stopped(stop),
        None => thrown.classify(),
    }
}

fn drive<'js>(ctx: &Ctx<'js>, state: &Rc<RunState>, job: &EngineJob) -> ScriptEnd {
    let settle = match install(ctx, state, &job.tools) {
        Ok(f) => f,
        Err(JsError::Exception) => {
            let why = Thrown::read(&ctx.catch()).text();
            return ScriptEnd::Internal(format!("could not prepare the script's globals: {why}"));
        }
        Err(e) => {
            return ScriptEnd::Internal(format!("could not prepare the script's globals: {e}"));
        }
    };
    // The wrapper is a line of its own, so the model's line N is line N+1 here.
    let source = format!("(async () => {{\n{}\n}})()", job.code);
    let started: JsValue = match ctx.eval_with_options(source, eval_options(SCRIPT_NAME)) {
        Ok(v) => v,
        Err(JsError::Exception) => {
            let thrown = Thrown::read(&ctx.catch());
            if let Some(stop) = state.check() {
                return ScriptEnd::Stopped(stop);
            }
            return if thrown.is_syntax_error() {
                thrown.syntax(&job.code)
            } else {
                thrown.classify()
            };
        }
        Err(e) => return ScriptEnd::Internal(e.to_string()),
    };
    let Some(promise) = started.as_promise().cloned() else {
        // Only code that closed the wrapper itself gets here; its last value is the result.
        return returned(ctx, state, started, job.limits.max_result_bytes);
    };
    loop {
        while ctx.execute_pending_job() {
            if state.stop.get().is_some() {
                break;
            }
        }
        if let Some(stop) = state.check() {
            return ScriptEnd::Stopped(stop);
        }
        match promise.state() {
            PromiseState::Resolved => {
                return match promise.result::<JsValue>() {
                    Some(Ok(value)) => returned(ctx, state, value, job.limits.max_result_bytes),
                    _ => failed(ctx, state),
                };
            }
            PromiseState::Rejected => {
                let _ = promise.result::<JsValue>();
                return failed(ctx, state);
            }
            PromiseState::Pending => {}
        }
        if state.waiting.get() == 0 {
            // A job that failed (out of memory while settling, say) leaves its exception.
            let left = ctx.catch();
            if left.is_object() {
                return Thrown::read(&left).classify();
            }
            return ScriptEnd::Stalled;
        }
        let wait = state.deadline.saturating_duration_since(Instant::now());
        match job.from_host.recv_timeout(wait) {
            Ok(HostMsg::Reply { id, json }) => {
                state.waiting.set(state.waiting.get().saturating_sub(1));
                if let Err(e) = settle.call::<_, ()>((id, json)) {
                    return match e {
                        JsError::Exception => failed(ctx, state),
                        other => ScriptEnd::Internal(other.to_string()),
                    };
                }
            }
            Ok(HostMsg::Wake) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return ScriptEnd::Stopped(Stop::Cancelled),
        }
    }
}

/// The script's return value as JSON, within the size limit.
fn returned<'js>(
    ctx: &Ctx<'js>,
    state: &RunState,
    value: JsValue<'js>,
    max_bytes: usize,
) -> ScriptEnd {
    let text = match ctx.json_stringify(value) {
        Ok(None) => return ScriptEnd::Returned(serde_json::Value::Null),
        Ok(Some(s)) => s.to_string(),
        Err(JsError::Exception) => {
            return match failed(ctx, state) {
                ScriptEnd::Threw(why) => ScriptEnd::BadResult(why),
                other => other,
            };
        }
        Err(e) => return ScriptEnd::BadResult(e.to_string()),
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => return ScriptEnd::BadResult(e.to_string()),
    };
    if text.len() > max_bytes {
        return ScriptEnd::ResultTooLarge(text.len());
    }
    match serde_json::from_str(&text) {
        Ok(v) => ScriptEnd::Returned(v),
        Err(e) => ScriptEnd::BadResult(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_keeps_output_up_to_its_cap_then_counts_what_it_drops() {
        let mut c = Console {
            text: String::new(),
            dropped: 0,
            cap: 10,
        };
        c.line("abc");
        c.line("defghijkl");
        c.line("zz");
        assert_eq!(c.text, "abc\ndefghi");
        assert_eq!(
            c.dropped,
            3 + 3,
            "the cut line's tail, then the whole next line"
        );
    }
}
