//! The facade the agent loop holds: a [`Harness`] (the shared pipeline) opens [`Session`]s
//! (one scheduler actor and one session log each).

use crate::error::SchedulerError;
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::scheduler::{Scheduler, SchedulerArgs, SchedulerConfig, SchedulerMsg};
use crate::step::{CancelTarget, StepOutcome, StepRequest};
use dsh_core::{ApprovalResponder, Hooks, ToolRegistry};
use dsh_guards::GuardSet;
use dsh_session::{Durability, Recovery, SessionLog};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorRef};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where a harness keeps its sessions' logs, so a session can be opened again by id.
#[derive(Debug, Clone, Default)]
pub enum SessionStore {
    /// In memory: a session opened again starts afresh (tests, ephemeral agents).
    #[default]
    Memory,
    /// One JSON Lines log per session, `ROOT/<id>.jsonl`, recovered when opened again.
    Directory {
        /// The folder holding the logs.
        root: PathBuf,
        /// How durable an append is before it is acknowledged.
        durability: Durability,
    },
}

/// A session opened by id, with what its log's recovery found.
#[derive(Debug)]
pub struct OpenedSession {
    /// The session.
    pub session: Session,
    /// What recovery did (all zeros for a new session).
    pub recovery: Recovery,
}

fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Builds a [`Harness`].
pub struct HarnessBuilder {
    registry: Arc<ToolRegistry>,
    hooks: Hooks,
    guards: Option<GuardSet>,
    approval: Option<Arc<dyn ApprovalResponder>>,
    config: PipelineConfig,
    store: SessionStore,
}

impl fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("registry", &self.registry)
            .field("hooks", &self.hooks)
            .finish()
    }
}

impl HarnessBuilder {
    /// Starts from a registry, with no hooks, no approver, and a fresh guard set.
    pub fn new(registry: Arc<ToolRegistry>) -> HarnessBuilder {
        HarnessBuilder {
            registry,
            hooks: Hooks::new(),
            guards: None,
            approval: None,
            config: PipelineConfig::default(),
            store: SessionStore::Memory,
        }
    }

    /// Where sessions opened by id keep their logs (by default in memory).
    pub fn store(mut self, store: SessionStore) -> Self {
        self.store = store;
        self
    }

    /// The hook handlers.
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// A guard set shared with others (by default the harness starts its own).
    pub fn guards(mut self, guards: GuardSet) -> Self {
        self.guards = Some(guards);
        self
    }

    /// The approval responder for `ask` decisions (by default none: `ask` is `DENIED`).
    pub fn approval(mut self, responder: Arc<dyn ApprovalResponder>) -> Self {
        self.approval = Some(responder);
        self
    }

    /// Limits and timeouts.
    pub fn config(mut self, config: PipelineConfig) -> Self {
        self.config = config;
        self
    }

    /// Starts the guard set if none was given, and builds the harness.
    pub async fn build(self) -> Result<Harness, SchedulerError> {
        let guards = match self.guards {
            Some(g) => g,
            None => GuardSet::spawn(None)
                .await
                .map_err(|e| SchedulerError::Spawn(e.to_string()))?,
        };
        Ok(Harness {
            pipeline: Arc::new(Pipeline::new(
                self.registry,
                Arc::new(self.hooks),
                guards,
                self.approval,
                self.config,
            )),
            store: self.store,
        })
    }
}

/// The shared part of dsh: one pipeline (registry, hooks, guards, approval, limits) serving
/// any number of sessions.
///
/// ```
/// use std::sync::Arc;
/// use dsh_core::{ToolCall, ToolRegistry};
/// use dsh_scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
/// use dsh_session::SessionLog;
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let harness = HarnessBuilder::new(Arc::new(ToolRegistry::new())).build().await.unwrap();
/// let session = harness
///     .open(SessionLog::memory().await.unwrap(), SchedulerConfig::default(), None)
///     .await
///     .unwrap();
/// let outcome = session
///     .run_step(StepRequest::new(vec![ToolCall::new("c1", "nope", serde_json::json!({}))]))
///     .await
///     .unwrap();
/// assert_eq!(outcome.results[0].code().unwrap().as_str(), "UNKNOWN_TOOL");
/// session.shutdown().await;
/// harness.shutdown().await;
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct Harness {
    pipeline: Arc<Pipeline>,
    store: SessionStore,
}

impl Harness {
    /// The pipeline.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Opens a session writing to `log`, its scheduler linked under `supervisor` if given.
    pub async fn open(
        &self,
        log: SessionLog,
        config: SchedulerConfig,
        supervisor: Option<ActorCell>,
    ) -> Result<Session, SchedulerError> {
        let args = SchedulerArgs {
            pipeline: self.pipeline.clone(),
            log: log.clone(),
            config,
        };
        let spawned = match supervisor {
            Some(sup) => Actor::spawn_linked(None, Scheduler, args, sup).await,
            None => Actor::spawn(None, Scheduler, args).await,
        };
        let (actor, _) = spawned.map_err(|e| SchedulerError::Spawn(e.to_string()))?;
        // The session owns its log: linked under the scheduler, the writer goes when the
        // scheduler goes (even when killed), so a restarted session never finds the old
        // writer still appending to the same log.
        log.actor_cell().link(actor.get_cell());
        Ok(Session { actor, log })
    }

