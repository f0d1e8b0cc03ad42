//! The guard set: one actor that owns the registered guards and their identities, restarted by
//! its own supervisor.
//!
//! # Who does what
//!
//! - The **actor** is the only one that changes the set: `Register`, `Replace` and `Unregister`
//!   go through it, so identity and ownership checks are serialized. After every change it
//!   publishes an immutable [`GuardSnapshot`] (an `Arc` of the guard list, swapped whole).
//! - **Evaluation does not run in the actor.** [`GuardSet::evaluate`] asks the actor for the
//!   current snapshot (one short round trip: this is also the liveness check) and then runs the
//!   guards itself. [`Guard::check`] is synchronous and may block, so a snapshot holding a
//!   guard that may ([`Guard::may_block`], true unless a guard says otherwise) runs on the
//!   guard set's own bounded pool of threads ([`GuardSet::with_pool_threads`], default
//!   [`DEFAULT_POOL_THREADS`]): a slow guard delays only the call it is checking, and other
//!   calls and registrations are answered meanwhile. A snapshot of guards that never block
//!   runs in the calling task, without the pool's two thread handoffs.
//! - **Stuck guards stay in the guard set's pool.** A guard still running when its
//!   evaluation timed out keeps its thread (nothing can stop a thread), and that thread is
//!   *stuck*. Tokio's blocking pool, which the rest of the process needs (file I/O), is never
//!   used for guards, so stuck guards cannot use it up. When every thread of the guard set's
//!   pool is stuck, an evaluation is denied at once, naming the stuck guards ("guard set
//!   overloaded: guard `ID` is stuck"), instead of waiting for a thread that may never come.
//! - **A guard's identity is read once**, when it is registered (its [`Guard::id`], under a
//!   panic guard, in the caller's task), and kept beside it: an `id()` that later answers
//!   something else changes nothing, and one that panics is refused
//!   ([`GuardsError::InvalidGuard`]) without reaching the actor.
//! - The **supervisor** restarts the actor when it dies. The guards live in a store shared by
//!   the actor and its supervisor, so a restarted actor keeps them.
//!
//! # Fail-closed
//!
//! While the actor is down (killed, restarting, failed for good, shut down), every evaluation
//! is a denial: the handle never lets a call through because it could not ask. A guard that
//! panics denies the call it was checking. An evaluation whose guards are still running when
//! [`GuardSet::with_evaluation_timeout`] (5 s unless changed) passes is a denial too, and so is
//! one that finds every thread of the pool stuck.

use crate::error::GuardsError;
use crate::guard::{Guard, GuardCall, GuardVerdict};
use dsh_core::live::LiveActor;
use dsh_core::pool::{Activity, BlockingPool, PoolError};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The registered guards at one moment, in evaluation (registration) order.
///
/// Immutable: a registration, replacement or removal publishes a new snapshot and leaves the
/// ones already handed out as they were, so an evaluation in flight keeps the set it started
/// with. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct GuardSnapshot {
    guards: Arc<[Registered]>,
    /// Some guard may block ([`Guard::may_block`]): evaluate on the pool.
    may_block: bool,
    /// The guard set's threads for guards that may block.
    pool: BlockingPool,
}

/// A guard and the identity it was registered under.
#[derive(Clone)]
struct Registered {
    id: Arc<str>,
    guard: Arc<dyn Guard>,
}

impl Default for GuardSnapshot {
    fn default() -> Self {
        GuardSnapshot {
            guards: Arc::new([]),
            may_block: false,
            pool: BlockingPool::new("guards", DEFAULT_POOL_THREADS),
        }
    }
}

impl fmt::Debug for GuardSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.guards.iter().map(|g| &*g.id))
            .finish()
    }
}

/// The denial of an evaluation that found every thread of the pool stuck.
fn overloaded(stuck: &[String]) -> GuardVerdict {
    let mut names: Vec<&str> = stuck.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let (noun, verb) = if names.len() == 1 {
        ("guard", "is")
    } else {
        ("guards", "are")
    };
    let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    tracing::error!(stuck = ?names, "every thread of the guard set is stuck; denying at once");
    GuardVerdict::Deny(format!(
        "guard set overloaded: {noun} {} {verb} stuck; denied to be safe",
        names.join(", ")
    ))
}

impl GuardSnapshot {
    /// The guards' ids, in evaluation order.
    pub fn ids(&self) -> Vec<String> {
        self.guards.iter().map(|g| g.id.to_string()).collect()
    }

