//! `dsh run`: each transcript line is one step through the whole pipeline.

use crate::cli::PipelineOptions;
use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use crate::harness::{self, Running};
use crate::output::{JsonLines, note};
use dsh_command_hooks::CommandHooks;
use dsh_core::event::{ToolCallData, ToolResultData};
use dsh_core::transcript::{TranscriptCall, TranscriptResult, TranscriptStep};
use dsh_core::{Arguments, ContentBlock, ErrorCode, EventBody, ToolError};
use dsh_formats::{
    ClaudeCodeLine, ClaudeCodeSteps, Format, is_claude_code_line, parse_line, render_step,
    step_from_run,
};
use dsh_scheduler::{CancelTarget, RenamedCallId, SchedulerError, StepOutcome, StepRequest};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::runtime::Runtime;

/// Where the transcript comes from.
#[derive(Debug, Clone)]
pub enum TranscriptSource {
    /// A file.
    File(PathBuf),
    /// Standard input (`-`).
    Stdin,
    /// Text bundled in the binary (the demo), with the name shown in messages.
    Bundled {
        /// Shown in messages.
        name: &'static str,
        /// The JSON Lines.
        text: &'static str,
    },
}

impl TranscriptSource {
    /// `-` is standard input, anything else a file.
    pub fn from_arg(path: &Path) -> TranscriptSource {
        if path.as_os_str() == "-" {
            TranscriptSource::Stdin
        } else {
            TranscriptSource::File(path.to_path_buf())
        }
    }

    fn name(&self) -> String {
        match self {
            TranscriptSource::File(p) => p.display().to_string(),
            TranscriptSource::Stdin => "<stdin>".into(),
            TranscriptSource::Bundled { name, .. } => (*name).to_string(),
        }
    }

    fn open(&self) -> Result<Box<dyn BufRead>, CliError> {
        Ok(match self {
            TranscriptSource::File(p) => Box::new(BufReader::new(
                File::open(p).map_err(|e| CliError::io("read the transcript", p, e))?,
            )),
            TranscriptSource::Stdin => Box::new(BufReader::new(std::io::stdin())),
            TranscriptSource::Bundled { text, .. } => Box::new(text.as_bytes()),
        })
    }
}

/// What `run` needs.
#[derive(Debug)]
pub struct RunPlan<'a> {
    /// The transcript.
    pub transcript: TranscriptSource,
    /// The directory the tools are confined to.
    pub workspace: &'a Path,
    /// The session log.
    pub log: &'a crate::store::LogTarget,
    /// Policy, approval, limits.
    pub options: &'a PipelineOptions,
}

/// How a run went, for the summary and the exit code.
#[derive(Debug, Default)]
struct Tally {
    first_step: Option<u64>,
    last_step: Option<u64>,
    bad_lines: usize,
    talk_only: usize,
}