    /// Opens the session `id` from the harness's store: a new one, or one resumed from its log
    /// (recovered first: a torn tail cut, calls left in flight closed as `ABORTED`), continuing
    /// with the next seq and the next step. `config.first_step` is raised to what the log
    /// needs. The scheduler (and with it the writer) is linked under `supervisor` if given.
    pub async fn open_session(
        &self,
        id: &str,
        mut config: SchedulerConfig,
        supervisor: Option<ActorCell>,
    ) -> Result<OpenedSession, SchedulerError> {
        if !valid_session_id(id) {
            return Err(SchedulerError::InvalidSessionId(id.to_string()));
        }
        let (log, recovery) = match &self.store {
            SessionStore::Memory => (
                SessionLog::memory().await.map_err(SchedulerError::Log)?,
                Recovery::default(),
            ),
            SessionStore::Directory { root, durability } => {
                std::fs::create_dir_all(root).map_err(|e| {
                    SchedulerError::Log(dsh_session::SessionError::io(
                        format!("creating the session folder {}", root.display()),
                        &e,
                    ))
                })?;
                SessionLog::open_file(root.join(format!("{id}.jsonl")), *durability, None)
                    .await
                    .map_err(SchedulerError::Log)?
            }
        };
        config.first_step = config.first_step.max(recovery.next_step);
        let session = match self.open(log.clone(), config, supervisor).await {
            Ok(s) => s,
            Err(e) => {
                let _ = log.close().await;
                return Err(e);
            }
        };
        Ok(OpenedSession { session, recovery })
    }

    /// Stops the harness's guard set.
    pub async fn shutdown(&self) {
        self.pipeline.guards.shutdown().await;
    }
}

/// One session: its scheduler actor and its log.
#[derive(Clone)]
pub struct Session {
    actor: ActorRef<SchedulerMsg>,
    log: SessionLog,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("scheduler", &self.actor.get_id())
            .field("log", &self.log)
            .finish()
    }
}

impl Session {
    /// Runs one step: every call gets exactly one result, recorded before this returns.
    pub async fn run_step(&self, request: StepRequest) -> Result<StepOutcome, SchedulerError> {
        match self
            .actor
            .call(|reply| SchedulerMsg::RunStep { request, reply }, None)
            .await
        {
            Ok(CallResult::Success(answer)) => answer,
            Ok(CallResult::Timeout) => Err(SchedulerError::Unavailable("no answer".into())),
            Ok(CallResult::SenderError) => Err(SchedulerError::Unavailable(
                "the scheduler stopped before answering".into(),
            )),
            Err(e) => Err(SchedulerError::Unavailable(e.to_string())),
        }
    }

    /// Cancels a call, the running step, or the session's running and queued steps.
    pub fn cancel(&self, target: CancelTarget) -> Result<(), SchedulerError> {
        self.actor
            .send_message(SchedulerMsg::Cancel(target))
            .map_err(|e| SchedulerError::Unavailable(e.to_string()))
    }

    /// The session's log.
    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    /// The scheduler actor (for supervision).
    pub fn actor_cell(&self) -> ActorCell {
        self.actor.get_cell()
    }

    /// Cancels whatever runs at once, then shuts down (see [`Session::shutdown_within`]).
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(Duration::ZERO).await
    }

    /// Graceful shutdown: takes no more steps (queued ones are answered
    /// [`SchedulerError::ShutDown`]), lets the running step finish for up to `grace`, then
    /// cancels what is left (`ABORTED`), flushes and closes the log, and stops every actor of
    /// the session.
    pub async fn shutdown_within(&self, grace: Duration) -> ShutdownReport {
        let mut report = ShutdownReport::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self
            .actor
            .send_message(SchedulerMsg::Drain { reply: tx })
            .is_ok()
        {
            let mut rx = rx;
            match tokio::time::timeout(grace, &mut rx).await {
                Ok(_) => {}
                Err(_) => {
                    report.cancelled_in_flight = true;
                    let _ = self.cancel(CancelTarget::Session);
                    // Cancelled calls answer at once; the bound only guards a lost actor.
                    let _ = tokio::time::timeout(Duration::from_secs(10), rx).await;
                }
            }
        }
        if let Err(e) = self.log.close().await {
            tracing::warn!(error = %e, "closing the session log failed");
            report.log_error = Some(e);
        }
        let _ = self
            .actor
            .stop_and_wait(Some("shutdown".into()), Some(Duration::from_secs(10)))
            .await;
        report
    }
}

/// What a shutdown had to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShutdownReport {
    /// The grace ran out and the running step was cancelled.
    pub cancelled_in_flight: bool,
    /// Closing the log failed.
    pub log_error: Option<dsh_session::SessionError>,
}