    /// How many guards it holds.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// True when no guard is registered.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// True when some guard may block ([`Guard::may_block`]), so that
    /// [`GuardSnapshot::evaluate`] runs the guards on the guard set's pool rather than in the
    /// calling task.
    pub fn may_block(&self) -> bool {
        self.may_block
    }

    /// Asks every guard, in order, on the calling thread; the first denial wins, and a guard
    /// that panics is a denial. This blocks for as long as the guards take: from async code,
    /// use [`GuardSnapshot::evaluate`].
    pub fn check(&self, call: &GuardCall) -> GuardVerdict {
        self.check_as(call, None)
    }

    /// [`GuardSnapshot::check`], telling `activity` which guard runs, so that a thread stuck
    /// in one is reported by name.
    fn check_as(&self, call: &GuardCall, activity: Option<&Activity>) -> GuardVerdict {
        for registered in self.guards.iter() {
            let id = &*registered.id;
            if let Some(activity) = activity {
                activity.set(id);
            }
            match catch_unwind(AssertUnwindSafe(|| registered.guard.check(call))) {
                Ok(GuardVerdict::Abstain) => {}
                Ok(GuardVerdict::Deny(reason)) => {
                    return GuardVerdict::Deny(format!("guard `{id}`: {reason}"));
                }
                Err(_) => {
                    tracing::error!(guard = id, call_id = %call.call_id, "guard panicked; denying");
                    return GuardVerdict::Deny(format!(
                        "guard `{id}` failed while checking the call"
                    ));
                }
            }
        }
        GuardVerdict::Abstain
    }

    /// Runs [`GuardSnapshot::check`] on the guard set's pool when some guard may block, so a
    /// slow guard holds up only this call and never an async worker; a snapshot of guards that
    /// never block is checked right here, in the calling task. An empty snapshot answers at
    /// once, and so does a pool whose every thread is stuck (a denial naming the stuck
    /// guards). Dropping the future stops waiting (a guard already running on the pool
    /// finishes on its own thread, unheard). No time limit: see [`GuardSet::evaluate`].
    pub async fn evaluate(&self, call: GuardCall) -> GuardVerdict {
        self.evaluate_within(call, None).await
    }

    async fn evaluate_within(&self, call: GuardCall, limit: Option<Duration>) -> GuardVerdict {
        if self.is_empty() {
            return GuardVerdict::Abstain;
        }
        if !self.may_block {
            return self.check(&call);
        }
        let snapshot = self.clone();
        let call_id = call.call_id.clone();
        let first = self
            .guards
            .first()
            .map(|g| g.id.to_string())
            .unwrap_or_default();
        let job = move |activity: &Activity| snapshot.check_as(&call, Some(activity));
        match self.pool.run(first, limit, job).await {
            Ok(verdict) => verdict,
            Err(PoolError::Full { stuck, .. }) => overloaded(&stuck),
            Err(PoolError::TimedOut { .. }) => {
                let limit = limit.unwrap_or_default();
                tracing::warn!(call_id = %call_id, limit_ms = limit.as_millis() as u64, "guards did not answer in time; denying");
                GuardVerdict::Deny(format!(
                    "the guards did not answer within {} ms; denied to be safe",
                    limit.as_millis()
                ))
            }
            Err(e) => {
                // `check` catches the guards' panics, so the pool itself could not run them.
                tracing::error!(call_id = %call_id, error = %e, "guard evaluation did not finish; denying");
                GuardVerdict::Deny(format!(
                    "the guards could not be asked ({e}); denied to be safe"
                ))
            }
        }
    }
}

/// How many threads a guard set runs guards that may block on, unless told
/// ([`GuardSet::with_pool_threads`]).
pub const DEFAULT_POOL_THREADS: usize = 8;

/// How long the guards may take on one call by default before it is denied.
pub const DEFAULT_EVALUATION_TIMEOUT: Duration = Duration::from_secs(5);

struct Entry {
    /// The identity it was registered under (read once).
    id: Arc<str>,
    guard: Arc<dyn Guard>,
    key: u64,
    /// [`Guard::may_block`], asked once when the guard is registered or replaced.
    may_block: bool,
}

/// A guard's [`Guard::may_block`]; one that panics may block (the safe answer), and the panic
/// stays out of the actor.
fn may_block(guard: &dyn Guard) -> bool {
    catch_unwind(AssertUnwindSafe(|| guard.may_block())).unwrap_or(true)
}

#[derive(Default)]
struct Registry {
    entries: Vec<Entry>,
    snapshot: GuardSnapshot,
}

