//! The facade the agent loop holds: a [`Harness`] (the shared pipeline) opens [`Session`]s
//! (one scheduler actor and one session log each) and keeps a table of the ones open, so that
//! an id is served by one session at a time and [`Harness::shutdown`] closes them all.
//!
//! The table does not keep a session alive: dropping the last handle of a session shuts it
//! down (as [`Session::shutdown`] does, in a task on the runtime: a call in flight is recorded
//! `ABORTED`, the log is closed and its lock released, every actor stops, and the session
//! leaves the table), the way tokio's handles end their tasks.

use crate::error::SchedulerError;
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::scheduler::{Pushed, Scheduler, SchedulerArgs, SchedulerConfig, SchedulerMsg};
use crate::step::{CancelTarget, DeferredContext, StepOutcome, StepRequest};
use dsh_core::around::TimeoutLayer;
use dsh_core::{
    ApprovalResponder, FrozenResult, Hooks, ProtectedPaths, ResumeFromLog, SessionEvent, Shutdown,
    ToolCall, ToolRegistry,
};
use dsh_guards::GuardSet;
use dsh_session::{Durability, Recovery, SessionError, SessionLog};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorId, ActorRef, ActorStatus};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
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
    /// One session a row set in a PostgreSQL database, so any node reaching it can resume any
    /// session: opening takes the session's lease (waiting for another writer's to run out),
    /// recovers it as a file is recovered, and fences the writer by epoch from then on.
    #[cfg(feature = "postgres")]
    Postgres {
        /// `postgres://user@host:port/db`.
        url: String,
        /// `batch`: group commit; `always`: one transaction per append; `none`: asynchronous
        /// commit.
        durability: Durability,
        /// The lease: its length, how long opening waits for it, and this node's name. Its
        /// `watch` is not used: each session is watched on its own, and a session whose lease
        /// is lost has its calls cancelled.
        lease: dsh_session::postgres::LeaseOptions,
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

/// The step a session continuing `events` takes next: the log's last step, plus one.
fn next_step(events: &[SessionEvent]) -> u64 {
    events
        .iter()
        .map(|e| e.step)
        .max()
        .map_or(1, |last| last.saturating_add(1))
}

/// Which timeout wrapper the builder installs.
#[derive(Debug, Clone)]
enum TimeoutChoice {
    /// `TimeoutLayer::default()` with the pipeline's `body_grace`.
    Default,
    /// The embedder's own.
    Layer(TimeoutLayer),
    /// None.
    Off,
}

/// Builds a [`Harness`].
pub struct HarnessBuilder {
    registry: Arc<ToolRegistry>,
    hooks: Hooks,
    guards: Option<GuardSet>,
    approval: Option<Arc<dyn ApprovalResponder>>,
    config: PipelineConfig,
    store: SessionStore,
    timeout: TimeoutChoice,
    supervisor: Option<ActorCell>,
    protected: ProtectedPaths,
    owned: Vec<Arc<dyn Shutdown>>,
    resumers: Vec<Arc<dyn ResumeFromLog>>,
}

impl fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("registry", &self.registry)
            .field("hooks", &self.hooks)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl HarnessBuilder {
    /// Starts from a registry, with no hooks, no approver, a fresh guard set, and the timeout
    /// wrapper (so a definition's `timeout_ms` applies; see [`HarnessBuilder::timeout`]).
    pub fn new(registry: Arc<ToolRegistry>) -> HarnessBuilder {
        HarnessBuilder {
            registry,
            hooks: Hooks::new(),
            guards: None,
            approval: None,
            config: PipelineConfig::default(),
            store: SessionStore::Memory,
            timeout: TimeoutChoice::Default,
            supervisor: None,
            protected: ProtectedPaths::new(),
            owned: Vec::new(),
            resumers: Vec::new(),
        }
    }

    /// Gives the harness a part whose memory a session's log rebuilds (an `FsToolset`: the
    /// reads read-before-edit remembers): every session the harness opens on a log that
    /// already holds events ([`Harness::open`], [`Harness::open_session`]) hands them to it
    /// before its first step, in the order given. May be called any number of times.
    pub fn resumes(mut self, part: Arc<dyn ResumeFromLog>) -> Self {
        self.resumers.push(part);
        self
    }

    /// Gives the harness a part to stop with itself (an `FsToolset`, whose monitor actor the
    /// file tools ask): [`Harness::shutdown`] shuts it down after every session, in the order
    /// given, so one call stops everything the harness started. May be called any number of
    /// times.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use async_trait::async_trait;
    /// use dsh_core::{Shutdown, ToolRegistry};
    /// use dsh_scheduler::HarnessBuilder;
    ///
    /// struct Part(Arc<AtomicBool>);
    /// #[async_trait]
    /// impl Shutdown for Part {
    ///     fn name(&self) -> &str { "part" }
    ///     async fn shutdown(&self) { self.0.store(true, Ordering::SeqCst); }
    /// }
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let stopped = Arc::new(AtomicBool::new(false));
    /// let harness = HarnessBuilder::new(Arc::new(ToolRegistry::new()))
    ///     .owns(Part(stopped.clone()))
    ///     .build()
    ///     .await
    ///     .unwrap();
    /// harness.shutdown().await;
    /// assert!(stopped.load(Ordering::SeqCst));
    /// # });
    /// ```
    pub fn owns(mut self, part: impl Shutdown + 'static) -> Self {
        self.owned.push(Arc::new(part));
        self
    }

    /// Protects `path`, one of the embedder's own files (a session log, a policy file, a
    /// hook script, an output folder and everything in it): no tool may write it, whatever
    /// the rules or an approver say. May be called any number of times. The check is made
    /// by the tools as they write (`ToolContext::policy`), on the resolved target, so a
    /// symlink or a hard link to a protected file is refused too; a path may be protected
    /// before it exists. Reading is not refused.
    pub fn protect(mut self, path: impl AsRef<Path>) -> Self {
        self.protected.protect(path);
        self
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

    /// A guard set shared with others (by default the harness starts its own). A shared set is
    /// left running by [`Harness::shutdown`]: whoever started it stops it.
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

    /// The `tools/execute` timeout wrapper the harness installs, innermost: after every
    /// wrapper of [`HarnessBuilder::hooks`], right around the body, so each attempt of a retry
    /// gets its own deadline and a metrics wrapper sees a timeout as a failure. Without this
    /// call the harness installs `TimeoutLayer::default()` with the grace of
    /// [`PipelineConfig::body_grace`]: it reads each definition's `timeout_ms` (tools without
    /// one run unbounded). Pass a layer to set a default deadline for every tool. Do not also
    /// add a `TimeoutLayer` to the hooks: the two would both apply.
    pub fn timeout(mut self, layer: TimeoutLayer) -> Self {
        self.timeout = TimeoutChoice::Layer(layer);
        self
    }

    /// Installs no timeout wrapper: a definition's `timeout_ms` then does nothing unless a
    /// wrapper of the hooks reads it.
    pub fn without_timeout(mut self) -> Self {
        self.timeout = TimeoutChoice::Off;
        self
    }

    /// Links the guard set the harness starts under `supervisor`, an actor of the host: if
    /// the guard set fails for good (its own supervisor, which restarts the guard-set actor,
    /// dies or fails), the host hears it as a supervision event. The host's actor must
    /// override `handle_supervisor_evt` (ractor's default stops it when a child ends), and
    /// also hears the guard set's normal end at [`Harness::shutdown`]. Ignored when a shared
    /// guard set is given with [`HarnessBuilder::guards`]. Sessions are linked where
    /// [`Harness::open`] and [`Harness::open_session`] are told.
    pub fn supervisor(mut self, supervisor: ActorCell) -> Self {
        self.supervisor = Some(supervisor);
        self
    }

    /// Starts the guard set if none was given, and builds the harness.
    pub async fn build(self) -> Result<Harness, SchedulerError> {
        let (guards, owns_guards) = match self.guards {
            Some(g) => (g, false),
            None => (
                GuardSet::spawn(self.supervisor)
                    .await
                    .map_err(|e| SchedulerError::Spawn(e.to_string()))?,
                true,
            ),
        };
        let mut hooks = self.hooks;
        match self.timeout {
            TimeoutChoice::Default => {
                hooks.around(TimeoutLayer::default().with_grace(self.config.body_grace));
            }
            TimeoutChoice::Layer(layer) => {
                hooks.around(layer);
            }
            TimeoutChoice::Off => {}
        }
        Ok(Harness {
            pipeline: Arc::new(
                Pipeline::new(
                    self.registry,
                    Arc::new(hooks),
                    guards,
                    self.approval,
                    self.config,
                )
                .protect(self.protected),
            ),
            store: self.store,
            table: Arc::default(),
            owns_guards,
            owned: Arc::new(self.owned),
            resumers: Arc::new(self.resumers),
        })
    }
}

/// A session in the table: its scheduler, and the session while a handle of it is held.
#[derive(Debug)]
struct Entry {
    actor: ActorRef<SchedulerMsg>,
    session: Weak<SessionInner>,
}

/// The sessions a harness has open.
#[derive(Debug, Default)]
struct Table {
    /// Set by [`Harness::shutdown`]: no more sessions.
    closed: bool,
    /// Every session opened and not yet shut down, by its scheduler's id (a dropped session
    /// stays until its shutdown has closed its log).
    open: HashMap<ActorId, Entry>,
    /// The shutdowns of dropped sessions, which [`Harness::shutdown`] waits for.
    dropping: Vec<tokio::task::JoinHandle<()>>,
    /// The ids of sessions opened by id: the scheduler serving each, or none while it opens.
    ids: HashMap<String, Option<ActorId>>,
    /// Sessions that died without a shutdown are dropped from the table when it grows to this.
    prune_at: usize,
}

fn lock(table: &Mutex<Table>) -> MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|e| e.into_inner())
}

