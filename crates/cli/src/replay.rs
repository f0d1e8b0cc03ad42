//! `dsh replay`, `dsh check` and `dsh recover`: the log alone, read back (and repaired).

use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use crate::output::{JsonLines, note, say};
use dsh_formats::{Format, render_step};
use dsh_session::check::Violation;
use dsh_session::{FileBackend, Recovery};
use std::path::Path;

/// Prints the transcript rebuilt from the log, step by step, in `format`.
pub fn replay(log: &Path, format: Format, out: &mut JsonLines) -> Result<u8, CliError> {
    // Streams the log (two threads on a large one) instead of holding its events.
    let transcript = dsh_session::replay::replay_file(log).map_err(|e| CliError::log(log, e))?;
    for step in &transcript.steps {
        out.print(&render_step(format, step))?;
    }
    Ok(EXIT_OK)
}

/// Runs the invariant checker: 0 when the log is whole, 1 naming the first violation (or
/// saying that the log needs recovery), 3 when the log cannot be read at all.
pub fn check(log: &Path) -> Result<u8, CliError> {
    if let Err(e) = std::fs::metadata(log) {
        return Err(CliError::io("read the log", log, e));
    }
    match dsh_session::check::check_file(log) {
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
            note(format!(
                "{}: check failed: {needs}; `dsh recover {}` repairs it",
                log.display(),
                log.display()
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
pub fn recover(log: &Path) -> Result<u8, CliError> {
    // Opening creates a missing log; recovering one that is not there is a mistake.
    if let Err(e) = std::fs::metadata(log) {
        return Err(CliError::io("read the log", log, e));
    }
    let (backend, recovery) = FileBackend::open(log).map_err(|e| CliError::log(log, e))?;
    drop(backend);
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
