//! Running the `dsh` binary in tests, on fresh copies of the example workspace.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `examples/transcripts/` of the repository.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/transcripts")
}

/// The example transcript of a format (`openai` or `anthropic`).
pub fn example(format: &str) -> PathBuf {
    examples().join(format!("{format}.jsonl"))
}

/// The finished `dsh` process: exit code, stdout, stderr.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout's lines as JSON values.
    pub fn messages(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// The `content` of the OpenAI tool message answering `call_id`.
    pub fn tool_content(&self, call_id: &str) -> String {
        self.messages()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .unwrap_or_else(|| panic!("no tool message for {call_id} in\n{}", self.stdout))["content"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// The `Run` of a finished process (one that was not killed by a signal).
pub fn finish(out: Output) -> Run {
    Run {
        code: out.status.code().expect("dsh was killed by a signal"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Runs `dsh ARGS` with no standard input.
pub fn dsh<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    dsh_with(args, |_| {})
}

/// Runs `dsh ARGS` after `setup` adjusts the command.
pub fn dsh_with<S: AsRef<std::ffi::OsStr>>(args: &[S], setup: impl FnOnce(&mut Command)) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh"));
    cmd.args(args).stdin(Stdio::null()).env_remove("RUST_LOG");
    setup(&mut cmd);
    finish(cmd.output().unwrap())
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A fresh copy of the example workspace under `dir`; returns its path.
pub fn sample_workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("workspace");
    copy_tree(&examples().join("workspace"), &ws);
    ws
}

/// `dsh run TRANSCRIPT --workspace WS --log LOG EXTRA..`.
pub fn run(transcript: &Path, ws: &Path, log: &Path, extra: &[&str]) -> Run {
    let mut args: Vec<std::ffi::OsString> = vec![
        "run".into(),
        transcript.into(),
        "--workspace".into(),
        ws.into(),
        "--log".into(),
        log.into(),
    ];
    args.extend(extra.iter().map(Into::into));
    dsh(&args)
}

/// Writes a transcript made of `lines` and returns its path.
pub fn transcript(dir: &Path, name: &str, lines: &[&str]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    path
}

/// `dsh replay LOG --format FORMAT`.
pub fn replay(log: &Path, format: &str) -> Run {
    dsh(&[
        "replay".as_ref(),
        log.as_os_str(),
        "--format".as_ref(),
        format.as_ref(),
    ])
}

/// `dsh check LOG`.
pub fn check(log: &Path) -> Run {
    dsh(&["check".as_ref(), log.as_os_str()])
}

/// The log's events as JSON values.
pub fn log_events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
pub mod fleet;
pub mod pg;
pub mod procs;
pub mod runner;
pub mod serve;
pub mod stdio;

/// The Claude Code session-file fixture (`tests/fixtures/claude-code-session.jsonl`) with its
/// placeholder replaced by the workspace, written as `dir/session.jsonl`.
pub fn session_file(dir: &Path, ws: &Path) -> PathBuf {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-code-session.jsonl");
    let text = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("__WORKSPACE__", ws.to_str().unwrap());
    let path = dir.join("session.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

/// An Anthropic assistant message with one `tool_use` block per call.
pub fn message(calls: &[(&str, &str, Value)]) -> String {
    let content: Vec<Value> = calls
        .iter()
        .map(|(id, name, input)| {
            serde_json::json!({"type": "tool_use", "id": id, "name": name, "input": input})
        })
        .collect();
    serde_json::json!({"role": "assistant", "content": content}).to_string()
}

/// A log's text with its times (SPEC.md's "Time": each event's `"at":N` and a result's
/// `"startedAt":N`) taken out, to compare two runs byte for byte apart from times. A key
/// inside a string is escaped (`\"at\"`), so only the events' own keys match.
pub fn without_times(text: &str) -> String {
    let mut out = text.to_string();
    for key in [",\"at\":", ",\"startedAt\":"] {
        let mut kept = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(key) {
            kept.push_str(&rest[..i]);
            let after = &rest[i + key.len()..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            rest = &after[digits..];
        }
        kept.push_str(rest);
        out = kept;
    }
    out
}