/// True until the actor has begun to stop.
fn alive(actor: &ActorRef<SchedulerMsg>) -> bool {
    actor.get_status() < ActorStatus::Stopping
}

/// Once the session's lease is lost (its owner was paused past it, or another node took the
/// session over), cancels every call of the session: fencing keeps this node out of the log,
/// and this stops its tools' side effects (a shell command's process group is killed with its
/// call). Ends with the session.
#[cfg(feature = "postgres")]
fn cancel_when_lease_lost(actor: ActorRef<SchedulerMsg>, watch: dsh_session::postgres::LeaseWatch) {
    tokio::spawn(async move {
        let lost = watch.lost();
        tokio::pin!(lost);
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                why = &mut lost => {
                    tracing::error!(reason = %why, "the session's lease is lost: cancelling its calls");
                    let _ = actor.send_message(SchedulerMsg::Cancel(CancelTarget::Session));
                    return;
                }
                _ = ticker.tick() => {
                    if !alive(&actor) {
                        return;
                    }
                }
            }
        }
    });
}

impl Table {
    fn insert(&mut self, session: &Session) {
        if self.open.len() >= self.prune_at {
            self.open.retain(|_, s| alive(&s.actor));
            let open = &self.open;
            self.ids
                .retain(|_, a| a.as_ref().is_none_or(|a| open.contains_key(a)));
            self.prune_at = (self.open.len() * 2).max(64);
        }
        self.dropping.retain(|d| !d.is_finished());
        let inner = &session.inner;
        let actor = inner.actor.get_id();
        if let Some(id) = &inner.id {
            self.ids.insert(id.to_string(), Some(actor));
        }
        self.open.insert(
            actor,
            Entry {
                actor: inner.actor.clone(),
                session: Arc::downgrade(inner),
            },
        );
    }