impl Registry {
    /// Publishes the entries as a new snapshot (after every change).
    fn publish(&mut self) {
        self.snapshot = GuardSnapshot {
            guards: self
                .entries
                .iter()
                .map(|e| Registered {
                    id: e.id.clone(),
                    guard: e.guard.clone(),
                })
                .collect(),
            may_block: self.entries.iter().any(|e| e.may_block),
            pool: self.snapshot.pool.clone(),
        };
    }
}

/// A guard's [`Guard::id`], read once under a panic guard.
fn read_id(guard: &dyn Guard) -> Result<Arc<str>, GuardsError> {
    match catch_unwind(AssertUnwindSafe(|| guard.id().to_string())) {
        Ok(id) => Ok(Arc::from(id)),
        Err(_) => Err(GuardsError::InvalidGuard(
            "its id() panicked, so it has no identity".into(),
        )),
    }
}

/// What survives a restart of the actor: the entries (with their owner keys) and the snapshot.
#[derive(Default)]
struct Store {
    registry: Mutex<Registry>,
}

impl Store {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A poisoned lock only means a panic elsewhere; the registry itself is still whole
        // (it is changed only by assignments and `Vec` operations that do not unwind midway).
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn snapshot(&self) -> GuardSnapshot {
        self.registry().snapshot.clone()
    }
}

/// The guard-set actor's messages.
pub enum GuardSetMsg {
    /// Adds a guard; answers its owner key.
    Register {
        /// The identity it is registered under (its `id()`, read once by the caller).
        id: Arc<str>,
        /// The guard.
        guard: Arc<dyn Guard>,
        /// The answer.
        reply: RpcReplyPort<Result<u64, GuardsError>>,
    },
    /// Replaces a guard (same id, owner key required).
    Replace {
        /// The owner key.
        key: u64,
        /// The new guard's `id()`, read once by the caller; it must be the registered one.
        id: Arc<str>,
        /// The new guard.
        guard: Arc<dyn Guard>,
        /// The answer.
        reply: RpcReplyPort<Result<(), GuardsError>>,
    },
    /// Removes a guard (owner key required).
    Unregister {
        /// The guard's id.
        id: String,
        /// The owner key.
        key: u64,
        /// The answer.
        reply: RpcReplyPort<Result<(), GuardsError>>,
    },
    /// Asks every guard, in registration order; the first denial wins. The actor does not run
    /// the guards in its handler: it hands the current snapshot to a task of its own, which
    /// answers, so a slow guard never holds up the actor's mailbox. [`GuardSet::evaluate`]
    /// uses [`GuardSetMsg::Snapshot`] instead and runs the guards in the caller's task.
    Evaluate {
        /// The call.
        call: GuardCall,
        /// The verdict.
        reply: RpcReplyPort<GuardVerdict>,
    },
    /// The current snapshot of the guards, for the caller to run.
    Snapshot {
        /// The snapshot.
        reply: RpcReplyPort<GuardSnapshot>,
    },
    /// The ids of the registered guards, in order.
    List {
        /// The ids.
        reply: RpcReplyPort<Vec<String>>,
    },
}

impl fmt::Debug for GuardSetMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            GuardSetMsg::Register { .. } => "Register",
            GuardSetMsg::Replace { .. } => "Replace",
            GuardSetMsg::Unregister { .. } => "Unregister",
            GuardSetMsg::Evaluate { .. } => "Evaluate",
            GuardSetMsg::Snapshot { .. } => "Snapshot",
            GuardSetMsg::List { .. } => "List",
        };
        f.write_str(name)
    }
}

fn fresh_key() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

struct GuardSetActor;

struct GuardSetState {
    store: Arc<Store>,
    _live: LiveActor,
}

