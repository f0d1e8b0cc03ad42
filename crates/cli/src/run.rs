//! `dsh run`: each transcript line is one step through the whole pipeline.

use crate::cli::PipelineOptions;
use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use crate::harness::{self, Running};
use crate::output::{JsonLines, note};
use dsh_formats::{parse_line, render_step, step_from_run};
use dsh_scheduler::{RenamedCallId, SchedulerError, StepRequest};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
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
    pub log: &'a Path,
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

/// Runs the transcript. Returns the exit code: 0, or 1 when some lines were skipped as bad.
pub fn run(rt: &Runtime, plan: RunPlan<'_>, out: &mut JsonLines) -> Result<u8, CliError> {
    let stdin_free = !matches!(plan.transcript, TranscriptSource::Stdin);
    // Open the transcript first: a typo in its name must not leave a new empty log behind.
    let reader = plan.transcript.open()?;
    let running = rt.block_on(harness::start(
        plan.workspace,
        plan.log,
        plan.options,
        stdin_free,
    ))?;
    let name = plan.transcript.name();
    let mut tally = Tally::default();
    let outcome = run_lines(rt, &running, reader, &name, out, &mut tally);
    rt.block_on(running.shutdown());
    outcome?;
    let steps = match (tally.first_step, tally.last_step) {
        (Some(a), Some(b)) if a == b => format!("ran step {a}"),
        (Some(a), Some(b)) => format!("ran steps {a}-{b}"),
        _ => "ran no steps".to_string(),
    };
    let mut skipped = String::new();
    if tally.bad_lines > 0 {
        skipped.push_str(&format!(", skipped {} bad line(s)", tally.bad_lines));
    }
    if tally.talk_only > 0 {
        skipped.push_str(&format!(
            ", {} message(s) without tool calls",
            tally.talk_only
        ));
    }
    note(format!(
        "{steps} from {name}{skipped}; log: {}",
        plan.log.display()
    ));
    Ok(if tally.bad_lines > 0 {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

fn run_lines(
    rt: &Runtime,
    running: &Running,
    mut reader: Box<dyn BufRead>,
    name: &str,
    out: &mut JsonLines,
    tally: &mut Tally,
) -> Result<(), CliError> {
    let mut number = 0usize;
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        let n = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| CliError::io("read the transcript", Path::new(name), e))?;
        if n == 0 {
            return Ok(());
        }
        number += 1;
        let at = format!("{name}:{number}");
        let Ok(line) = std::str::from_utf8(&bytes) else {
            note(format!("{at}: skipped: the line is not UTF-8 text"));
            tally.bad_lines += 1;
            continue;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let parsed = match parse_line(line) {
            Ok(p) => p,
            Err(e) => {
                note(format!("{at}: skipped: {e}"));
                tally.bad_lines += 1;
                continue;
            }
        };
        if parsed.calls.is_empty() {
            note(format!(
                "{at}: the assistant message has no tool calls; nothing to run"
            ));
            tally.talk_only += 1;
            continue;
        }
        let request = StepRequest {
            agent: "main".into(),
            calls: parsed.calls.clone(),
        };
        let outcome = match rt.block_on(running.session.run_step(request)) {
            Ok(o) => o,
            Err(SchedulerError::LogFailed { error, outcome }) => {
                return Err(CliError::log(
                    &running.log_path,
                    format!("writing step {} (from {at}) failed: {error}", outcome.step),
                ));
            }
            Err(e) => {
                return Err(CliError::log(
                    &running.log_path,
                    format!("running {at} failed: {e}"),
                ));
            }
        };
        for r in &outcome.renamed {
            note(format!("{at}: {}", describe_rename(r)));
        }
        tally.first_step.get_or_insert(outcome.step);
        tally.last_step = Some(outcome.step);
        let step = step_from_run(
            outcome.step,
            &parsed.calls,
            &outcome.results,
            &outcome.deferred,
        );
        out.print(&render_step(parsed.format, &step))?;
    }
}

fn describe_rename(r: &RenamedCallId) -> String {
    let which = r.index + 1;
    if r.original.is_empty() {
        format!(
            "tool call {which} has no id; the log calls it `{}`",
            r.assigned
        )
    } else {
        format!(
            "tool call {which} repeats the id `{}` of an earlier call in the message; the log calls it `{}`",
            r.original, r.assigned
        )
    }
}