    fn remove(&mut self, actor: ActorId, id: Option<&str>) {
        self.open.remove(&actor);
        if let Some(id) = id
            && self.ids.get(id) == Some(&Some(actor))
        {
            self.ids.remove(id);
        }
    }

    /// Takes `id` for a session about to open, unless a live session has it.
    fn reserve(&mut self, id: &str) -> Result<(), SchedulerError> {
        if self.closed {
            return Err(SchedulerError::ShutDown);
        }
        match self.ids.get(id) {
            None => {}
            Some(None) => return Err(SchedulerError::AlreadyOpen(id.to_string())),
            Some(Some(actor)) => {
                let actor = *actor;
                if self.open.get(&actor).is_some_and(|s| alive(&s.actor)) {
                    return Err(SchedulerError::AlreadyOpen(id.to_string()));
                }
                // Its session died without a shutdown (killed, failed): the id is free again.
                self.open.remove(&actor);
            }
        }
        self.ids.insert(id.to_string(), None);
        Ok(())
    }

    /// Gives back an id reserved by a session that did not open.
    fn release(&mut self, id: &str) {
        if self.ids.get(id) == Some(&None) {
            self.ids.remove(id);
        }
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
#[derive(Clone)]
pub struct Harness {
    pipeline: Arc<Pipeline>,
    store: SessionStore,
    table: Arc<Mutex<Table>>,
    owns_guards: bool,
    /// Parts given with [`HarnessBuilder::owns`], stopped after the sessions.
    owned: Arc<Vec<Arc<dyn Shutdown>>>,
    /// Parts given with [`HarnessBuilder::resumes`], told the log a session continues from.
    resumers: Arc<Vec<Arc<dyn ResumeFromLog>>>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("store", &self.store)
            .field("owns_guards", &self.owns_guards)
            .field(
                "owned",
                &self.owned.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// The pipeline.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Opens a session writing to `log`, its scheduler linked under `supervisor` if given.
    /// Refused with [`SchedulerError::ShutDown`] once the harness is shutting down.
    ///
    /// A log that already holds events is continued: the session's first step comes after
    /// the log's last (`config.first_step` is raised to it), and the parts given with
    /// [`HarnessBuilder::resumes`] rebuild what the log remembers before the first step.
    pub async fn open(
        &self,
        log: SessionLog,
        config: SchedulerConfig,
        supervisor: Option<ActorCell>,
    ) -> Result<Session, SchedulerError> {
        self.spawn_session(log, config, supervisor, None).await
    }

    async fn spawn_session(
        &self,
        log: SessionLog,
        config: SchedulerConfig,
        supervisor: Option<ActorCell>,
        id: Option<Arc<str>>,
    ) -> Result<Session, SchedulerError> {
        if lock(&self.table).closed {
            return Err(SchedulerError::ShutDown);
        }
        let config = self.resume(&log, config).await?;
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
        let session = Session {
            inner: Arc::new(SessionInner {
                actor,
                log,
                id,
                table: Arc::downgrade(&self.table),
                shutting_down: AtomicBool::new(false),
                next_token: AtomicU64::new(0),
            }),
        };
        let refused = {
            let mut table = lock(&self.table);
            if table.closed {
                true
            } else {
                table.insert(&session);
                false
            }
        };
        if refused {
            // The harness began to shut down while this session started.
            session.shutdown().await;
            return Err(SchedulerError::ShutDown);
        }
        Ok(session)
    }

    /// Continues from what `log` holds: the step after its last, and the memory of the parts
    /// that rebuild it (see [`HarnessBuilder::resumes`]). A log that cannot be read opens no
    /// session; a part that fails to rebuild is reported, and its checks refuse what they
    /// cannot vouch for.
    async fn resume(
        &self,
        log: &SessionLog,
        mut config: SchedulerConfig,
    ) -> Result<SchedulerConfig, SchedulerError> {
        let events = log.snapshot().await.map_err(SchedulerError::Log)?;
        config.first_step = config.first_step.max(next_step(&events));
        if events.is_empty() {
            return Ok(config);
        }
        for part in self.resumers.iter() {
            match part.resume(&events).await {
                Ok(()) => tracing::debug!(
                    part = part.name(),
                    events = events.len(),
                    "resumed from the log"
                ),
                Err(e) => {
                    tracing::warn!(part = part.name(), error = %e, "could not rebuild its memory from the log")
                }
            }
        }
        Ok(config)
    }

    /// Opens the session `id` from the harness's store: a new one, or one resumed from its log
    /// (recovered first: a torn tail cut, calls left in flight closed as `ABORTED`), continuing
    /// with the next seq and the next step. `config.first_step` is raised to what the log
    /// needs. The scheduler (and with it the writer) is linked under `supervisor` if given.
    ///
    /// An id is served by one session at a time: while a session opened with `id` is alive,
    /// opening it again is [`SchedulerError::AlreadyOpen`] (whatever the store). Once that
    /// session is shut down, or has died (killed, failed: its host's supervisor hears of it),
    /// the id can be opened again. A harness that is shutting down opens nothing
    /// ([`SchedulerError::ShutDown`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dsh_core::{ToolCall, ToolRegistry};
    /// use dsh_scheduler::{HarnessBuilder, SchedulerConfig, SchedulerError, SessionStore, StepRequest};
    /// use dsh_session::Durability;
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let root = std::env::temp_dir().join(format!("dsh-doc-open-session-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&root);
    /// let harness = HarnessBuilder::new(Arc::new(ToolRegistry::new()))
    ///     .store(SessionStore::Directory { root: root.clone(), durability: Durability::Batch })
    ///     .build()
    ///     .await
    ///     .unwrap();
    /// let opened = harness.open_session("alpha", SchedulerConfig::default(), None).await.unwrap();
    /// assert_eq!(opened.recovery.next_step, 1, "a new session");
    /// let step = StepRequest::new(vec![ToolCall::new("c1", "nope", serde_json::json!({}))]);
    /// assert_eq!(opened.session.run_step(step).await.unwrap().step, 1);
    ///
    /// // While it is open, its id is taken.
    /// let twice = harness.open_session("alpha", SchedulerConfig::default(), None).await;
    /// assert!(matches!(twice, Err(SchedulerError::AlreadyOpen(id)) if id == "alpha"));
    ///
    /// // Shut down, it can be opened again, and continues from its log.
    /// opened.session.shutdown().await;
    /// let again = harness.open_session("alpha", SchedulerConfig::default(), None).await.unwrap();
    /// assert_eq!(again.recovery.next_step, 2);
    /// assert_eq!(again.session.log().snapshot().await.unwrap().len(), 2);
    /// harness.shutdown().await; // shuts `again.session` down too
    /// # std::fs::remove_dir_all(&root).unwrap();
    /// # });
    /// ```
    pub async fn open_session(
        &self,
        id: &str,
        config: SchedulerConfig,
        supervisor: Option<ActorCell>,
    ) -> Result<OpenedSession, SchedulerError> {
        if !valid_session_id(id) {
            return Err(SchedulerError::InvalidSessionId(id.to_string()));
        }
        lock(&self.table).reserve(id)?;
        let opened = self.open_reserved(id, config, supervisor).await;
        if opened.is_err() {
            lock(&self.table).release(id);
        }
        opened
    }

    async fn open_reserved(
        &self,
        id: &str,
        mut config: SchedulerConfig,
        supervisor: Option<ActorCell>,
    ) -> Result<OpenedSession, SchedulerError> {
        #[cfg(feature = "postgres")]
        let mut lost_lease = None;
        let (log, recovery) = match &self.store {
            SessionStore::Memory => (
                SessionLog::memory().await.map_err(SchedulerError::Log)?,
                Recovery::default(),
            ),
            SessionStore::Directory { root, durability } => {
                std::fs::create_dir_all(root).map_err(|e| {
                    SchedulerError::Log(SessionError::io(
                        format!("creating the session folder {}", root.display()),
                        &e,
                    ))
                })?;
                SessionLog::open_file(root.join(format!("{id}.jsonl")), *durability, None)
                    .await
                    .map_err(SchedulerError::Log)?
            }
            #[cfg(feature = "postgres")]
            SessionStore::Postgres {
                url,
                durability,
                lease,
            } => {
                // Each session's lease is watched on its own: losing it stops that session's
                // calls only.
                let watch = dsh_session::postgres::LeaseWatch::default();
                let lease = dsh_session::postgres::LeaseOptions {
                    watch: watch.clone(),
                    ..lease.clone()
                };
                lost_lease = Some(watch);
                SessionLog::open_postgres(url, id, *durability, lease, None)
                    .await
                    .map_err(SchedulerError::Log)?
            }
        };
        config.first_step = config.first_step.max(recovery.next_step);
        let session = match self
            .spawn_session(log.clone(), config, supervisor, Some(Arc::from(id)))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                let _ = log.close().await;
                return Err(e);
            }
        };
        #[cfg(feature = "postgres")]
        if let Some(watch) = lost_lease {
            cancel_when_lease_lost(session.inner.actor.clone(), watch);
        }
        Ok(OpenedSession { session, recovery })
    }

    /// How many sessions are open (opened, not shut down, and alive).
    pub fn open_sessions(&self) -> usize {
        lock(&self.table)
            .open
            .values()
            .filter(|e| alive(&e.actor))
            .count()
    }

    /// Shuts the harness down at once: [`Harness::shutdown_within`] with no grace.
    pub async fn shutdown(&self) -> HarnessShutdownReport {
        self.shutdown_within(Duration::ZERO).await
    }

    /// Graceful shutdown of everything the harness started: it opens no more sessions, shuts
    /// down every session still open, all at once and each as [`Session::shutdown_within`]
    /// does (running steps get `grace` to finish, then are cancelled; logs are flushed and
    /// closed; every actor stops), then stops the guard set it started (one given with
    /// [`HarnessBuilder::guards`] is left running), then the parts given with
    /// [`HarnessBuilder::owns`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use dsh_core::ToolRegistry;
    /// use dsh_scheduler::{HarnessBuilder, SchedulerConfig, SchedulerError, StepRequest};
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let harness = HarnessBuilder::new(Arc::new(ToolRegistry::new())).build().await.unwrap();
    /// let a = harness.open_session("a", SchedulerConfig::default(), None).await.unwrap().session;
    /// let b = harness.open_session("b", SchedulerConfig::default(), None).await.unwrap().session;
    /// assert_eq!(harness.open_sessions(), 2);
    ///
    /// let report = harness.shutdown_within(Duration::from_secs(1)).await;
    /// assert_eq!(report.sessions, 2);
    /// assert_eq!(harness.open_sessions(), 0);
    /// for session in [a, b] {
    ///     let refused = session.run_step(StepRequest::new(vec![])).await;
    ///     assert!(matches!(refused, Err(SchedulerError::ShutDown | SchedulerError::Unavailable(_))));
    /// }
    /// let late = harness.open_session("c", SchedulerConfig::default(), None).await;
    /// assert!(matches!(late, Err(SchedulerError::ShutDown)));
    /// # });
    /// ```
    pub async fn shutdown_within(&self, grace: Duration) -> HarnessShutdownReport {
        let (sessions, dropping): (Vec<Session>, Vec<_>) = {
            let mut table = lock(&self.table);
            table.closed = true;
            let sessions = table
                .open
                .values()
                .filter(|e| alive(&e.actor))
                .filter_map(|e| e.session.upgrade())
                .map(|inner| Session { inner })
                .collect();
            (sessions, std::mem::take(&mut table.dropping))
        };
        let reports =
            futures::future::join_all(sessions.iter().map(|s| s.shutdown_within(grace))).await;
        // Dropped sessions shut themselves down; wait for them (bounded like the rest).
        for dropped in dropping {
            let _ = tokio::time::timeout(Duration::from_secs(15), dropped).await;
        }
        {
            let mut table = lock(&self.table);
            table.open.clear();
            table.ids.clear();
        }
        if self.owns_guards {
            self.pipeline.guards.shutdown().await;
        }
        for part in self.owned.iter() {
            tracing::debug!(part = part.name(), "stopping a part the harness owns");
            part.shutdown().await;
        }
        HarnessShutdownReport {
            sessions: reports.len(),
            cancelled_in_flight: reports.iter().filter(|r| r.cancelled_in_flight).count(),
            log_errors: reports.into_iter().filter_map(|r| r.log_error).collect(),
        }
    }
}

/// What [`Harness::shutdown`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HarnessShutdownReport {
    /// Sessions that were still open (a handle held) and were shut down.
    pub sessions: usize,
    /// Of those, the ones that had a step running when the shutdown began, which outlived the
    /// grace and was cancelled (an idle session is never counted).
    pub cancelled_in_flight: usize,
    /// Failures met closing their logs.
    pub log_errors: Vec<SessionError>,
}

/// One session: its scheduler actor and its log. Clones share the session; dropping the last
/// one shuts it down (see [`Session::shutdown`]), in a task on the current tokio runtime (with
/// no runtime, its scheduler is stopped, and the writer with it).
#[derive(Clone)]
pub struct Session {
    inner: Arc<SessionInner>,
}

struct SessionInner {
    actor: ActorRef<SchedulerMsg>,
    log: SessionLog,
    /// The id it was opened with ([`Harness::open_session`]).
    id: Option<Arc<str>>,
    /// The harness's table, left when the session is shut down.
    table: Weak<Mutex<Table>>,
    /// A shutdown has begun: dropping the last handle has nothing left to do.
    shutting_down: AtomicBool,
    /// Names the steps opened through this session's handles.
    next_token: AtomicU64,
}

impl fmt::Debug for SessionInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("scheduler", &self.actor.get_id())
            .field("log", &self.log)
            .finish()
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Drop for SessionInner {
    fn drop(&mut self) {
        if self.shutting_down.swap(true, Ordering::SeqCst) {
            return;
        }
        let parts = Parts {
            actor: self.actor.clone(),
            log: self.log.clone(),
            id: self.id.clone(),
            table: self.table.clone(),
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::debug!(scheduler = %self.actor.get_id(), "the last handle of a session was dropped; shutting it down");
                let table = self.table.upgrade();
                let task = runtime.spawn(async move {
                    parts.shut_down(Duration::ZERO).await;
                });
                if let Some(table) = table {
                    lock(&table).dropping.push(task);
                }
            }
            Err(_) => {
                // No runtime to run a graceful shutdown on: stop the scheduler (its writer is
                // linked under it and goes too); recovery closes what was in flight.
                tracing::warn!(scheduler = %self.actor.get_id(), "a session was dropped outside a tokio runtime; stopping it without recording its calls in flight");
                self.actor.stop(Some("session dropped".into()));
            }
        }
    }
}

/// What a shutdown needs, owned, so it can outlive the session's handles.
struct Parts {
    actor: ActorRef<SchedulerMsg>,
    log: SessionLog,
    id: Option<Arc<str>>,
    table: Weak<Mutex<Table>>,
}

impl Parts {
    async fn shut_down(&self, grace: Duration) -> ShutdownReport {
        let mut report = ShutdownReport::default();
        let (busy_tx, busy_rx) = tokio::sync::oneshot::channel();
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self
            .actor
            .send_message(SchedulerMsg::Drain {
                busy: busy_tx,
                reply: tx,
            })
            .is_ok()
        {
            let busy = matches!(
                tokio::time::timeout(Duration::from_secs(10), busy_rx).await,
                Ok(Ok(true))
            );
            let mut rx = rx;
            if busy && tokio::time::timeout(grace, &mut rx).await.is_err() {
                report.cancelled_in_flight = true;
                let _ = self
                    .actor
                    .send_message(SchedulerMsg::Cancel(CancelTarget::Session));
                // Cancelled calls answer within the pipeline's `cancelled_deadline`; the
                // bound only guards a lost actor.
                let _ = tokio::time::timeout(Duration::from_secs(10), rx).await;
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
        if let Some(table) = self.table.upgrade() {
            lock(&table).remove(self.actor.get_id(), self.id.as_deref());
        }
        report
    }
}

impl Session {
    /// Runs one step: every call gets exactly one result, recorded before this returns. It is
    /// an open step ([`Session::open_step`]) with every call pushed at once, then finished.
    pub async fn run_step(&self, request: StepRequest) -> Result<StepOutcome, SchedulerError> {
        let step = self.open_step_as(request.agent)?;
        step.push_all(request.calls)?;
        step.finish().await
    }

    /// Opens a step of the `main` agent that calls join as they arrive (a model streaming its
    /// tool-call blocks, or the concurrent requests of an MCP client). See [`OpenStep`].
    pub fn open_step(&self) -> Result<OpenStep, SchedulerError> {
        self.open_step_as("main")
    }

    /// Opens a step of `agent`. Steps run one at a time, in the order they were opened: a
    /// step opened while another runs gathers its calls and begins when that one ends.
    pub fn open_step_as(&self, agent: impl Into<String>) -> Result<OpenStep, SchedulerError> {
        self.open_step_with(agent, DeferredContext::UserMessages)
    }

    /// Opens a step of `agent` whose deferred context goes where `context` says.
    pub fn open_step_with(
        &self,
        agent: impl Into<String>,
        context: DeferredContext,
    ) -> Result<OpenStep, SchedulerError> {
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
        self.inner
            .actor
            .send_message(SchedulerMsg::Open {
                token,
                agent: agent.into(),
                context,
            })
            .map_err(|e| SchedulerError::Unavailable(e.to_string()))?;
        Ok(OpenStep {
            session: self.clone(),
            token,
            next_ticket: AtomicU64::new(0),
            finished: false,
        })
    }

    /// Cancels a call, the running step, or the session's running and queued steps. It only
    /// asks: the cancelled calls end at once all the same (`ABORTED_BEFORE_DISPATCH` if their
    /// body had not started, `ABORTED` if it had, even a body that ignores its signal), and
    /// calls the step had not reached get a synthesized pair. The step still answers through
    /// its [`Session::run_step`], with every result recorded; the session takes the next step
    /// as usual. Unknown call ids are ignored.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use async_trait::async_trait;
    /// use dsh_core::{ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
    /// use dsh_scheduler::{CancelTarget, HarnessBuilder, SchedulerConfig, StepRequest};
    /// use serde_json::{json, Value};
    ///
    /// /// Waits until it is cancelled.
    /// struct Wait;
    /// #[async_trait]
    /// impl ToolDefinition for Wait {
    ///     fn name(&self) -> &str { "wait" }
    ///     fn description(&self) -> &str { "waits" }
    ///     fn input_schema(&self) -> Value { json!({"type": "object"}) }
    ///     async fn execute(&self, _: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
    ///         let why = ctx.signal.cancelled().await;
    ///         Err(ToolFailure::new(format!("stopped: {why}")))
    ///     }
    /// }
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let registry = Arc::new(ToolRegistry::new());
    /// registry.register(Wait).unwrap();
    /// let harness = HarnessBuilder::new(registry).build().await.unwrap();
    /// let session = harness.open_session("s", SchedulerConfig::default(), None).await.unwrap().session;
    /// let step = tokio::spawn({
    ///     let session = session.clone();
    ///     async move {
    ///         let calls = vec![ToolCall::new("w1", "wait", json!({})), ToolCall::new("w2", "wait", json!({}))];
    ///         session.run_step(StepRequest::new(calls)).await
    ///     }
    /// });
    /// // Once w1's tool/call is in the log, the step is running.
    /// while session.log().snapshot().await.unwrap().is_empty() {
    ///     tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    /// }
    /// session.cancel(CancelTarget::Step).unwrap();
    /// let outcome = step.await.unwrap().unwrap();
    /// // w1 was running (ABORTED) or about to (ABORTED_BEFORE_DISPATCH); w2 was never reached.
    /// assert!(outcome.results[0].code().unwrap().is_abort());
    /// assert_eq!(outcome.results[1].code().unwrap().as_str(), "ABORTED_BEFORE_DISPATCH");
    /// assert_eq!(session.log().snapshot().await.unwrap().len(), 4, "two calls, two results");
    /// harness.shutdown().await;
    /// # });
    /// ```
    pub fn cancel(&self, target: CancelTarget) -> Result<(), SchedulerError> {
        self.inner
            .actor
            .send_message(SchedulerMsg::Cancel(target))
            .map_err(|e| SchedulerError::Unavailable(e.to_string()))
    }

    /// The session's log.
    pub fn log(&self) -> &SessionLog {
        &self.inner.log
    }

    /// The id it was opened with, for a session opened by [`Harness::open_session`].
    pub fn id(&self) -> Option<&str> {
        self.inner.id.as_deref()
    }

    /// The scheduler actor (for supervision).
    pub fn actor_cell(&self) -> ActorCell {
        self.inner.actor.get_cell()
    }

    /// Cancels whatever runs at once, then shuts down (see [`Session::shutdown_within`]).
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown_within(Duration::ZERO).await
    }

    /// Graceful shutdown: takes no more steps (queued ones are answered
    /// [`SchedulerError::ShutDown`]), lets the running step finish for up to `grace`, then
    /// cancels what is left (`ABORTED`), flushes and closes the log, and stops every actor of
    /// the session. The session then leaves its harness's table (its id can be opened again).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use async_trait::async_trait;
    /// use dsh_core::{ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
    /// use dsh_scheduler::{HarnessBuilder, SchedulerConfig, SchedulerError, StepRequest};
    /// use serde_json::{json, Value};
    ///
    /// /// Sleeps `ms`, unless cancelled first.
    /// struct Nap;
    /// #[async_trait]
    /// impl ToolDefinition for Nap {
    ///     fn name(&self) -> &str { "nap" }
    ///     fn description(&self) -> &str { "naps" }
    ///     fn input_schema(&self) -> Value { json!({"type": "object"}) }
    ///     async fn execute(&self, input: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
    ///         let ms = input["ms"].as_u64().unwrap_or(0);
    ///         tokio::select! {
    ///             _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!("rested")),
    ///             why = ctx.signal.cancelled() => Err(ToolFailure::new(format!("woken: {why}"))),
    ///         }
    ///     }
    /// }
    ///
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let registry = Arc::new(ToolRegistry::new());
    /// registry.register(Nap).unwrap();
    /// let harness = HarnessBuilder::new(registry).build().await.unwrap();
    /// let session = harness.open_session("s", SchedulerConfig::default(), None).await.unwrap().session;
    /// let step = tokio::spawn({
    ///     let session = session.clone();
    ///     async move {
    ///         let calls = vec![ToolCall::new("n", "nap", json!({"ms": 60_000}))];
    ///         session.run_step(StepRequest::new(calls)).await
    ///     }
    /// });
    /// while session.log().snapshot().await.unwrap().is_empty() {
    ///     tokio::time::sleep(Duration::from_millis(1)).await;
    /// }
    /// // A minute's nap does not fit in 50 ms of grace: it is cancelled, and recorded.
    /// let report = session.shutdown_within(Duration::from_millis(50)).await;
    /// assert!(report.cancelled_in_flight);
    /// assert_eq!(report.log_error, None);
    /// let outcome = step.await.unwrap().unwrap();
    /// assert!(outcome.results[0].code().unwrap().is_abort());
    /// // The session takes no more steps, and its log is closed.
    /// assert!(session.run_step(StepRequest::new(vec![])).await.is_err());
    /// assert!(session.log().snapshot().await.is_err());
    /// harness.shutdown().await;
    /// # });
    /// ```
    pub async fn shutdown_within(&self, grace: Duration) -> ShutdownReport {
        let inner = &self.inner;
        inner.shutting_down.store(true, Ordering::SeqCst);
        Parts {
            actor: inner.actor.clone(),
            log: inner.log.clone(),
            id: inner.id.clone(),
            table: inner.table.clone(),
        }
        .shut_down(grace)
        .await
    }
}

/// What a shutdown had to do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShutdownReport {
    /// A step was running when the shutdown began, the grace ran out, and it was cancelled.
    pub cancelled_in_flight: bool,
    /// Closing the log failed.
    pub log_error: Option<dsh_session::SessionError>,
}

/// A step open to calls: [`OpenStep::push`] places each call the moment it arrives, by the
/// rules every step follows (a parallel-safe call starts at once if the pool has room; an
/// exclusive call waits for every earlier call of the step and holds every later one), and
/// each call's result can be awaited on its own ([`PendingCall::result`]).
/// [`OpenStep::finish`] closes the step: it takes no more calls, and once every call has its
/// result it records the step's deferred context after them and answers the step's outcome.
///
/// Dropping the handle unfinished finishes the step all the same (its calls run on and are
/// recorded; only the outcome has no one to go to), so no call is left without its result.
///
/// ```
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use dsh_core::{ToolCall, ToolContext, ToolDefinition, ToolFailure, ToolRegistry};
/// use dsh_scheduler::{HarnessBuilder, SchedulerConfig};
/// use serde_json::{json, Value};
///
/// struct Echo;
/// #[async_trait]
/// impl ToolDefinition for Echo {
///     fn name(&self) -> &str { "echo" }
///     fn description(&self) -> &str { "echo" }
///     fn input_schema(&self) -> Value { json!({"type": "object"}) }
///     async fn execute(&self, input: Value, _: ToolContext) -> Result<Value, ToolFailure> {
///         Ok(input)
///     }
/// }
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let registry = Arc::new(ToolRegistry::new());
/// registry.register(Echo).unwrap();
/// let harness = HarnessBuilder::new(registry).build().await.unwrap();
/// let session = harness.open_session("s", SchedulerConfig::default(), None).await.unwrap().session;
/// let step = session.open_step().unwrap();
/// let first = step.push(ToolCall::new("c1", "echo", json!({"n": 1}))).unwrap();
/// // The first call's result is there (and recorded) while the step is still open.
/// assert_eq!(first.result().await.unwrap().text(), r#"{"n":1}"#);
/// let second = step.push(ToolCall::new("c2", "echo", json!({"n": 2}))).unwrap();
/// let outcome = step.finish().await.unwrap();
/// assert_eq!(outcome.results.len(), 2);
/// assert_eq!(second.result().await.unwrap().text(), r#"{"n":2}"#);
/// assert_eq!(session.log().snapshot().await.unwrap().len(), 4);
/// harness.shutdown().await;
/// # });
/// ```
#[derive(Debug)]
pub struct OpenStep {
    session: Session,
    token: u64,
    next_ticket: AtomicU64,
    finished: bool,
}

impl OpenStep {
    /// Adds a call to the step. The call is placed as soon as the scheduler sees it (after
    /// every call pushed before it); its result comes through the returned [`PendingCall`].
    /// Pushing into a step the session no longer runs (it is shutting down) answers the call
    /// [`SchedulerError::ShutDown`] through its [`PendingCall`], and records nothing of it.
    pub fn push(&self, call: ToolCall) -> Result<PendingCall, SchedulerError> {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let (notify, answer) = tokio::sync::oneshot::channel();
        self.send(SchedulerMsg::Push {
            token: self.token,
            calls: vec![Pushed {
                call,
                ticket,
                notify: Some(notify),
            }],
        })?;
        Ok(PendingCall {
            answer,
            cancel: CallCanceller {
                actor: self.session.inner.actor.clone(),
                token: self.token,
                ticket,
            },
        })
    }

