//! The session writer actor: assigns `seq`, appends events, acknowledges them once durable.
//!
//! Sequencing happens in the actor's mailbox: the order in which appends are *sent* is the
//! order of their seqs. [`SessionLog::send`] exposes that, so the scheduler can fix the order
//! of a step's `tool/call` events (the order of the blocks) and still wait for the
//! acknowledgements concurrently.
//!
//! Under [`Durability::Batch`] the writer does group commit: appends that arrive while a sync
//! is running are buffered, and the next sync covers all of them; none is acknowledged before
//! it is on disk. A failed commit answers an error to every append in it and rolls `seq` back,
//! so the log keeps no gap; a backend that cannot undo a failed write poisons the writer.

use crate::backend::{Durability, LogBackend};
use crate::error::SessionError;
use dsh_core::live::LiveActor;
use dsh_core::{EventBody, SessionEvent};
use ractor::concurrency::OneshotReceiver;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

type Ack = RpcReplyPort<Result<u64, SessionError>>;

/// The writer's messages.
pub enum WriterMsg {
    /// Appends one event; answers its seq once it is as durable as the setting asks.
    Append {
        /// The step the event belongs to.
        step: u64,
        /// Type and data.
        body: EventBody,
        /// The seq, or why the event is not in the log.
        reply: Ack,
    },
    /// Answers once everything appended before it is durable.
    Flush {
        /// Done, or the failure.
        reply: RpcReplyPort<Result<(), SessionError>>,
    },
    /// Every event in the log, in order.
    Snapshot {
        /// The events.
        reply: RpcReplyPort<Result<Vec<SessionEvent>, SessionError>>,
    },
    /// Flushes, then stops the writer.
    Close {
        /// Done, or the failure of the last flush.
        reply: RpcReplyPort<Result<(), SessionError>>,
    },
    /// Internal: run the group commit.
    Sync,
}

impl fmt::Debug for WriterMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriterMsg::Append { step, body, .. } => f
                .debug_struct("Append")
                .field("step", step)
                .field("type", &body.type_str())
                .finish(),
            WriterMsg::Flush { .. } => f.write_str("Flush"),
            WriterMsg::Snapshot { .. } => f.write_str("Snapshot"),
            WriterMsg::Close { .. } => f.write_str("Close"),
            WriterMsg::Sync => f.write_str("Sync"),
        }
    }
}

/// How to start a writer.
#[derive(Debug, Clone, Copy)]
pub struct WriterConfig {
    /// The durability setting.
    pub durability: Durability,
    /// The seq of the next event (1 for a new log; recovery tells a resumed one).
    pub next_seq: u64,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            durability: Durability::Batch,
            next_seq: 1,
        }
    }
}

struct SessionWriter;

struct WriterState {
    backend: Option<Box<dyn LogBackend>>,
    durability: Durability,
    next_seq: u64,
    /// Events written to no storage yet, with their acknowledgements (batch mode).
    pending: Vec<(SessionEvent, Ack)>,
    /// Flushes waiting for the pending group.
    flushes: Vec<RpcReplyPort<Result<(), SessionError>>>,
    sync_scheduled: bool,
    poisoned: Option<String>,
    _live: LiveActor,
}

impl WriterState {
    fn refuse(&self) -> Option<SessionError> {
        match (&self.poisoned, &self.backend) {
            (Some(why), _) => Some(SessionError::Poisoned(why.clone())),
            (None, None) => Some(SessionError::Poisoned("the backend was lost".into())),
            _ => None,
        }
    }

