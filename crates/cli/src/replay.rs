//! `dsh replay`, `dsh check` and `dsh recover`: the log alone, read back (and repaired).

use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use crate::output::{JsonLines, note, say};
use crate::store::{self, LogTarget};
use dsh_formats::{Format, render_step};
use dsh_session::check::Violation;
use dsh_session::replay::TranscriptBuilder;
use dsh_session::{Durability, FileBackend, Recovery};
use tokio::runtime::Runtime;

/// Prints the transcript rebuilt from the log, step by step, in `format`.
pub fn replay(
    rt: &Runtime,
    target: &LogTarget,
    format: Format,
    out: &mut JsonLines,
) -> Result<u8, CliError> {
    let transcript = match target.file() {
        // Streams the log (two threads on a large one) instead of holding its events.
        Some(log) => dsh_session::replay::replay_file(log).map_err(|e| CliError::log(log, e))?,
        None => {
            let events = store::read_events(rt, target)?;
            if let Err(violation) = dsh_session::check::check_stored(&events)
                && !matches!(violation, Violation::NeedsRecovery { .. })
            {
                return Err(CliError::log(&target.label(), violation));
            }
            // As recovery would leave it, like a file left by a crash.
            let mut builder = TranscriptBuilder::new();
            events.into_iter().for_each(|e| builder.push(e));
            builder.close_open_calls();
            builder.finish()
        }
    };
    for step in &transcript.steps {
        out.print(&render_step(format, step))?;
    }
    Ok(EXIT_OK)
}

/// Runs the invariant checker: 0 when the log is whole, 1 naming the first violation (or
/// saying that the log needs recovery), 3 when the log cannot be read at all.
pub fn check(rt: &Runtime, target: &LogTarget) -> Result<u8, CliError> {
    let label = target.label();
    let log = label.as_path();
    let checked = match target.file() {
        Some(file) => {
            if let Err(e) = std::fs::metadata(file) {
                return Err(CliError::io("read the log", file, e));
            }
            dsh_session::check::check_file(file)
        }
        None => dsh_session::check::check_stored(&store::read_events(rt, target)?),
    };
    match checked {
        Ok(report) => {
            say(format!(
                "{}: every invariant holds ({} events, {} steps, {} calls each with one result)",
                log.display(),
                report.events,
                report.steps,
                report.calls
            ));
            Ok(EXIT_OK)
        }
        // A directory, no permission: an I/O failure, not a verdict on the log.
        Err(unreadable @ Violation::Unreadable { .. }) => Err(CliError::log(log, unreadable)),
        Err(needs @ Violation::NeedsRecovery { .. }) => {
            if let Some((owner, until)) = store::live_lease(rt, target) {
                note(format!(
                    "{}: in use by {owner}, lease until {until}: its open calls are still \
                     running; check it once that writer is done",
                    log.display()
                ));
                return Ok(EXIT_FAILED);
            }
            note(format!(
                "{}: check failed: {needs}; `{}` repairs it",
                log.display(),
                target.recover_command()
            ));
            Ok(EXIT_FAILED)
        }
        Err(violation) => {
            note(format!("{}: check failed: {violation}", log.display()));
            Ok(EXIT_FAILED)
        }
    }
}

/// What recovery repaired, as the clauses of one line (empty when nothing was).
pub fn describe_recovery(recovery: &Recovery) -> Vec<String> {
    let mut what = Vec::new();
    if recovery.torn_bytes_cut > 0 {
        match recovery.torn_line {
            Some(line) => what.push(format!(
                "cut a torn tail of {} bytes at line {line}",
                recovery.torn_bytes_cut
            )),
            None => what.push(format!(
                "cut a torn tail of {} bytes",
                recovery.torn_bytes_cut
            )),
        }
    }
    if recovery.newline_added {
        what.push("ended the last line".to_string());
    }
    if !recovery.closed_calls.is_empty() {
        what.push(format!(
            "closed {} call(s) left open with ABORTED ({})",
            recovery.closed_calls.len(),
            recovery.closed_calls.join(", ")
        ));
    }
    what
}

/// Opens the log with the normal recovery and says what it repaired, in one line on stderr.
pub fn recover(rt: &Runtime, target: &LogTarget) -> Result<u8, CliError> {
    let label = target.label();
    let log = label.as_path();
    let recovery = match target.file() {
        Some(file) => {
            // Opening creates a missing log; recovering one that is not there is a mistake.
            if let Err(e) = std::fs::metadata(file) {
                return Err(CliError::io("read the log", file, e));
            }
            let (backend, recovery) =
                FileBackend::open(file).map_err(|e| CliError::log(file, e))?;
            drop(backend);
            recovery
        }
        None => {
            // A session that is not there is a mistake too.
            store::read_events(rt, target)?;
            rt.block_on(async {
                let (log, recovery) = target
                    .open(Durability::Always, std::time::Duration::ZERO)
                    .await?;
                log.close().await?;
                Ok::<_, dsh_session::SessionError>(recovery)
            })
            .map_err(|e| CliError::log(log, e))?
        }
    };
    let what = describe_recovery(&recovery);
    let events = recovery.next_seq.saturating_sub(1);
    if what.is_empty() {
        note(format!(
            "{}: nothing to recover ({events} events, every line whole and every call answered)",
            log.display()
        ));
    } else {
        note(format!(
            "recovered {}: {} ({events} events now)",
            log.display(),
            what.join("; ")
        ));
    }
    Ok(EXIT_OK)
}