    /// Adds calls to the step at once, in order (their results come in the step's outcome).
    pub fn push_all(&self, calls: Vec<ToolCall>) -> Result<(), SchedulerError> {
        let calls = calls
            .into_iter()
            .map(|call| Pushed {
                call,
                ticket: self.next_ticket.fetch_add(1, Ordering::Relaxed),
                notify: None,
            })
            .collect();
        self.send(SchedulerMsg::Push {
            token: self.token,
            calls,
        })
    }

    /// Cancels this step: its running calls end `ABORTED` (or `ABORTED_BEFORE_DISPATCH`), the
    /// calls it has not reached and those pushed later get a synthesized pair. The step still
    /// ends through [`OpenStep::finish`].
    pub fn cancel(&self) -> Result<(), SchedulerError> {
        self.send(SchedulerMsg::CancelStep { token: self.token })
    }

    /// The session the step belongs to.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Closes the step and waits for its outcome: every call's result in push order, all
    /// recorded, then the deferred context recorded after them.
    pub async fn finish(mut self) -> Result<StepOutcome, SchedulerError> {
        self.finished = true;
        let token = self.token;
        match self
            .session
            .inner
            .actor
            .call(
                |reply| SchedulerMsg::Finish {
                    token,
                    reply: Some(reply),
                },
                None,
            )
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

    fn send(&self, msg: SchedulerMsg) -> Result<(), SchedulerError> {
        self.session
            .inner
            .actor
            .send_message(msg)
            .map_err(|e| SchedulerError::Unavailable(e.to_string()))
    }
}

impl Drop for OpenStep {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.session.inner.actor.send_message(SchedulerMsg::Finish {
                token: self.token,
                reply: None,
            });
        }
    }
}