    /// Runs one commit, off the async workers when the backend blocks.
    async fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        if let Some(err) = self.refuse() {
            return Err(err);
        }
        let Some(mut backend) = self.backend.take() else {
            return Err(SessionError::Poisoned("the backend was lost".into()));
        };
        let (backend, result) = if backend.blocks() {
            match tokio::task::spawn_blocking(move || {
                let r = backend.commit(&events, sync);
                (backend, r)
            })
            .await
            {
                Ok(pair) => (Some(pair.0), pair.1),
                Err(e) => (
                    None,
                    Err(SessionError::Poisoned(format!("the backend panicked: {e}"))),
                ),
            }
        } else {
            let r = backend.commit(&events, sync);
            (Some(backend), r)
        };
        self.backend = backend;
        if let Err(SessionError::Poisoned(why)) = &result {
            tracing::error!(reason = %why, "session writer poisoned");
            self.poisoned = Some(why.clone());
        }
        result
    }

    /// Commits the pending group and answers every acknowledgement and flush waiting on it.
    async fn sync_pending(&mut self) {
        self.sync_scheduled = false;
        let group = std::mem::take(&mut self.pending);
        let flushes = std::mem::take(&mut self.flushes);
        if group.is_empty() {
            let answer = self.refuse().map_or(Ok(()), Err);
            for f in flushes {
                let _ = f.send(answer.clone());
            }
            return;
        }
        let first_seq = group[0].0.seq;
        let (events, acks): (Vec<_>, Vec<_>) = group.into_iter().unzip();
        let result = self.commit(events, true).await;
        if result.is_err() {
            // Nothing of the group is in the log: give its seqs back so the log has no gap.
            self.next_seq = first_seq;
        }
        for (i, ack) in acks.into_iter().enumerate() {
            let _ = ack.send(result.clone().map(|()| first_seq + i as u64));
        }
        for f in flushes {
            let _ = f.send(result.clone());
        }
    }
}

impl Actor for SessionWriter {
    type Msg = WriterMsg;
    type State = WriterState;
    type Arguments = (Box<dyn LogBackend>, WriterConfig);

    async fn pre_start(
        &self,
        _myself: ActorRef<WriterMsg>,
        (backend, config): Self::Arguments,
    ) -> Result<WriterState, ActorProcessingErr> {
        Ok(WriterState {
            backend: Some(backend),
            durability: config.durability,
            next_seq: config.next_seq.max(1),
            pending: Vec::new(),
            flushes: Vec::new(),
            sync_scheduled: false,
            poisoned: None,
            _live: LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<WriterMsg>,
        msg: WriterMsg,
        state: &mut WriterState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WriterMsg::Append { step, body, reply } => {
                if let Some(err) = state.refuse() {
                    let _ = reply.send(Err(err));
                    return Ok(());
                }
                let seq = state.next_seq;
                state.next_seq += 1;
                let event = SessionEvent { seq, step, body };
                match state.durability {
                    Durability::Batch => {
                        state.pending.push((event, reply));
                        if !state.sync_scheduled {
                            state.sync_scheduled = true;
                            myself.send_message(WriterMsg::Sync)?;
                        }
                    }
                    Durability::Always | Durability::None => {
                        let sync = state.durability == Durability::Always;
                        let result = state.commit(vec![event], sync).await;
                        if result.is_err() {
                            state.next_seq = seq;
                        }
                        let _ = reply.send(result.map(|()| seq));
                    }
                }
            }
            WriterMsg::Sync => state.sync_pending().await,
            WriterMsg::Flush { reply } => {
                if state.pending.is_empty() {
                    let _ = reply.send(state.refuse().map_or(Ok(()), Err));
                } else {
                    state.flushes.push(reply);
                }
            }
            WriterMsg::Snapshot { reply } => {
                let events = match (&state.backend, state.pending.is_empty()) {
                    (Some(b), true) => b.read_all(),
                    (Some(b), false) => b.read_all().map(|mut v| {
                        v.extend(state.pending.iter().map(|(e, _)| e.clone()));
                        v
                    }),
                    (None, _) => Err(SessionError::Poisoned("the backend was lost".into())),
                };
                let _ = reply.send(events);
            }
            WriterMsg::Close { reply } => {
                state.sync_pending().await;
                let _ = reply.send(state.refuse().map_or(Ok(()), Err));
                myself.stop(Some("closed".into()));
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<WriterMsg>,
        state: &mut WriterState,
    ) -> Result<(), ActorProcessingErr> {
        // Appends still waiting when the writer stops are answered, never dropped silently.
        for (_, ack) in state.pending.drain(..) {
            let _ = ack.send(Err(SessionError::Closed));
        }
        for f in state.flushes.drain(..) {
            let _ = f.send(Err(SessionError::Closed));
        }
        Ok(())
    }
}

/// An acknowledgement on its way: resolves to the event's seq once it is durable.
pub struct PendingAppend {
    rx: Option<OneshotReceiver<Result<u64, SessionError>>>,
    early: Option<SessionError>,
}

impl fmt::Debug for PendingAppend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingAppend").finish()
    }
}

impl Future for PendingAppend {
    type Output = Result<u64, SessionError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(err) = self.early.take() {
            return Poll::Ready(Err(err));
        }
        match self.rx.as_mut() {
            None => Poll::Ready(Err(SessionError::Closed)),
            Some(rx) => Pin::new(rx).poll(cx).map(|r| {
                r.unwrap_or_else(|_| {
                    Err(SessionError::Unavailable(
                        "the writer stopped before answering".into(),
                    ))
                })
            }),
        }
    }
}

