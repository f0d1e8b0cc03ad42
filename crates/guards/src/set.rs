//! The guard set: one actor holding the registered guards, restarted by its own supervisor.
//!
//! The guards live in a store shared by the actor and its supervisor, so a restarted actor
//! keeps them. While the actor is down (killed, restarting), every evaluation is a denial:
//! the handle never lets a call through because it could not ask.

use crate::error::GuardsError;
use crate::guard::{Guard, GuardCall, GuardVerdict};
use dsh_core::live::LiveActor;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

struct Entry {
    guard: Arc<dyn Guard>,
    key: u64,
}

#[derive(Default)]
struct Store {
    entries: Mutex<Vec<Entry>>,
}

impl Store {
    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        // A poisoned lock only means a panic elsewhere; the Vec itself is still whole.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The guard-set actor's messages.
pub enum GuardSetMsg {
    /// Adds a guard; answers its owner key.
    Register {
        /// The guard.
        guard: Arc<dyn Guard>,
        /// The answer.
        reply: RpcReplyPort<Result<u64, GuardsError>>,
    },
    /// Replaces a guard (same id, owner key required).
    Replace {
        /// The owner key.
        key: u64,
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
    /// Asks every guard, in registration order; the first denial wins.
    Evaluate {
        /// The call.
        call: GuardCall,
        /// The verdict.
        reply: RpcReplyPort<GuardVerdict>,
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
            GuardSetMsg::List { .. } => "List",
        };
        f.write_str(name)
    }
}

fn fresh_key() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

fn evaluate(store: &Store, call: &GuardCall) -> GuardVerdict {
    let guards: Vec<Arc<dyn Guard>> = store.entries().iter().map(|e| e.guard.clone()).collect();
    for guard in guards {
        match catch_unwind(AssertUnwindSafe(|| guard.check(call))) {
            Ok(GuardVerdict::Abstain) => {}
            Ok(GuardVerdict::Deny(reason)) => {
                return GuardVerdict::Deny(format!("guard `{}`: {reason}", guard.id()));
            }
            Err(_) => {
                tracing::error!(guard = guard.id(), call_id = %call.call_id, "guard panicked; denying");
                return GuardVerdict::Deny(format!(
                    "guard `{}` failed while checking the call",
                    guard.id()
                ));
            }
        }
    }
    GuardVerdict::Abstain
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
            GuardSetMsg::Register { guard, reply } => {
                let mut entries = state.store.entries();
                let id = guard.id().to_string();
                let answer = if entries.iter().any(|e| e.guard.id() == id) {
                    Err(GuardsError::IdTaken(id))
                } else {
                    let key = fresh_key();
                    entries.push(Entry { guard, key });
                    Ok(key)
                };
                drop(entries);
                let _ = reply.send(answer);
            }
            GuardSetMsg::Replace { key, guard, reply } => {
                let mut entries = state.store.entries();
                let answer = match entries.iter_mut().find(|e| e.key == key) {
                    Some(e) if e.guard.id() != guard.id() => Err(GuardsError::IdentityChanged {
                        old: e.guard.id().to_string(),
                        new: guard.id().to_string(),
                    }),
                    Some(e) => {
                        e.guard = guard;
                        Ok(())
                    }
                    None => Err(GuardsError::NotOwner(guard.id().to_string())),
                };
                drop(entries);
                let _ = reply.send(answer);
            }
            GuardSetMsg::Unregister { id, key, reply } => {
                let mut entries = state.store.entries();
                let before = entries.len();
                entries.retain(|e| !(e.key == key && e.guard.id() == id));
                let answer = if entries.len() < before {
                    Ok(())
                } else {
                    Err(GuardsError::NotOwner(id))
                };
                drop(entries);
                let _ = reply.send(answer);
            }
            GuardSetMsg::Evaluate { call, reply } => {
                let _ = reply.send(evaluate(&state.store, &call));
            }
            GuardSetMsg::List { reply } => {
                let ids = state
                    .store
                    .entries()
                    .iter()
                    .map(|e| e.guard.id().to_string())
                    .collect();
                let _ = reply.send(ids);
            }
        }
        Ok(())
    }
}