impl Actor for GuardSetActor {
    type Msg = GuardSetMsg;
    type State = GuardSetState;
    type Arguments = Arc<Store>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        store: Arc<Store>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(GuardSetState {
            store,
            _live: LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            GuardSetMsg::Register { id, guard, reply } => {
                let may_block = may_block(guard.as_ref());
                let mut registry = state.store.registry();
                let answer = if registry.entries.iter().any(|e| e.id == id) {
                    Err(GuardsError::IdTaken(id.to_string()))
                } else {
                    let key = fresh_key();
                    registry.entries.push(Entry {
                        id,
                        guard,
                        key,
                        may_block,
                    });
                    registry.publish();
                    Ok(key)
                };
                drop(registry);
                let _ = reply.send(answer);
            }
            GuardSetMsg::Replace {
                key,
                id,
                guard,
                reply,
            } => {
                let blocks = may_block(guard.as_ref());
                let mut registry = state.store.registry();
                let answer = match registry.entries.iter_mut().find(|e| e.key == key) {
                    Some(e) if e.id != id => Err(GuardsError::IdentityChanged {
                        old: e.id.to_string(),
                        new: id.to_string(),
                    }),
                    Some(e) => {
                        e.may_block = blocks;
                        e.guard = guard;
                        Ok(())
                    }
                    None => Err(GuardsError::NotOwner(id.to_string())),
                };
                if answer.is_ok() {
                    registry.publish();
                }
                drop(registry);
                let _ = reply.send(answer);
            }
            GuardSetMsg::Unregister { id, key, reply } => {
                let mut registry = state.store.registry();
                let before = registry.entries.len();
                registry.entries.retain(|e| !(e.key == key && *e.id == *id));
                let answer = if registry.entries.len() < before {
                    registry.publish();
                    Ok(())
                } else {
                    Err(GuardsError::NotOwner(id))
                };
                drop(registry);
                let _ = reply.send(answer);
            }
            GuardSetMsg::Evaluate { call, reply } => {
                let snapshot = state.store.snapshot();
                if snapshot.is_empty() {
                    let _ = reply.send(GuardVerdict::Abstain);
                } else {
                    tokio::spawn(async move {
                        let _ = reply.send(snapshot.evaluate(call).await);
                    });
                }
            }
            GuardSetMsg::Snapshot { reply } => {
                let _ = reply.send(state.store.snapshot());
            }
            GuardSetMsg::List { reply } => {
                let _ = reply.send(state.store.snapshot().ids());
            }
        }
        Ok(())
    }
}

/// Where the guard-set actor is.
enum Slot {
    /// Running: ask it.
    Running(ActorRef<GuardSetMsg>),
    /// Down, and the supervisor is starting a new one.
    Restarting,
    /// The supervisor could not restart it and failed; the set stays down for good.
    Failed(String),
    /// Shut down.
    Stopped,
}

type Current = Arc<RwLock<Slot>>;

fn set_slot(current: &Current, slot: Slot) {
    *current.write().unwrap_or_else(|e| e.into_inner()) = slot;
}

fn current_ref(current: &Current) -> Result<ActorRef<GuardSetMsg>, GuardsError> {
    match &*current.read().unwrap_or_else(|e| e.into_inner()) {
        Slot::Running(actor) => Ok(actor.clone()),
        Slot::Restarting => Err(GuardsError::Unavailable("restarting".into())),
        Slot::Failed(why) => Err(GuardsError::Unavailable(format!(
            "its supervisor failed ({why})"
        ))),
        Slot::Stopped => Err(GuardsError::Unavailable("shut down".into())),
    }
}

struct GuardSupervisor;

struct SupervisorArgs {
    store: Arc<Store>,
    current: Current,
    restarts: Arc<AtomicU64>,
    /// Test-only fault injection: every restart fails.
    #[cfg(test)]
    fail_restarts: bool,
}

struct SupervisorState {
    args: SupervisorArgs,
    child: Option<ActorCell>,
    _live: LiveActor,
}

async fn spawn_child(
    myself: &ActorRef<()>,
    args: &SupervisorArgs,
) -> Result<ActorCell, ActorProcessingErr> {
    let (child, _) =
        Actor::spawn_linked(None, GuardSetActor, args.store.clone(), myself.get_cell()).await?;
    set_slot(&args.current, Slot::Running(child.clone()));
    Ok(child.get_cell())
}

async fn restart_child(
    myself: &ActorRef<()>,
    args: &SupervisorArgs,
) -> Result<ActorCell, ActorProcessingErr> {
    #[cfg(test)]
    if args.fail_restarts {
        return Err("injected restart failure".into());
    }
    spawn_child(myself, args).await
}

