//! Starting dsh-mcp's test server and running calls through a real pipeline.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_core::{FrozenResult, Hooks, ToolCall, ToolRegistry};
use dsh_mcp::{McpOptions, McpServers, McpToolSource};
use dsh_scheduler::{Harness, HarnessBuilder, SchedulerConfig, Session, StepRequest};
use dsh_session::SessionLog;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub const SERVER: &str = env!("CARGO_BIN_EXE_dsh-mcp-test-server");

/// Servers by name, each the test server with the given arguments (`["raw", …]` for the
/// hand-written one).
pub fn servers(entries: &[(&str, Vec<&str>)]) -> McpServers {
    let mut map = serde_json::Map::new();
    for (name, args) in entries {
        map.insert(name.to_string(), json!({"command": SERVER, "args": args}));
    }
    McpServers::from_json(&json!({"mcpServers": map}).to_string()).unwrap()
}

pub fn quick() -> McpOptions {
    McpOptions {
        startup_timeout: Duration::from_secs(20),
        health_check_timeout: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(2),
        ..McpOptions::default()
    }
}

pub fn code(r: &FrozenResult) -> &'static str {
    r.code().map(|c| c.as_str()).unwrap_or("ok")
}

/// A source's tools in a pipeline with one session on a memory log.
pub struct Rig {
    pub source: McpToolSource,
    pub registry: Arc<ToolRegistry>,
    pub harness: Harness,
    pub session: Session,
    pub log: SessionLog,
}

impl Rig {
    pub async fn start(servers: McpServers, options: McpOptions, hooks: Hooks) -> Rig {
        let source = McpToolSource::start_with(servers, options).await.unwrap();
        Rig::around(source, hooks).await
    }

    pub async fn around(source: McpToolSource, hooks: Hooks) -> Rig {
        let registry = Arc::new(ToolRegistry::new());
        source.register(&registry).unwrap();
        let harness = HarnessBuilder::new(registry.clone())
            .hooks(hooks)
            .build()
            .await
            .unwrap();
        let log = SessionLog::memory().await.unwrap();
        let session = harness
            .open(log.clone(), SchedulerConfig::default(), None)
            .await
            .unwrap();
        Rig {
            source,
            registry,
            harness,
            session,
            log,
        }
    }

    pub async fn one(&self, tool: &str, args: Value) -> FrozenResult {
        let calls = vec![ToolCall::new("c", tool, args)];
        self.session
            .run_step(StepRequest::new(calls))
            .await
            .unwrap()
            .results
            .remove(0)
    }

    /// The `tool/result` events of the log, as JSON.
    pub async fn logged_results(&self) -> Vec<Value> {
        self.log
            .snapshot()
            .await
            .unwrap()
            .iter()
            .filter(|e| e.body.type_str() == "tool/result")
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    pub async fn stop(self) {
        self.session.shutdown().await;
        self.harness.shutdown().await;
        self.source.shutdown().await;
    }
}