type Current = Arc<RwLock<Option<ActorRef<GuardSetMsg>>>>;

fn current_ref(current: &Current) -> Option<ActorRef<GuardSetMsg>> {
    current.read().unwrap_or_else(|e| e.into_inner()).clone()
}

struct GuardSupervisor;

struct SupervisorArgs {
    store: Arc<Store>,
    current: Current,
    restarts: Arc<AtomicU64>,
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
    *args.current.write().unwrap_or_else(|e| e.into_inner()) = Some(child.clone());
    Ok(child.get_cell())
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
            *state
                .args
                .current
                .write()
                .unwrap_or_else(|e| e.into_inner()) = None;
            state.child = Some(spawn_child(&myself, &state.args).await?);
            state.args.restarts.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<()>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        *state
            .args
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = None;
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
    supervisor: ActorRef<()>,
    restarts: Arc<AtomicU64>,
    timeout: Duration,
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

impl GuardSet {
    /// Starts the guard set and its supervisor, linked under `host` if given.
    pub async fn spawn(host: Option<ActorCell>) -> Result<GuardSet, GuardsError> {
        let current: Current = Arc::new(RwLock::new(None));
        let restarts = Arc::new(AtomicU64::new(0));
        let args = SupervisorArgs {
            store: Arc::new(Store::default()),
            current: current.clone(),
            restarts: restarts.clone(),
        };
        let spawned = match host {
            Some(host) => Actor::spawn_linked(None, GuardSupervisor, args, host).await,
            None => Actor::spawn(None, GuardSupervisor, args).await,
        };
        let (supervisor, _) = spawned.map_err(|e| GuardsError::Unavailable(e.to_string()))?;
        Ok(GuardSet {
            current,
            supervisor,
            restarts,
            timeout: Duration::from_secs(5),
        })
    }

    /// How long an evaluation may wait for the actor before it counts as a denial.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn actor(&self) -> Result<ActorRef<GuardSetMsg>, GuardsError> {
        current_ref(&self.current).ok_or_else(|| GuardsError::Unavailable("restarting".into()))
    }

    /// Registers a guard. A taken id is refused.
    pub async fn register(&self, guard: impl Guard) -> Result<GuardOwner, GuardsError> {
        self.register_arc(Arc::new(guard)).await
    }

    /// Registers a shared guard.
    pub async fn register_arc(&self, guard: Arc<dyn Guard>) -> Result<GuardOwner, GuardsError> {
        let id = guard.id().to_string();
        let actor = self.actor()?;
        let key = unavailable(
            actor
                .call(
                    |reply| GuardSetMsg::Register { guard, reply },
                    Some(self.timeout),
                )
                .await,
        )??;
        Ok(GuardOwner {
            id,
            key,
            set: self.clone(),
        })
    }

    /// Asks every guard about `call`. Any failure to ask is a denial.
    pub async fn evaluate(&self, call: GuardCall) -> GuardVerdict {
        let asked = match self.actor() {
            Ok(actor) => unavailable(
                actor
                    .call(
                        |reply| GuardSetMsg::Evaluate { call, reply },
                        Some(self.timeout),
                    )
                    .await,
            ),
            Err(e) => Err(e),
        };
        asked.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "guard set unavailable; denying");
            GuardVerdict::Deny(format!("{e}; denied to be safe"))
        })
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

    /// The current guard-set actor (for supervision and fault-injection tests).
    pub fn actor_cell(&self) -> Option<ActorCell> {
        current_ref(&self.current).map(|a| a.get_cell())
    }

    /// The supervisor that restarts the guard-set actor.
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

    /// Replaces the guard with another of the same id.
    pub async fn replace(&self, guard: impl Guard) -> Result<(), GuardsError> {
        let guard: Arc<dyn Guard> = Arc::new(guard);
        let key = self.key;
        let actor = self.set.actor()?;
        unavailable(
            actor
                .call(
                    |reply| GuardSetMsg::Replace { key, guard, reply },
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
