//! `dsh replay` and `dsh check`: the log alone, read back.

use crate::error::{CliError, EXIT_FAILED, EXIT_OK};
use crate::output::{JsonLines, note, say};
use dsh_formats::{Format, render_step};
use std::path::Path;

/// Prints the transcript rebuilt from the log, step by step, in `format`.
pub fn replay(log: &Path, format: Format, out: &mut JsonLines) -> Result<u8, CliError> {
    let events = dsh_session::replay::read_log(log).map_err(|e| CliError::log(log, e))?;
    let transcript = dsh_session::replay::rebuild(&events);
    for step in &transcript.steps {
        out.print(&render_step(format, step))?;
    }
    Ok(EXIT_OK)
}

/// Runs the invariant checker: 0 when the log is whole, 1 naming the first violation.
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
        Err(violation) => {
            note(format!("{}: check failed: {violation}", log.display()));
            Ok(EXIT_FAILED)
        }
    }
}
