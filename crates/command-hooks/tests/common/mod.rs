//! A small rig for the hook tests: a workspace in a temp dir, shell-script hooks, a tool that
//! records what it ran with, one step through the real pipeline, and a scan of /proc for
//! processes a hook left behind.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_trait::async_trait;
use dsh_command_hooks::{CommandHooks, HookSettings};
use dsh_core::{
    ContentBlock, FrozenResult, Hooks, SessionEvent, ToolCall, ToolContext, ToolDefinition,
    ToolFailure, ToolRegistry,
};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, StepOutcome, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A tool that records the input it ran with.
pub struct Recorder {
    pub name: String,
    pub ran: Arc<Mutex<Vec<(String, Value)>>>,
}

#[async_trait]
impl ToolDefinition for Recorder {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "records its input"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}},
               "additionalProperties": false})
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        self.ran
            .lock()
            .unwrap()
            .push((self.name.clone(), input.clone()));
        Ok(json!({"echoed": input.get("text").cloned().unwrap_or(Value::Null)}))
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        vec![ContentBlock::text(format!("ran with {}", value["echoed"]))]
    }
}

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub ran: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Rig {
    pub fn new() -> Rig {
        Rig {
            dir: tempfile::tempdir().unwrap(),
            ran: Arc::default(),
        }
    }

    pub fn ws(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.ws().join(name)
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Writes an executable `#!/bin/sh` script into the workspace; returns its path.
    pub fn script(&self, name: &str, body: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    pub fn ran(&self) -> Vec<(String, Value)> {
        self.ran.lock().unwrap().clone()
    }

    /// Hooks for `settings`, running in the workspace.
    pub fn hooks(&self, settings: &Value) -> CommandHooks {
        let settings = HookSettings::from_json(&settings.to_string()).unwrap();
        CommandHooks::new(settings, self.ws()).with_session_id("session-42")
    }

    /// A harness with the `alpha` and `beta` recorders and `hooks` installed, and a session
    /// on a memory log.
    pub async fn open(&self, hooks: &CommandHooks) -> (Harness, Session) {
        let registry = Arc::new(ToolRegistry::new());
        for name in ["alpha", "beta"] {
            registry
                .register(Recorder {
                    name: name.into(),
                    ran: self.ran.clone(),
                })
                .unwrap();
        }
        let mut installed = Hooks::new();
        hooks.install(&mut installed);
        let harness = HarnessBuilder::new(registry)
            .hooks(installed)
            .build()
            .await
            .unwrap();
        let log = SessionLog::memory().await.unwrap();
        let session = harness
            .open(log, SchedulerConfig::default(), None)
            .await
            .unwrap();
        (harness, session)
    }

    /// Runs one step of calls `(id, tool, args)` with `hooks` installed.
    pub async fn step_with(
        &self,
        hooks: &CommandHooks,
        calls: Vec<(&str, &str, Value)>,
    ) -> (StepOutcome, Vec<SessionEvent>) {
        let (harness, session) = self.open(hooks).await;
        let outcome = session.run_step(request(calls)).await.unwrap();
        let events = session.log().snapshot().await.unwrap();
        session.shutdown().await;
        harness.shutdown().await;
        (outcome, events)
    }

    /// One call of `alpha` with `args`.
    pub async fn call_with(&self, hooks: &CommandHooks, args: Value) -> FrozenResult {
        let (outcome, _) = self.step_with(hooks, vec![("c1", "alpha", args)]).await;
        outcome.results.into_iter().next().unwrap()
    }

    /// One call of `alpha` with `{"text": "hi"}`.
    pub async fn one(&self, settings: Value) -> FrozenResult {
        self.call_with(&self.hooks(&settings), json!({"text": "hi"}))
            .await
    }
}

/// A step of calls `(id, tool, args)`.
pub fn request(calls: Vec<(&str, &str, Value)>) -> StepRequest {
    StepRequest::new(
        calls
            .into_iter()
            .map(|(id, tool, args)| ToolCall::new(id, tool, args))
            .collect(),
    )
}

pub fn command(cmd: &str) -> Value {
    json!({"type": "command", "command": cmd})
}

pub fn pre(hooks: Vec<Value>) -> Value {
    json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": hooks}]}})
}

pub fn post(hooks: Vec<Value>) -> Value {
    json!({"hooks": {"PostToolUse": [{"matcher": "*", "hooks": hooks}]}})
}

pub fn code(r: &FrozenResult) -> &'static str {
    r.code().map(|c| c.as_str()).unwrap_or("ok")
}

/// A `sleep` duration no other process on the machine has on its command line: the marker
/// by which [`survivors`] finds what a hook started. Whatever still runs with it when the
/// marker is dropped is killed, so that a failing test does not leak sleeps.
pub struct Marker(String);

impl Marker {
    pub fn new() -> Marker {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Marker(format!("100.{}{:09}{n}", std::process::id(), nanos))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        for pid in running_with(&self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
        }
    }
}

fn running_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == marker.as_bytes())
        {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            continue;
        }
        found.push(pid);
    }
    found
}

/// The processes still running with `marker` as an argument; a SIGKILL takes effect when the
/// process is next scheduled, so a process that was just killed is given a moment to go.
pub fn survivors(marker: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let found = running_with(marker);
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to 10 s) until a process with `marker` runs.
pub fn wait_for_process(marker: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !running_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
