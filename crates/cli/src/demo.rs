//! `dsh demo`: a bundled example on a fresh copy of a small sample project, with no set-up.

use crate::cli::{DemoArgs, FormatArg};
use crate::error::CliError;
use crate::output::{JsonLines, note_lines, shell_word};
use crate::run::{self, RunPlan, TranscriptSource};
use std::path::{Path, PathBuf};
use tokio::runtime::Runtime;

macro_rules! sample {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../../examples/transcripts/workspace/", $path)))),*]
    };
}

/// The sample project the examples work on (`examples/transcripts/workspace/`).
const SAMPLE: &[(&str, &str)] = sample!["README.md", "CHANGELOG.md", "src/lib.rs", "src/main.rs",];

const OPENAI: &str = include_str!("../../../examples/transcripts/openai.jsonl");
const ANTHROPIC: &str = include_str!("../../../examples/transcripts/anthropic.jsonl");

fn example(format: FormatArg) -> (&'static str, &'static str) {
    match format {
        FormatArg::Openai => ("examples/transcripts/openai.jsonl", OPENAI),
        FormatArg::Anthropic => ("examples/transcripts/anthropic.jsonl", ANTHROPIC),
    }
}

fn demo_dir(dir: Option<&Path>) -> Result<PathBuf, CliError> {
    match dir {
        Some(dir) => {
            let fresh = match std::fs::read_dir(dir) {
                Ok(mut entries) => entries.next().is_none(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                Err(e) => return Err(CliError::io("open the demo directory", dir, e)),
            };
            if !fresh {
                return Err(CliError::Usage(format!(
                    "--dir {} is not empty; give a new or empty directory",
                    dir.display()
                )));
            }
            std::fs::create_dir_all(dir)
                .map_err(|e| CliError::io("create the demo directory", dir, e))?;
            Ok(dir.to_path_buf())
        }
        None => tempfile::Builder::new()
            .prefix("dsh-demo-")
            .tempdir()
            .map(tempfile::TempDir::keep)
            .map_err(|e| CliError::io("create a temporary directory in", &std::env::temp_dir(), e)),
    }
}

/// Writes the sample project under `root`.
fn write_sample(root: &Path) -> Result<(), CliError> {
    for (path, text) in SAMPLE {
        let file = root.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| CliError::io("create the sample project in", parent, e))?;
        }
        std::fs::write(&file, text)
            .map_err(|e| CliError::io("write the sample project file", &file, e))?;
    }
    Ok(())
}

/// Runs the demo; the exit code is `run`'s.
pub fn demo(rt: &Runtime, args: &DemoArgs, out: &mut JsonLines) -> Result<u8, CliError> {
    let dir = demo_dir(args.dir.as_deref())?;
    let workspace = dir.join("workspace");
    let log = dir.join("session.jsonl");
    write_sample(&workspace)?;
    let (name, text) = example(args.format);
    let code = run::run(
        rt,
        RunPlan {
            transcript: TranscriptSource::Bundled { name, text },
            workspace: &workspace,
            log: &crate::store::LogTarget::File(log.clone()),
            options: &args.options,
        },
        out,
    )?;
    let format = match args.format {
        FormatArg::Openai => "openai",
        FormatArg::Anthropic => "anthropic",
    };
    let page = dir.join("session.html");
    crate::view::write_page(&page, &crate::view::page_of_file(&log)?)?;
    // The paths are the user's (`--dir`) or the system's temporary folder: escaped, and
    // quoted in the commands so that pasting one names the same file.
    let log_word = shell_word(&log.display().to_string()).into_owned();
    note_lines([
        format!(
            "demo done. The edited sample project: {}",
            workspace.display()
        ),
        format!("The session log: {}", log.display()),
        format!(
            "Rebuild what the model saw from the log: cargo run -p dsh-cli -- replay {log_word} --format {format}"
        ),
        format!(
            "Verify the log's invariants:             cargo run -p dsh-cli -- check {log_word}"
        ),
        format!(
            "The session at a glance, in a browser:   {}",
            page.display()
        ),
    ]);
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                files_under(&entry.path(), &format!("{name}/"), out);
            } else {
                out.push(name);
            }
        }
    }

    #[test]
    fn the_bundled_sample_is_the_whole_example_workspace() {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/transcripts/workspace");
        let mut on_disk = Vec::new();
        files_under(&dir, "", &mut on_disk);
        on_disk.sort();
        let mut bundled: Vec<String> = SAMPLE.iter().map(|(p, _)| p.to_string()).collect();
        bundled.sort();
        assert_eq!(bundled, on_disk);
    }

    #[test]
    fn every_example_line_parses_and_has_calls() {
        for format in [FormatArg::Openai, FormatArg::Anthropic] {
            let (name, text) = example(format);
            for (i, line) in text.lines().enumerate() {
                let parsed = dsh_formats::parse_line(line)
                    .unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1));
                assert!(!parsed.calls.is_empty(), "{name}:{}", i + 1);
                assert_eq!(dsh_formats::Format::from(format), parsed.format);
            }
        }
    }
}
