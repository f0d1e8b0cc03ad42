//! A long-running service that embeds dsh: several sessions at once under the service's own
//! supervisor, a tool that panics, a session whose actor is killed and restarted from its log,
//! and a clean shutdown on Ctrl-C (or when the scripted traffic ends).
//!
//! `cargo run --example service` — add `-- --serve` to keep serving until Ctrl-C.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

use async_trait::async_trait;
use dsh::core::{
    ExecutionMode, ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry, live,
};
use dsh::scheduler::{
    Harness, HarnessBuilder, SchedulerConfig, SchedulerError, Session, SessionStore, StepRequest,
};
use dsh::session::{Durability, SessionError};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sleeps a little and answers; panics when asked to.
struct Work;

#[async_trait]
impl ToolDefinition for Work {
    fn name(&self) -> &str {
        "work"
    }
    fn description(&self) -> &str {
        "Does a little work."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}, "panic": {"type": "boolean"}}})
    }
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Parallel
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
        if input["panic"].as_bool() == Some(true) {
            panic!("the work tool fell over");
        }
        let ms = input["ms"].as_u64().unwrap_or(20);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!(format!("worked {ms} ms"))),
            r = ctx.signal.cancelled() => Err(ToolFailure::new(format!("stopped: {r}"))),
        }
    }
}

type Sessions = Arc<Mutex<HashMap<String, Session>>>;

/// The service's own supervisor: sessions are linked under it, and it reopens a session from
/// its log when the session's actor dies.
struct ServiceSupervisor;

struct SupervisorState {
    harness: Harness,
    sessions: Sessions,
}

async fn open(
    harness: &Harness,
    id: &str,
    supervisor: ActorCell,
) -> Result<Session, SchedulerError> {
    loop {
        match harness
            .open_session(id, SchedulerConfig::default(), Some(supervisor.clone()))
            .await
        {
            Ok(opened) => {
                let r = opened.recovery;
                if r.repaired() {
                    println!(
                        "[{id}] recovered: closed {:?}, continuing at step {}",
                        r.closed_calls, r.next_step
                    );
                }
                return Ok(opened.session);
            }
            // The dead session's writer lets go of its log a moment after the actor dies.
            Err(SchedulerError::Log(SessionError::InUse(_))) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

impl Actor for ServiceSupervisor {
    type Msg = ();
    type State = SupervisorState;
    type Arguments = (Harness, Sessions);

    async fn pre_start(
        &self,
        _myself: ActorRef<()>,
        (harness, sessions): Self::Arguments,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        Ok(SupervisorState { harness, sessions })
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        evt: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match &evt {
            SupervisionEvent::ActorTerminated(c, _, why) => (c.get_id(), format!("{why:?}")),
            SupervisionEvent::ActorFailed(c, e) => (c.get_id(), e.to_string()),
            _ => return Ok(()),
        };
        let dead = state
            .sessions
            .lock()
            .unwrap()
            .iter()
            .find(|(_, s)| s.actor_cell().get_id() == cell)
            .map(|(id, _)| id.clone());
        if let Some(id) = dead {
            if why.contains("shutdown") {
                return Ok(());
            }
            println!("[{id}] session actor ended ({why}); restarting it from its log");
            let session = open(&state.harness, &id, myself.get_cell()).await?;
            state.sessions.lock().unwrap().insert(id, session);
        }
        Ok(())
    }

    async fn handle(
        &self,
        _m: ActorRef<()>,
        _msg: (),
        _s: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

fn current(sessions: &Sessions, id: &str) -> Option<Session> {
    sessions.lock().unwrap().get(id).cloned()
}

/// Each session sends a few steps; one asks for a panic; one session is killed half way.
async fn traffic(sessions: Sessions, rounds: usize) {
    let ids: Vec<String> = sessions.lock().unwrap().keys().cloned().collect();
    for round in 0..rounds {
        let mut tasks = Vec::new();
        for id in &ids {
            let Some(session) = current(&sessions, id) else {
                continue;
            };
            let id = id.clone();
            tasks.push(tokio::spawn(async move {
                let calls = vec![
                    ToolCall::new("a", "work", json!({"ms": 10})),
                    ToolCall::new(
                        "b",
                        "work",
                        json!({"ms": 30, "panic": round == 1 && id == "beta"}),
                    ),
                ];
                match session.run_step(StepRequest::new(calls)).await {
                    Ok(out) => {
                        let codes: Vec<_> = out
                            .results
                            .iter()
                            .map(|r| r.code().map_or("ok", |c| c.as_str()))
                            .collect();
                        println!("[{id}] step {}: {codes:?}", out.step);
                    }
                    Err(e) => println!("[{id}] step failed: {e}"),
                }
            }));
        }
        if round == 2
            && let Some(gamma) = current(&sessions, "gamma")
        {
            println!("[gamma] killing its actor to show the restart");
            gamma.actor_cell().kill();
        }
        for t in tasks {
            let _ = t.await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main]
async fn main() {
    let serve = std::env::args().any(|a| a == "--serve");
    let dir = std::env::temp_dir().join(format!("dsh-service-{}", std::process::id()));
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Work).unwrap();
    let harness = HarnessBuilder::new(registry)
        .store(SessionStore::Directory {
            root: dir.clone(),
            durability: Durability::Batch,
        })
        .build()
        .await
        .unwrap();
    let sessions: Sessions = Arc::default();
    let (supervisor, supervisor_done) =
        Actor::spawn(None, ServiceSupervisor, (harness.clone(), sessions.clone()))
            .await
            .unwrap();
    for id in ["alpha", "beta", "gamma"] {
        let session = open(&harness, id, supervisor.get_cell()).await.unwrap();
        sessions.lock().unwrap().insert(id.to_string(), session);
    }
    println!("serving 3 sessions; logs in {}", dir.display());

    let rounds = if serve { usize::MAX } else { 5 };
    tokio::select! {
        _ = traffic(sessions.clone(), rounds) => println!("traffic done"),
        _ = tokio::signal::ctrl_c() => println!("Ctrl-C: shutting down"),
    }

    // Graceful shutdown: in-flight calls get a second, then everything stops.
    let all: Vec<(String, Session)> = sessions.lock().unwrap().drain().collect();
    for (id, session) in all {
        let report = session.shutdown_within(Duration::from_secs(1)).await;
        println!(
            "[{id}] shut down (in-flight cancelled: {})",
            report.cancelled_in_flight
        );
    }
    supervisor.stop(None);
    let _ = supervisor_done.await;
    harness.shutdown().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!("live dsh actors: {}", live::live_actors());
    for id in ["alpha", "beta", "gamma"] {
        let path = dir.join(format!("{id}.jsonl"));
        match dsh::session::check::check_file(&path) {
            Ok(_) => println!("[{id}] log checks out: {}", path.display()),
            Err(v) => println!("[{id}] log violation: {v}"),
        }
    }
}