/// A handle on a session writer. Clones share the writer.
///
/// ```
/// use dsh_core::event::{EventBody, UserMessageData};
/// use dsh_session::SessionLog;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let log = SessionLog::memory().await.unwrap();
/// let body = EventBody::UserMessage(UserMessageData { content: "hi".into(), origin: "c1".into() });
/// assert_eq!(log.append(1, body.clone()).await.unwrap(), 1);
/// assert_eq!(log.append(1, body).await.unwrap(), 2);
/// assert_eq!(log.snapshot().await.unwrap().len(), 2);
/// log.close().await.unwrap();
/// # });
/// ```
#[derive(Clone)]
pub struct SessionLog {
    actor: ActorRef<WriterMsg>,
    description: std::sync::Arc<str>,
}

impl fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLog")
            .field("backend", &self.description)
            .finish()
    }
}

fn unavailable<T>(e: impl fmt::Display) -> Result<T, SessionError> {
    Err(SessionError::Unavailable(e.to_string()))
}

impl SessionLog {
    /// A new in-memory log.
    pub async fn memory() -> Result<SessionLog, SessionError> {
        SessionLog::spawn(
            Box::new(crate::MemoryBackend::default()),
            WriterConfig {
                durability: Durability::None,
                next_seq: 1,
            },
            None,
        )
        .await
    }

    /// Starts a writer over `backend`, linked under `supervisor` if given.
    pub async fn spawn(
        backend: Box<dyn LogBackend>,
        config: WriterConfig,
        supervisor: Option<ActorCell>,
    ) -> Result<SessionLog, SessionError> {
        let description: std::sync::Arc<str> = backend.describe().into();
        let spawned = match supervisor {
            Some(sup) => Actor::spawn_linked(None, SessionWriter, (backend, config), sup).await,
            None => Actor::spawn(None, SessionWriter, (backend, config)).await,
        };
        match spawned {
            Ok((actor, _)) => Ok(SessionLog { actor, description }),
            Err(e) => unavailable(e),
        }
    }

    /// Sends an append now (fixing its place in the log) and returns its acknowledgement.
    pub fn send(&self, step: u64, body: EventBody) -> PendingAppend {
        let (tx, rx) = ractor::concurrency::oneshot();
        let msg = WriterMsg::Append {
            step,
            body,
            reply: tx.into(),
        };
        match self.actor.send_message(msg) {
            Ok(()) => PendingAppend {
                rx: Some(rx),
                early: None,
            },
            Err(e) => PendingAppend {
                rx: None,
                early: Some(SessionError::Unavailable(e.to_string())),
            },
        }
    }

    /// Appends one event and waits until it is durable; answers its seq.
    pub async fn append(&self, step: u64, body: EventBody) -> Result<u64, SessionError> {
        self.send(step, body).await
    }

    /// Waits until everything appended so far is durable.
    pub async fn flush(&self) -> Result<(), SessionError> {
        match self
            .actor
            .call(|reply| WriterMsg::Flush { reply }, None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(other) => unavailable(format!("{other:?}")),
            Err(e) => unavailable(e),
        }
    }

    /// Every event so far, in order (including ones not yet durable).
    pub async fn snapshot(&self) -> Result<Vec<SessionEvent>, SessionError> {
        match self
            .actor
            .call(|reply| WriterMsg::Snapshot { reply }, None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(other) => unavailable(format!("{other:?}")),
            Err(e) => unavailable(e),
        }
    }

    /// Flushes and stops the writer, waiting until it has stopped.
    pub async fn close(&self) -> Result<(), SessionError> {
        let answer = match self
            .actor
            .call(
                |reply| WriterMsg::Close { reply },
                Some(Duration::from_secs(60)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(other) => unavailable(format!("{other:?}")),
            Err(_) => Err(SessionError::Closed),
        };
        let _ = self
            .actor
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
        answer
    }

    /// The writer actor (for supervision and fault-injection tests).
    pub fn actor_cell(&self) -> ActorCell {
        self.actor.get_cell()
    }

    /// What the log is stored in.
    pub fn describe(&self) -> &str {
        &self.description
    }
}