/// Runs the transcript. Returns the exit code: 0, or 1 when some lines were not assistant
/// messages (each recorded as a `TOOL_INPUT_ERROR` result).
pub fn run(rt: &Runtime, plan: RunPlan<'_>, out: &mut JsonLines) -> Result<u8, CliError> {
    let stdin_free = !matches!(plan.transcript, TranscriptSource::Stdin);
    // Open the transcript first: a typo in its name must not leave a new empty log behind.
    let reader = plan.transcript.open()?;
    let interrupt = Interrupt::watch(rt)?;
    let running = rt.block_on(harness::start(
        plan.workspace,
        plan.log,
        plan.options,
        stdin_free,
        None,
    ))?;
    interrupt.guard(running.session.clone(), running.hooks.clone());
    if let Some(lost) = plan.log.lease_lost() {
        interrupt.stop_when_lease_lost(rt, lost);
    }
    let name = plan.transcript.name();
    let mut tally = Tally::default();
    let mut runner = Runner {
        rt,
        running: &running,
        out,
    };
    let stopped = || interrupt.received().is_some();
    let outcome = run_lines(reader, &name, &mut runner, &mut tally, &stopped);
    rt.block_on(running.shutdown());
    if let Some(why) = interrupt.lease_lost() {
        return Err(CliError::log(
            &plan.log.label(),
            format!("{why}; its running calls were cancelled and killed, and this run stops"),
        ));
    }
    outcome?;
    if let Some(signal) = interrupt.received() {
        note(format!(
            "stopped by {}: the running calls were recorded as aborted and {} was closed cleanly",
            signal.name(),
            plan.log.label().display()
        ));
        return Ok(signal.exit_code());
    }
    let steps = match (tally.first_step, tally.last_step) {
        (Some(a), Some(b)) if a == b => format!("ran step {a}"),
        (Some(a), Some(b)) => format!("ran steps {a}-{b}"),
        _ => "ran no steps".to_string(),
    };
    let mut trouble = String::new();
    if tally.bad_lines > 0 {
        trouble.push_str(&format!(
            ", {} bad line(s) recorded as TOOL_INPUT_ERROR",
            tally.bad_lines
        ));
    }
    if tally.talk_only > 0 {
        trouble.push_str(&format!(
            ", {} message(s) without tool calls",
            tally.talk_only
        ));
    }
    note(format!(
        "{steps} from {name}{trouble}; log: {}",
        plan.log.label().display()
    ));
    Ok(if tally.bad_lines > 0 {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

/// What is done with each message of the transcript: run as a step ([`Runner`]) or judged
/// without running ([`Judge`], `--dry-run`).
trait Steps {
    /// One assistant message's calls, from the line(s) at `at`, in `format`.
    fn step(
        &mut self,
        calls: Vec<dsh_core::ToolCall>,
        format: Format,
        at: &str,
        tally: &mut Tally,
    ) -> Result<(), CliError>;
    /// A line that is not an assistant message.
    fn bad_line(
        &mut self,
        bad: BadLine<'_>,
        format: Format,
        tally: &mut Tally,
    ) -> Result<(), CliError>;
}

/// `dsh run`: each message is a step of the session, printed with its results.
struct Runner<'a> {
    rt: &'a Runtime,
    running: &'a Running,
    out: &'a mut JsonLines,
}

impl Steps for Runner<'_> {
    fn step(
        &mut self,
        calls: Vec<dsh_core::ToolCall>,
        format: Format,
        at: &str,
        tally: &mut Tally,
    ) -> Result<(), CliError> {
        let outcome = run_step(self.rt, self.running, calls.clone(), at)?;
        for r in &outcome.renamed {
            note(format!("{at}: {}", describe_rename(r)));
        }
        tally.first_step.get_or_insert(outcome.step);
        tally.last_step = Some(outcome.step);
        let step = step_from_run(outcome.step, &calls, &outcome.results, &outcome.deferred);
        self.out.print(&render_step(format, &step))
    }

    fn bad_line(
        &mut self,
        bad: BadLine<'_>,
        format: Format,
        tally: &mut Tally,
    ) -> Result<(), CliError> {
        record_bad_line(self.rt, self.running, bad, format, self.out, tally)
    }
}

/// `dsh run --dry-run`: each message's calls judged in order, one JSON line per call.
struct Judge<'a> {
    rt: &'a Runtime,
    judging: &'a harness::Judging,
    out: &'a mut JsonLines,
    /// The step a run of the same transcript on a new log would give the message.
    step: u64,
    /// Calls allowed, asked about, denied.
    counts: [usize; 3],
}

impl Judge<'_> {
    fn print(
        &mut self,
        call_id: &str,
        tool: &str,
        judgement: &dsh_scheduler::Judgement,
    ) -> Result<(), CliError> {
        use dsh_scheduler::Judgement;
        let (decision, reason, code) = match judgement {
            Judgement::Allow => ("allow", None, None),
            Judgement::Ask(prompt) => ("ask", Some(prompt.as_str()), None),
            Judgement::Deny { code, reason } => ("deny", Some(reason.as_str()), Some(code)),
        };
        self.counts[match decision {
            "allow" => 0,
            "ask" => 1,
            _ => 2,
        }] += 1;
        let mut line = serde_json::json!({
            "step": self.step,
            "callId": call_id,
            "tool": tool,
            "decision": decision,
            "reason": reason,
        });
        if let Some(code) = code {
            line["code"] = serde_json::json!(code);
        }
        self.out.print(std::slice::from_ref(&line))
    }
}

