//! The engine: one QuickJS runtime for one script, with hard limits, in a worker process.
//!
//! The runtime is created on a thread of its own, whose stack is sized from the limit
//! (QuickJS measures its stack limit from the stack of the thread that created the runtime).
//! Nothing survives a script: the worker process runs one script and exits. The runtime has
//! QuickJS's core intrinsics only: no module loader, no timers, no `std`/`os`, so the script
//! reaches the world through `tools` alone.
//!
//! Sub-calls: `tools.x(args)` makes a promise, writes the request to the body and returns;
//! several requests can be in flight at once (`Promise.all`). When nothing is left to run,
//! the thread blocks on its channel for the next reply (up to the deadline), settles that
//! promise and runs the jobs it unlocked. The interrupt handler stops JavaScript that keeps
//! running: it fires once the deadline passed, the body said stop, or the script went over
//! its sub-call limit. QuickJS polls it only every 10,000 calls and never inside a long
//! built-in; what it cannot stop in time the body stops by killing the process.

mod thrown;

use crate::bridge::{
    EngineReport, FromWorker, HostMsg, JobLimits, ScriptEnd, Stop, SubCallRequest,
};
use dsh_core::MAX_ARGUMENT_BYTES;
use dsh_core::content::truncate_at_char_boundary;
use rquickjs::context::EvalOptions;
use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Error as JsError, Exception, Function, Runtime, Value as JsValue};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;
use thrown::Thrown;

/// The file name QuickJS gives the script in locations (`run_code:3:9`).
pub(crate) const SCRIPT_NAME: &str = "run_code";

const PRELUDE: &str = include_str!("prelude.js");

/// Rust frames (ours and rquickjs's) that run on the engine thread besides JavaScript's.
pub(crate) const THREAD_STACK_MARGIN: usize = 1 << 20;

/// The longest text of a thrown error or a compile error the report carries: what the model
/// needs to act on, not a megabyte a script threw.
const MAX_THROWN_BYTES: usize = 8 << 10;

/// A stop the body asked for, set from the worker's reader thread, read by the interrupt
/// handler.
#[derive(Debug, Default)]
pub(crate) struct StopFlag(AtomicU8);