impl Actor for GuardSupervisor {
    type Msg = ();
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let child = spawn_child(&myself, &args).await?;
        Ok(SupervisorState {
            args,
            child: Some(child),
            _live: LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<()>,
        _msg: (),
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        evt: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let dead = match &evt {
            SupervisionEvent::ActorTerminated(cell, _, _)
            | SupervisionEvent::ActorFailed(cell, _) => Some(cell.get_id()),
            _ => None,
        };
        if dead.is_some() && dead == state.child.as_ref().map(|c| c.get_id()) {
            tracing::warn!(event = ?evt, "guard-set actor ended; restarting it (calls are denied meanwhile)");
            set_slot(&state.args.current, Slot::Restarting);
            state.child = None;
            match restart_child(&myself, &state.args).await {
                Ok(child) => {
                    state.child = Some(child);
                    state.args.restarts.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    // The set stays down for good: every call is denied from now on. Say so
                    // loudly, and fail, so that a host this supervisor is linked under hears
                    // of it as `ActorFailed` (`post_stop` does not run on this path).
                    let why = format!("the guard-set actor could not be restarted: {e}");
                    tracing::error!(
                        error = %e,
                        "guard-set actor could not be restarted; the guard set is down for good and denies every call"
                    );
                    set_slot(&state.args.current, Slot::Failed(why.clone()));
                    return Err(why.into());
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<()>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        set_slot(&state.args.current, Slot::Stopped);
        myself
            .stop_children_and_wait(
                Some("guard set shut down".into()),
                Some(Duration::from_secs(5)),
            )
            .await;
        Ok(())
    }
}

/// A handle on the guard set. Clones share the same set.
#[derive(Clone)]
pub struct GuardSet {
    current: Current,
    /// The guards and the pool, shared with the actor.
    store: Arc<Store>,
    supervisor: ActorRef<()>,
    restarts: Arc<AtomicU64>,
    timeout: Duration,
    evaluation_timeout: Option<Duration>,
}

impl fmt::Debug for GuardSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardSet")
            .field("restarts", &self.restarts.load(Ordering::Relaxed))
            .finish()
    }
}

fn unavailable<T>(r: Result<CallResult<T>, impl fmt::Display>) -> Result<T, GuardsError> {
    match r {
        Ok(CallResult::Success(v)) => Ok(v),
        Ok(CallResult::Timeout) => Err(GuardsError::Unavailable("no answer in time".into())),
        Ok(CallResult::SenderError) => Err(GuardsError::Unavailable(
            "the actor dropped the call".into(),
        )),
        Err(e) => Err(GuardsError::Unavailable(e.to_string())),
    }
}

fn fail_closed(e: &GuardsError) -> GuardVerdict {
    tracing::warn!(error = %e, "guard set unavailable; denying");
    GuardVerdict::Deny(format!("{e}; denied to be safe"))
}

impl GuardSet {
    /// Starts the guard set: a supervisor and, under it, the guard-set actor.
    ///
    /// - `None`: the supervisor is unlinked. When the actor dies, the supervisor restarts it
    ///   (with the guards it held); if that restart fails, the failure is logged at `error`
    ///   level and the set stays down for good: every evaluation is a denial whose reason says
    ///   the supervisor failed, and [`GuardSet::register`] and the owner operations return
    ///   [`GuardsError::Unavailable`].
    /// - `Some(host)`: the supervisor is linked under `host` (e.g. a service's or a session's
    ///   actor). Restarts of the guard-set actor stay inside and the host sees nothing of them.
    ///   A failed restart fails the supervisor, so the host receives
    ///   [`SupervisionEvent::ActorFailed`] for [`GuardSet::supervisor_cell`] (its message says
    ///   the actor could not be restarted), and decides what to do (e.g. spawn a new set, or
    ///   fail itself). [`GuardSet::shutdown`] reaches the host as
    ///   [`SupervisionEvent::ActorTerminated`]. The host must override
    ///   `handle_supervisor_evt`: ractor's default stops the host when any child exits, even
    ///   normally. If the host itself stops, the supervisor and the actor are killed, and every
    ///   evaluation through this handle is a denial from then on.
    ///
    /// In both cases calls are denied, never allowed, while the actor is down.
    pub async fn spawn(host: Option<ActorCell>) -> Result<GuardSet, GuardsError> {
        let current: Current = Arc::new(RwLock::new(Slot::Restarting));
        let restarts = Arc::new(AtomicU64::new(0));
        let args = SupervisorArgs {
            store: Arc::new(Store::default()),
            current: current.clone(),
            restarts: restarts.clone(),
            #[cfg(test)]
            fail_restarts: false,
        };
        Self::spawn_with(host, args).await
    }

    async fn spawn_with(
        host: Option<ActorCell>,
        args: SupervisorArgs,
    ) -> Result<GuardSet, GuardsError> {
        let current = args.current.clone();
        let restarts = args.restarts.clone();
        let store = args.store.clone();
        let spawned = match host {
            Some(host) => Actor::spawn_linked(None, GuardSupervisor, args, host).await,
            None => Actor::spawn(None, GuardSupervisor, args).await,
        };
        let (supervisor, _) = spawned.map_err(|e| GuardsError::Unavailable(e.to_string()))?;
        Ok(GuardSet {
            current,
            store,
            supervisor,
            restarts,
            timeout: Duration::from_secs(5),
            evaluation_timeout: Some(DEFAULT_EVALUATION_TIMEOUT),
        })
    }

    /// How long a request may wait for the actor before it counts as a denial (for an
    /// evaluation) or as [`GuardsError::Unavailable`] (for the others). Default 5 s. The
    /// guards' own running time is not part of it: see
    /// [`GuardSet::with_evaluation_timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long the guards may take to check one call before the call is denied (fail-closed).
    /// Default 5 s ([`DEFAULT_EVALUATION_TIMEOUT`]): a guard that hangs must not leave its call
    /// without a result, and not answering is never an allow. A slow guard delays only the
    /// call it checks. A guard still running when the limit passes finishes on its own thread
    /// and is not heard.
    pub fn with_evaluation_timeout(mut self, limit: Duration) -> Self {
        self.evaluation_timeout = Some(limit);
        self
    }

    /// How many threads the guard set runs guards that may block on (default
    /// [`DEFAULT_POOL_THREADS`]). The pool belongs to the set, so this applies to every handle
    /// of it; evaluations already running keep the pool they started on. When every thread
    /// is stuck in a guard that outlived its evaluation, calls are denied at once ("guard set
    /// overloaded"), naming the stuck guards.
    pub fn with_pool_threads(self, threads: usize) -> Self {
        let mut registry = self.store.registry();
        registry.snapshot.pool = BlockingPool::new("guards", threads);
        registry.publish();
        drop(registry);
        self
    }

    /// No limit on the guards' running time: a guard that hangs holds its call until the call
    /// is cancelled. For guards that legitimately wait long (a human in the loop).
    pub fn without_evaluation_timeout(mut self) -> Self {
        self.evaluation_timeout = None;
        self
    }

    fn actor(&self) -> Result<ActorRef<GuardSetMsg>, GuardsError> {
        current_ref(&self.current)
    }

    /// Registers a guard. A taken id is refused.
    pub async fn register(&self, guard: impl Guard) -> Result<GuardOwner, GuardsError> {
        self.register_arc(Arc::new(guard)).await
    }

    /// Registers a shared guard, under the identity its [`Guard::id`] gives now (read once:
    /// what it answers later changes nothing). A guard whose `id()` panics is refused
    /// ([`GuardsError::InvalidGuard`]).
    pub async fn register_arc(&self, guard: Arc<dyn Guard>) -> Result<GuardOwner, GuardsError> {
        let id = read_id(guard.as_ref())?;
        let actor = self.actor()?;
        let registered = id.clone();
        let key = unavailable(
            actor
                .call(
                    |reply| GuardSetMsg::Register {
                        id: registered,
                        guard,
                        reply,
                    },
                    Some(self.timeout),
                )
                .await,
        )??;
        Ok(GuardOwner {
            id: id.to_string(),
            key,
            set: self.clone(),
        })
    }

    /// The guards as registered now, from the actor (which must be up to answer).
    pub async fn snapshot(&self) -> Result<GuardSnapshot, GuardsError> {
        let actor = self.actor()?;
        unavailable(
            actor
                .call(|reply| GuardSetMsg::Snapshot { reply }, Some(self.timeout))
                .await,
        )
    }

    /// Asks every guard about `call`. Any failure to ask is a denial.
    ///
    /// The actor only hands over the current [`GuardSnapshot`]; the guards then run for this
    /// call alone (on the blocking pool), so a slow guard delays this call and no other.
    pub async fn evaluate(&self, call: GuardCall) -> GuardVerdict {
        let snapshot = match self.snapshot().await {
            Ok(snapshot) => snapshot,
            Err(e) => return fail_closed(&e),
        };
        let Some(limit) = self.evaluation_timeout else {
            return snapshot.evaluate(call).await;
        };
        let call_id = call.call_id.clone();
        if !snapshot.may_block() {
            // Nothing can interrupt a check running in this task; a guard that said it never
            // blocks and took longer than the limit anyway is denied once it returns, as the
            // timeout would have.
            let started = std::time::Instant::now();
            let verdict = snapshot.check(&call);
            let took = started.elapsed();
            if took <= limit {
                return verdict;
            }
            tracing::warn!(call_id = %call_id, limit_ms = limit.as_millis() as u64, took_ms = took.as_millis() as u64, guards = ?snapshot, "non-blocking guards took longer than the limit; denying");
            return GuardVerdict::Deny(format!(
                "the guards did not answer within {} ms; denied to be safe",
                limit.as_millis()
            ));
        }
        snapshot.evaluate_within(call, Some(limit)).await
    }

    /// The ids of the registered guards, in evaluation order.
    pub async fn ids(&self) -> Result<Vec<String>, GuardsError> {
        let actor = self.actor()?;
        unavailable(
            actor
                .call(|reply| GuardSetMsg::List { reply }, Some(self.timeout))
                .await,
        )
    }

    /// The current guard-set actor (for supervision and fault-injection tests); `None` while it
    /// is down.
    pub fn actor_cell(&self) -> Option<ActorCell> {
        current_ref(&self.current).ok().map(|a| a.get_cell())
    }

    /// The supervisor that restarts the guard-set actor (the child of the host given to
    /// [`GuardSet::spawn`], if any).
    pub fn supervisor_cell(&self) -> ActorCell {
        self.supervisor.get_cell()
    }

    /// How many times the actor was restarted.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Stops the supervisor and the actor, and waits for both.
    pub async fn shutdown(&self) {
        let _ = self
            .supervisor
            .stop_and_wait(Some("shutdown".into()), Some(Duration::from_secs(5)))
            .await;
    }
}

/// Proof of ownership of one registered guard: only this handle can replace or remove it.
/// It cannot be cloned; dropping it leaves the guard in place.
pub struct GuardOwner {
    id: String,
    key: u64,
    set: GuardSet,
}

impl fmt::Debug for GuardOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardOwner").field("id", &self.id).finish()
    }
}