/// One call pushed into an [`OpenStep`]: its result, once recorded. Dropping it leaves the
/// call running (and recorded) all the same.
#[derive(Debug)]
pub struct PendingCall {
    answer: tokio::sync::oneshot::Receiver<Result<FrozenResult, SchedulerError>>,
    cancel: CallCanceller,
}

impl PendingCall {
    /// The call's result, once its `tool/result` is recorded.
    /// [`SchedulerError::CallNotRecorded`] when the log failed it (the result is not to be
    /// shown as if it were in the log), [`SchedulerError::ShutDown`] when it never joined its
    /// step.
    pub async fn result(self) -> Result<FrozenResult, SchedulerError> {
        self.answer.await.unwrap_or_else(|_| {
            Err(SchedulerError::Unavailable(
                "the scheduler stopped before answering".into(),
            ))
        })
    }

    /// What cancels this call (it can be kept while [`PendingCall::result`] is awaited).
    pub fn canceller(&self) -> CallCanceller {
        self.cancel.clone()
    }

    /// Cancels this call (see [`CallCanceller::cancel`]).
    pub fn cancel(&self) -> Result<(), SchedulerError> {
        self.cancel.cancel()
    }
}

/// Cancels one pushed call.
#[derive(Debug, Clone)]
pub struct CallCanceller {
    actor: ActorRef<SchedulerMsg>,
    token: u64,
    ticket: u64,
}

impl CallCanceller {
    /// Cancels the call: `ABORTED` if its body had started, `ABORTED_BEFORE_DISPATCH` if not
    /// (a call still waiting for its place gets a synthesized pair when its step reaches it).
    /// Its result still comes, recorded. A call already answered is left as it is.
    pub fn cancel(&self) -> Result<(), SchedulerError> {
        self.actor
            .send_message(SchedulerMsg::CancelPushed {
                token: self.token,
                ticket: self.ticket,
            })
            .map_err(|e| SchedulerError::Unavailable(e.to_string()))
    }
}