impl StopFlag {
    pub(crate) fn set(&self, stop: Stop) {
        let code = match stop {
            Stop::Deadline => 1,
            Stop::Cancelled => 2,
            Stop::SubcallLimit => 3,
        };
        let _ = self
            .0
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn get(&self) -> Option<Stop> {
        match self.0.load(Ordering::SeqCst) {
            1 => Some(Stop::Deadline),
            2 => Some(Stop::Cancelled),
            3 => Some(Stop::SubcallLimit),
            _ => None,
        }
    }
}

/// Writes one message to the body; false when the body is gone.
pub(crate) type Outbox = Arc<dyn Fn(&FromWorker) -> bool + Send + Sync>;

/// Everything a script runs with.
pub(crate) struct EngineJob {
    pub code: String,
    pub tools: Vec<String>,
    pub limits: JobLimits,
    pub deadline: Instant,
    pub stop: Arc<StopFlag>,
    pub send: Outbox,
    pub from_host: Receiver<HostMsg>,
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
    asked: Arc<StopFlag>,
    stop: Cell<Option<Stop>>,
    console: RefCell<Console>,
    made: Cell<u32>,
    waiting: Cell<usize>,
    max_subcalls: usize,
    send: Outbox,
    memory: thrown::MemoryWitness,
}

impl RunState {
    /// Why the script must stop now, if it must. Sticky: the first reason stays.
    fn check(&self) -> Option<Stop> {
        if let Some(stop) = self.stop.get() {
            return Some(stop);
        }
        let stop = match self.asked.get() {
            Some(stop) => Some(stop),
            None if Instant::now() >= self.deadline => Some(Stop::Deadline),
            None => None,
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
        // Checked here, where the script can be told at once; nesting past what a reader
        // takes is the only way `JSON.stringify`'s text fails it.
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&args) {
            return Err(Exception::throw_type(
                ctx,
                &format!("the arguments of tools.{name} are not JSON: {e}"),
            ));
        }
        let id = self.made.get();
        let request = cut_arguments(id, name, args);
        if !(self.send)(&FromWorker::Call(request)) {
            self.stop.set(Some(Stop::Cancelled));
            return Err(Exception::throw_internal(ctx, "run_code is stopping"));
        }
        self.made.set(id + 1);
        self.waiting.set(self.waiting.get() + 1);
        Ok(id)
    }
}

/// Arguments longer than any call may carry are not sent whole: their first bytes are enough
/// for the pipeline to refuse them as oversized, naming their size.
fn cut_arguments(id: u32, name: String, mut arguments: String) -> SubCallRequest {
    let cut = arguments.len() > MAX_ARGUMENT_BYTES;
    if cut {
        let mut keep = MAX_ARGUMENT_BYTES + 1;
        while !arguments.is_char_boundary(keep) {
            keep += 1;
        }
        arguments.truncate(keep);
    }
    SubCallRequest {
        id,
        name,
        arguments,
        cut,
    }
}

/// A fresh runtime and context, made on the thread that will run the script while the
/// worker waits for its job (so the script does not wait for them). Nothing has run in it.
pub(crate) struct Warm {
    rt: Runtime,
    context: Context,
}

impl Warm {
    /// A runtime with QuickJS's core intrinsics, and its context.
    pub(crate) fn new() -> Result<Warm, String> {
        let rt = Runtime::new().map_err(|e| format!("could not start the engine: {e}"))?;
        let context = Context::full(&rt).map_err(|e| format!("could not start the engine: {e}"))?;
        Ok(Warm { rt, context })
    }
}

/// Runs the script to its end, on the calling thread (one sized for the stack limit), in
/// `warm` when it was made on this thread beforehand.
pub(crate) fn run(job: EngineJob, warm: Option<Warm>) -> EngineReport {
    let state = Rc::new(RunState {
        deadline: job.deadline,
        asked: job.stop.clone(),
        stop: Cell::new(None),
        console: RefCell::new(Console {
            text: String::new(),
            dropped: 0,
            cap: job.limits.max_console_bytes,
        }),
        made: Cell::new(0),
        waiting: Cell::new(0),
        max_subcalls: job.limits.max_subcalls,
        send: job.send.clone(),
        memory: thrown::MemoryWitness::new(job.limits.memory_bytes),
    });
    let warm = match warm {
        Some(warm) => Ok(warm),
        None => Warm::new(),
    };
    let end = match warm {
        Ok(Warm { rt, context }) => {
            rt.set_memory_limit(job.limits.memory_bytes);
            // Measured from here: this thread's stack as it is now.
            rt.set_max_stack_size(job.limits.stack_bytes);
            let watch = state.clone();
            rt.set_interrupt_handler(Some(Box::new(move || watch.check().is_some())));
            let end = context.with(|ctx| drive(&ctx, &state, &job));
            // The closures the script held keep clones of `state`; they go with the runtime.
            drop(context);
            drop(rt);
            end
        }
        Err(why) => ScriptEnd::Internal(why),
    };
    let console = state.console.borrow();
    EngineReport {
        end: bounded(end),
        console: console.text.clone(),
        console_dropped: console.dropped,
    }
}

/// The end with its texts cut to what a report carries.
fn bounded(end: ScriptEnd) -> ScriptEnd {
    let cut = |mut text: String| {
        if text.len() > MAX_THROWN_BYTES {
            let kept = truncate_at_char_boundary(&text, MAX_THROWN_BYTES).len();
            let dropped = text.len() - kept;
            text.truncate(kept);
            text.push_str(&format!(" [... {dropped} more bytes]"));
        }
        text
    };
    match end {
        ScriptEnd::Threw(t) => ScriptEnd::Threw(cut(t)),
        ScriptEnd::BadResult(t) => ScriptEnd::BadResult(cut(t)),
        ScriptEnd::Internal(t) => ScriptEnd::Internal(cut(t)),
        ScriptEnd::Syntax {
            message,
            line,
            column,
        } => ScriptEnd::Syntax {
            message: cut(message),
            line,
            column,
        },
        other => other,
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
        None => thrown.classify(&state.memory),
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
    state.memory.start();
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
                thrown.classify(&state.memory)
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
                return Thrown::read(&left).classify(&state.memory);
            }
            // A job that ran out of memory can leave nothing at all, and its promise pending.
            if state.memory.exhausted() {
                return ScriptEnd::OutOfMemory;
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