impl GuardOwner {
    /// The guard's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Replaces the guard with another of the same id (read once, as at registration).
    pub async fn replace(&self, guard: impl Guard) -> Result<(), GuardsError> {
        let guard: Arc<dyn Guard> = Arc::new(guard);
        let id = read_id(guard.as_ref())?;
        let key = self.key;
        let actor = self.set.actor()?;
        unavailable(
            actor
                .call(
                    |reply| GuardSetMsg::Replace {
                        key,
                        id,
                        guard,
                        reply,
                    },
                    Some(self.set.timeout),
                )
                .await,
        )?
    }

    /// Removes the guard.
    pub async fn unregister(self) -> Result<(), GuardsError> {
        let (id, key) = (self.id.clone(), self.key);
        let actor = self.set.actor()?;
        unavailable(
            actor
                .call(
                    |reply| GuardSetMsg::Unregister { id, key, reply },
                    Some(self.set.timeout),
                )
                .await,
        )?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::FnGuard;
    use serde_json::json;
    use tokio::sync::mpsc;

    /// A host that records what it hears of its children and never stops because of them.
    struct Host;

    impl Actor for Host {
        type Msg = ();
        type State = mpsc::UnboundedSender<SupervisionEvent>;
        type Arguments = mpsc::UnboundedSender<SupervisionEvent>;

        async fn pre_start(
            &self,
            _myself: ActorRef<()>,
            events: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(events)
        }

        async fn handle_supervisor_evt(
            &self,
            _myself: ActorRef<()>,
            evt: SupervisionEvent,
            events: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            let _ = events.send(evt);
            Ok(())
        }
    }

    async fn host() -> (ActorRef<()>, mpsc::UnboundedReceiver<SupervisionEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (host, _) = Actor::spawn(None, Host, tx).await.unwrap();
        (host, rx)
    }

    fn args(fail_restarts: bool) -> SupervisorArgs {
        SupervisorArgs {
            store: Arc::new(Store::default()),
            current: Arc::new(RwLock::new(Slot::Restarting)),
            restarts: Arc::new(AtomicU64::new(0)),
            fail_restarts,
        }
    }

    /// The next event the host hears about `who` that is not `ActorStarted`.
    async fn next_exit(
        events: &mut mpsc::UnboundedReceiver<SupervisionEvent>,
        who: &ActorCell,
    ) -> SupervisionEvent {
        loop {
            let evt = tokio::time::timeout(Duration::from_secs(10), events.recv())
                .await
                .expect("the host heard nothing")
                .expect("the host is gone");
            match &evt {
                SupervisionEvent::ActorTerminated(cell, _, _)
                | SupervisionEvent::ActorFailed(cell, _)
                    if cell.get_id() == who.get_id() =>
                {
                    return evt;
                }
                _ => {}
            }
        }
    }

    #[tokio::test]
    async fn a_failed_restart_fails_the_supervisor_towards_its_host_and_denies_for_good() {
        let (host, mut events) = host().await;
        let set = GuardSet::spawn_with(Some(host.get_cell()), args(true))
            .await
            .unwrap();
        let _owner = set
            .register(FnGuard::new("g", |_c: &GuardCall| GuardVerdict::Abstain))
            .await
            .unwrap();
        set.actor_cell().unwrap().kill();

        match next_exit(&mut events, &set.supervisor_cell()).await {
            SupervisionEvent::ActorFailed(_, err) => {
                let err = err.to_string();
                assert!(err.contains("could not be restarted"), "{err}");
                assert!(err.contains("injected restart failure"), "{err}");
            }
            other => panic!("expected ActorFailed, got {other:?}"),
        }

        // Down for good: denied (with a reason that says why), never allowed.
        let verdict = set.evaluate(GuardCall::new("c", "t", json!({}))).await;
        let GuardVerdict::Deny(reason) = verdict else {
            panic!("a failed guard set let a call through")
        };
        assert!(reason.contains("supervisor failed"), "{reason}");
        assert!(reason.contains("could not be restarted"), "{reason}");
        assert!(matches!(
            set.register(FnGuard::new("late", |_c: &GuardCall| GuardVerdict::Abstain))
                .await,
            Err(GuardsError::Unavailable(_))
        ));
        assert!(set.actor_cell().is_none());
        assert_eq!(set.restarts(), 0);
        host.stop_and_wait(None, None).await.unwrap();
    }

    #[tokio::test]
    async fn under_a_host_a_restart_stays_inside_and_shutdown_is_a_normal_exit() {
        let (host, mut events) = host().await;
        let set = GuardSet::spawn(Some(host.get_cell())).await.unwrap();
        let _owner = set
            .register(FnGuard::new("no-rm", |c: &GuardCall| {
                if c.tool == "rm" {
                    GuardVerdict::Deny("never".into())
                } else {
                    GuardVerdict::Abstain
                }
            }))
            .await
            .unwrap();
        let first = set.actor_cell().unwrap();
        first.kill();
        let mut back = false;
        for _ in 0..1000 {
            if set.restarts() == 1
                && set
                    .actor_cell()
                    .is_some_and(|c| c.get_id() != first.get_id())
            {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(back, "the guard-set actor was not restarted");
        assert_eq!(
            set.evaluate(GuardCall::new("c", "rm", json!({}))).await,
            GuardVerdict::Deny("guard `no-rm`: never".into()),
            "the guard survived the restart"
        );

        set.shutdown().await;
        match next_exit(&mut events, &set.supervisor_cell()).await {
            SupervisionEvent::ActorTerminated(..) => {}
            other => panic!("expected ActorTerminated, got {other:?}"),
        }
        let verdict = set.evaluate(GuardCall::new("c", "ls", json!({}))).await;
        assert!(
            matches!(&verdict, GuardVerdict::Deny(r) if r.contains("shut down")),
            "{verdict:?}"
        );
        host.stop_and_wait(None, None).await.unwrap();
    }

    #[tokio::test]
    async fn a_direct_evaluate_message_does_not_wait_behind_a_slow_guard() {
        let set = GuardSet::spawn(None).await.unwrap();
        let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Mutex::new(held);
        let _owner = set
            .register(FnGuard::new("gate", move |c: &GuardCall| {
                if c.arguments.get("slow").is_some() {
                    let _ = entered_tx.send(());
                    let _ = held.lock().unwrap().recv_timeout(Duration::from_secs(60));
                    GuardVerdict::Deny("slow one".into())
                } else {
                    GuardVerdict::Abstain
                }
            }))
            .await
            .unwrap();
        let actor = set.actor().unwrap();
        let ask = |call: GuardCall| {
            let actor = actor.clone();
            async move {
                actor
                    .call(
                        |reply| GuardSetMsg::Evaluate { call, reply },
                        Some(Duration::from_secs(30)),
                    )
                    .await
            }
        };
        let slow = tokio::spawn(ask(GuardCall::new("slow", "t", json!({"slow": true}))));
        tokio::time::timeout(Duration::from_secs(10), entered.recv())
            .await
            .unwrap()
            .unwrap();
        let quick = tokio::time::timeout(
            Duration::from_secs(10),
            ask(GuardCall::new("quick", "t", json!({}))),
        )
        .await
        .expect("the actor's mailbox waited behind the slow guard")
        .unwrap();
        assert!(matches!(quick, CallResult::Success(GuardVerdict::Abstain)));
        assert!(!slow.is_finished());
        release.send(()).unwrap();
        let slow = slow.await.unwrap().unwrap();
        assert!(
            matches!(&slow, CallResult::Success(GuardVerdict::Deny(r)) if r == "guard `gate`: slow one")
        );
        set.shutdown().await;
    }
}
