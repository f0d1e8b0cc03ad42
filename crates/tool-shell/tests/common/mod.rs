//! Helpers shared by the shell tool's tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_core::{ToolContext, ToolDefinition, ToolFailure};
use dsh_tool_shell::{SandboxConfig, ShellConfig, ShellTool};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh workspace (a git-like layout) and a tool over it.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub tool: ShellTool,
}

impl Env {
    pub fn new(sandbox: SandboxConfig) -> Env {
        Env::with(|c| c.sandbox(sandbox))
    }

    pub fn with(config: impl FnOnce(ShellConfig) -> ShellConfig) -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
        std::fs::write(dir.path().join(".git/config"), "[core]\n").unwrap();
        std::fs::write(dir.path().join("README.md"), "hello\n").unwrap();
        let tool = ShellTool::new(config(ShellConfig::new(dir.path()))).unwrap();
        Env { dir, tool }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub async fn run(&self, command: &str) -> Result<Value, ToolFailure> {
        self.run_with(json!({ "command": command })).await
    }

    pub async fn run_with(&self, input: Value) -> Result<Value, ToolFailure> {
        self.tool
            .execute(input, ToolContext::detached("test_call"))
            .await
    }

    /// Runs and expects a normal result (any exit code).
    pub async fn ok(&self, command: &str) -> Value {
        match self.run(command).await {
            Ok(v) => v,
            Err(f) => panic!("`{command}` failed: {f} {:?}", f.content),
        }
    }
}

/// The exit code of a result.
pub fn code(v: &Value) -> i64 {
    v["exitCode"]
        .as_i64()
        .unwrap_or_else(|| panic!("no exit code in {v}"))
}

pub fn stdout(v: &Value) -> &str {
    v["stdout"].as_str().unwrap()
}

pub fn stderr(v: &Value) -> &str {
    v["stderr"].as_str().unwrap()
}

/// The pids of live processes whose command line holds `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        if matches!(state, Some('Z') | Some('X')) {
            continue;
        }
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Waits up to `within` for no process to carry `marker`; the survivors otherwise.
pub async fn gone_within(marker: &str, within: Duration) -> Vec<u32> {
    let start = std::time::Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() || start.elapsed() > within {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A marker unique to this test run.
pub fn marker(name: &str) -> String {
    format!("dshmark{}x{}", name, std::process::id())
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

impl Env {
    /// The text the model would read for a value.
    pub fn tool_text(&self, v: &Value) -> String {
        self.tool.present(v)[0].as_text().unwrap().to_string()
    }
}