impl Steps for Judge<'_> {
    fn step(
        &mut self,
        calls: Vec<dsh_core::ToolCall>,
        _format: Format,
        at: &str,
        tally: &mut Tally,
    ) -> Result<(), CliError> {
        self.step += 1;
        let mut calls = calls;
        for r in dsh_scheduler::prepare_step_calls(self.step, &mut calls) {
            note(format!("{at}: {}", describe_rename(&r)));
        }
        tally.first_step.get_or_insert(self.step);
        tally.last_step = Some(self.step);
        // In the order of the message: an edit after a read of its step is judged after it,
        // as a run places an exclusive call after every earlier call of its step.
        for call in calls {
            let input = dsh_core::ToolExecutionInput {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                arguments: call.arguments,
                agent: "main".into(),
                signal: dsh_core::Signal::never(),
                parent: None,
            };
            let judgement = self
                .rt
                .block_on(self.judging.harness.pipeline().judge(&input));
            self.print(&call.call_id, &call.name, &judgement)?;
        }
        Ok(())
    }

    fn bad_line(
        &mut self,
        bad: BadLine<'_>,
        _format: Format,
        tally: &mut Tally,
    ) -> Result<(), CliError> {
        self.step += 1;
        let reason = format!(
            "transcript line {} could not be run: {}",
            bad.number, bad.reason
        );
        note(format!("{}: {}", bad.at, bad.reason));
        tally.bad_lines += 1;
        tally.first_step.get_or_insert(self.step);
        tally.last_step = Some(self.step);
        let judgement = dsh_scheduler::Judgement::Deny {
            code: ErrorCode::ToolInputError,
            reason,
        };
        self.print(&bad_line_call_id(bad.number), "", &judgement)
    }
}

/// What `run --dry-run` needs.
#[derive(Debug)]
pub struct DryRunPlan<'a> {
    /// The transcript.
    pub transcript: TranscriptSource,
    /// The directory the tools are confined to (read, never changed).
    pub workspace: &'a Path,
    /// Policy, hooks, profile.
    pub options: &'a PipelineOptions,
}

/// `dsh run --print-plan`: what the command line means, on stderr; nothing starts.
pub fn print_plan(args: &crate::cli::RunArgs) -> Result<u8, CliError> {
    if args.dry_run {
        let logs = harness::Logs::Judged;
        return harness::print_plan(
            &args.workspace,
            logs,
            &args.transcript,
            &args.options,
            "run --dry-run",
        );
    }
    let log = crate::store::LogTarget::new(args.log.as_ref(), &args.store)?;
    let logs = harness::Logs::One(&log);
    harness::print_plan(&args.workspace, logs, &log.label(), &args.options, "run")
}

/// `dsh run --dry-run`: judges every call of the transcript (prepare: command hooks, rules,
/// confinement, guards, and read-before-edit simulated from the transcript's own earlier
/// reads) and prints one JSON line per call; runs no tool body, opens no log. Returns the exit
/// code: 0, or 1 when some lines were not assistant messages.
pub fn dry_run(rt: &Runtime, plan: DryRunPlan<'_>, out: &mut JsonLines) -> Result<u8, CliError> {
    let reader = plan.transcript.open()?;
    let hooks_transcript = match &plan.transcript {
        TranscriptSource::File(path) => std::path::absolute(path).unwrap_or_else(|_| path.clone()),
        _ => PathBuf::from(plan.transcript.name()),
    };
    let judging = rt.block_on(harness::start_judging(
        plan.workspace,
        &hooks_transcript,
        plan.options,
    ))?;
    let name = plan.transcript.name();
    let mut tally = Tally::default();
    let mut judge = Judge {
        rt,
        judging: &judging,
        out,
        step: 0,
        counts: [0; 3],
    };
    let outcome = run_lines(reader, &name, &mut judge, &mut tally, &|| false);
    let [allowed, asked, denied] = judge.counts;
    rt.block_on(judging.shutdown());
    outcome?;
    note(format!(
        "dry run of {name}: {allowed} allowed, {asked} ask, {denied} denied; no tool ran and no log was written"
    ));
    Ok(if tally.bad_lines > 0 {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

fn run_lines(
    mut reader: Box<dyn BufRead>,
    name: &str,
    sink: &mut dyn Steps,
    tally: &mut Tally,
    stopped: &dyn Fn() -> bool,
) -> Result<(), CliError> {
    let mut number = 0usize;
    let mut bytes = Vec::new();
    // A bad line is printed in the format of the line before it (OpenAI's at first).
    let mut format = Format::default();
    // A Claude Code session file (told by its first line): steps grouped by message id.
    let mut claude: Option<ClaudeCodeSteps> = None;
    let mut first = true;
    loop {
        if stopped() {
            return Ok(());
        }
        bytes.clear();
        let line_len = read_bounded_line(&mut reader, &mut bytes)
            .map_err(|e| CliError::io("read the transcript", Path::new(name), e))?;
        if line_len == 0 {
            if let Some(mut steps) = claude {
                if let Some(calls) = steps.finish() {
                    let at = format!("{name}:{number}");
                    sink.step(calls, Format::Anthropic, &at, tally)?;
                }
                let skipped = steps.skipped();
                if !skipped.is_empty() {
                    let kinds = skipped
                        .iter()
                        .map(|(kind, n)| format!("{n} {kind}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    note(format!(
                        "{name}: a Claude Code session file; skipped {} line(s) that are not assistant tool calls ({kinds})",
                        skipped.values().sum::<usize>()
                    ));
                }
            }
            return Ok(());
        }
        number += 1;
        let at = format!("{name}:{number}");
        if line_len > MAX_TRANSCRIPT_LINE_BYTES {
            let bad = BadLine {
                number,
                at: &at,
                text: "",
                bytes: line_len,
                reason: format!(
                    "the line is {line_len} bytes, past the limit of {MAX_TRANSCRIPT_LINE_BYTES} bytes for one assistant message"
                ),
            };
            sink.bad_line(bad, format, tally)?;
            continue;
        }
        let line = match std::str::from_utf8(&bytes) {
            Ok(line) => line.trim(),
            Err(e) => {
                let text = String::from_utf8_lossy(&bytes);
                let bad = BadLine {
                    number,
                    at: &at,
                    text: text.trim(),
                    bytes: line_len,
                    reason: format!("not UTF-8 text ({e})"),
                };
                sink.bad_line(bad, format, tally)?;
                continue;
            }
        };
        if line.is_empty() {
            continue;
        }
        if std::mem::take(&mut first)
            && serde_json::from_str::<serde_json::Value>(line)
                .is_ok_and(|v| is_claude_code_line(&v))
        {
            claude = Some(ClaudeCodeSteps::default());
            format = Format::Anthropic;
        }
        if let Some(steps) = claude.as_mut() {
            let value = match serde_json::from_str::<serde_json::Value>(line) {
                Ok(v) if v.is_object() => v,
                Ok(_) => {
                    let bad = BadLine {
                        number,
                        at: &at,
                        text: line,
                        bytes: line_len,
                        reason: "not a JSON object".into(),
                    };
                    sink.bad_line(bad, format, tally)?;
                    continue;
                }
                Err(e) => {
                    let bad = BadLine {
                        number,
                        at: &at,
                        text: line,
                        bytes: line_len,
                        reason: format!("not JSON ({e})"),
                    };
                    sink.bad_line(bad, format, tally)?;
                    continue;
                }
            };
            if let ClaudeCodeLine::Completed(calls) = steps.push_line(&value) {
                sink.step(calls, Format::Anthropic, &at, tally)?;
            }
            continue;
        }
        let parsed = match parse_line(line) {
            Ok(p) => p,
            Err(e) => {
                let bad = BadLine {
                    number,
                    at: &at,
                    text: line,
                    bytes: line_len,
                    reason: e.to_string(),
                };
                sink.bad_line(bad, format, tally)?;
                continue;
            }
        };
        format = parsed.format;
        if parsed.calls.is_empty() {
            note(format!(
                "{at}: the assistant message has no tool calls; nothing to run"
            ));
            tally.talk_only += 1;
            continue;
        }
        sink.step(parsed.calls, parsed.format, &at, tally)?;
    }
}

/// The longest transcript line read whole: one assistant message, with room for many calls at
/// the argument limit.
const MAX_TRANSCRIPT_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Reads one line into `bytes`, keeping at most [`MAX_TRANSCRIPT_LINE_BYTES`] + 1 bytes of it
/// (the rest is read and dropped). Answers the line's whole length, 0 at the end.
fn read_bounded_line(reader: &mut dyn BufRead, bytes: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut total = 0usize;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let room = (MAX_TRANSCRIPT_LINE_BYTES + 1).saturating_sub(bytes.len());
        bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        total = total.saturating_add(used);
        reader.consume(used);
        if done {
            return Ok(total);
        }
    }
}

/// Runs `calls` as the session's next step.
fn run_step(
    rt: &Runtime,
    running: &Running,
    calls: Vec<dsh_core::ToolCall>,
    at: &str,
) -> Result<StepOutcome, CliError> {
    let request = StepRequest {
        agent: "main".into(),
        calls,
    };
    match rt.block_on(running.session.run_step(request)) {
        Ok(o) => Ok(o),
        Err(SchedulerError::LogFailed { error, outcome }) => Err(CliError::log(
            &running.log_path,
            format!("writing step {} (from {at}) failed: {error}", outcome.step),
        )),
        Err(e) => Err(CliError::log(
            &running.log_path,
            format!("running {at} failed: {e}"),
        )),
    }
}

/// A transcript line that is not an assistant message.
struct BadLine<'a> {
    /// 1-based line number.
    number: usize,
    /// `NAME:NUMBER`, for stderr.
    at: &'a str,
    /// The line's text (invalid UTF-8 replaced), without surrounding whitespace.
    text: &'a str,
    /// Why it is not an assistant message.
    reason: String,
    /// The whole line's length in bytes (more than `text` holds when it was too long to keep).
    bytes: usize,
}

/// The call id a bad line is recorded under.
fn bad_line_call_id(number: usize) -> String {
    format!("dsh_line_{number}")
}

/// A bad line still takes its step: it is recorded as one call named `""` whose arguments are
/// the line's text, answered `TOOL_INPUT_ERROR` with the line number and the reason, so the
/// log says what the transcript held and `dsh replay` prints what was printed here.
fn record_bad_line(
    rt: &Runtime,
    running: &Running,
    bad: BadLine<'_>,
    format: Format,
    out: &mut JsonLines,
    tally: &mut Tally,
) -> Result<(), CliError> {
    // An empty step records nothing; it gives the line its own step number.
    let step = run_step(rt, running, Vec::new(), bad.at)?.step;
    let call_id = bad_line_call_id(bad.number);
    let message = format!(
        "transcript line {} could not be run: {}",
        bad.number, bad.reason
    );
    // Bounded like any call's arguments: a huge or deeply nested bad line logs only its size.
    let arguments = if bad.bytes > MAX_TRANSCRIPT_LINE_BYTES {
        Arguments::Oversized {
            bytes: bad.bytes,
            reason: bad.reason.clone(),
        }
    } else {
        Arguments::Malformed {
            raw: bad.text.to_string(),
            error: bad.reason.clone(),
        }
        .within_limits()
    }
    .to_logged();
    let content = vec![ContentBlock::text(message.clone())];
    let error = ToolError::new(ErrorCode::ToolInputError, message);
    let log = running.session.log();
    let failed = |e: dsh_session::SessionError| {
        CliError::log(
            &running.log_path,
            format!("recording step {step} (from {}) failed: {e}", bad.at),
        )
    };
    let call_seq = rt
        .block_on(log.append(
            step,
            EventBody::ToolCall(ToolCallData {
                call_id: call_id.clone(),
                name: String::new(),
                arguments: arguments.clone(),
                arguments_text: None,
                agent: "main".into(),
                parent: None,
            }),
        ))
        .map_err(failed)?;
    rt.block_on(log.append(
        step,
        EventBody::result(
            ToolResultData {
                started_at: None,
                call_id: call_id.clone(),
                message: content.clone(),
                error: Some(error.clone()),
                meta: None,
            },
            call_seq,
        ),
    ))
    .map_err(failed)?;
    note(format!(
        "{}: {}; recorded in step {step} as call `{call_id}` with TOOL_INPUT_ERROR",
        bad.at, bad.reason
    ));
    tally.bad_lines += 1;
    tally.first_step.get_or_insert(step);
    tally.last_step = Some(step);
    let step = TranscriptStep {
        step,
        calls: vec![TranscriptCall {
            call_id: call_id.clone(),
            name: String::new(),
            arguments,
            arguments_text: None,
        }],
        results: vec![TranscriptResult {
            call_id,
            content,
            error: Some(error),
        }],
        user_messages: Vec::new(),
    };
    out.print(&render_step(format, &step))
}

fn describe_rename(r: &RenamedCallId) -> String {
    let which = r.index + 1;
    if r.original.is_empty() {
        format!(
            "tool call {which} has no id; the log calls it `{}`",
            r.assigned
        )
    } else if dsh_scheduler::is_derived_call_id(&r.original) {
        format!(
            "tool call {which} has the id `{}`, of the form dsh gives sub-calls (`ID.subN`); the log calls it `{}`",
            r.original, r.assigned
        )
    } else {
        format!(
            "tool call {which} repeats the id `{}` of an earlier call in the message; the log calls it `{}`",
            r.original, r.assigned
        )
    }
}

/// SIGINT and SIGTERM during `dsh run`: the first cancels what runs (the calls are recorded
/// `ABORTED`, hooks and commands are stopped with their calls) and stops before the next line,
/// so the log is closed clean; a second one exits at once.
struct Interrupt {
    received: Arc<AtomicI32>,
    guarded: Arc<Mutex<Option<Guarded>>>,
    lease_lost: Arc<Mutex<Option<String>>>,
}

/// What a signal stops: the session's calls, and the hook processes they started.
#[derive(Clone)]
struct Guarded {
    session: dsh_scheduler::Session,
    hooks: Option<CommandHooks>,
}

impl Guarded {
    fn stop(&self) {
        let _ = self.session.cancel(CancelTarget::Session);
        if let Some(hooks) = &self.hooks {
            hooks.kill_all();
        }
    }
}

/// A signal that stopped the run.
#[derive(Debug, Clone, Copy)]
struct Stopped(i32);

impl Stopped {
    fn name(self) -> &'static str {
        if self.0 == SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        }
    }

    /// 128 + the signal's number, as shells report a process a signal ended.
    fn exit_code(self) -> u8 {
        u8::try_from(128 + self.0).unwrap_or(u8::MAX)
    }
}

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

impl Interrupt {
    fn watch(rt: &Runtime) -> Result<Interrupt, CliError> {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut int, mut term) = rt
            .block_on(async {
                Ok::<_, std::io::Error>((
                    signal(SignalKind::interrupt())?,
                    signal(SignalKind::terminate())?,
                ))
            })
            .map_err(|e| CliError::Start(format!("cannot watch for SIGINT and SIGTERM: {e}")))?;
        let received = Arc::new(AtomicI32::new(0));
        let guarded: Arc<Mutex<Option<Guarded>>> = Arc::default();
        let (flag, target) = (received.clone(), guarded.clone());
        rt.spawn(async move {
            let first = tokio::select! {
                _ = int.recv() => SIGINT,
                _ = term.recv() => SIGTERM,
            };
            flag.store(first, Ordering::SeqCst);
            note(format!(
                "{}: cancelling the running calls and closing the log (a second signal stops at once)",
                Stopped(first).name()
            ));
            let running = target.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(guarded) = running {
                guarded.stop();
            }
            let second = tokio::select! {
                _ = int.recv() => SIGINT,
                _ = term.recv() => SIGTERM,
            };
            note(format!(
                "{} again: stopping now; `dsh recover` repairs the log if it needs it",
                Stopped(second).name()
            ));
            std::process::exit(i32::from(Stopped(second).exit_code()));
        });
        Ok(Interrupt {
            received,
            guarded,
            lease_lost: Arc::default(),
        })
    }

    /// Stops the run as a first signal does once `lost` resolves (the session's lease is
    /// lost: another node may own the session and run calls on the same workspace): the
    /// running calls are cancelled and their processes killed, and the run ends with 3.
    fn stop_when_lease_lost(
        &self,
        rt: &Runtime,
        lost: impl std::future::Future<Output = String> + Send + 'static,
    ) {
        let (flag, target, reason) = (
            self.received.clone(),
            self.guarded.clone(),
            self.lease_lost.clone(),
        );
        rt.spawn(async move {
            let why = lost.await;
            *reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
            let _ = flag.compare_exchange(0, SIGTERM, Ordering::SeqCst, Ordering::SeqCst);
            note(format!(
                "{why}: cancelling and killing the running calls; this run stops"
            ));
            let running = target.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(guarded) = running {
                guarded.stop();
            }
        });
    }

    /// Why the session's lease was lost, if it was.
    fn lease_lost(&self) -> Option<String> {
        self.lease_lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What a signal stops; a signal that came while the pipeline started stops it now.
    fn guard(&self, session: dsh_scheduler::Session, hooks: Option<CommandHooks>) {
        let guarded = Guarded { session, hooks };
        *self.guarded.lock().unwrap_or_else(|e| e.into_inner()) = Some(guarded.clone());
        if self.received().is_some() {
            guarded.stop();
        }
    }

    fn received(&self) -> Option<Stopped> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            n => Some(Stopped(n)),
        }
    }
}
