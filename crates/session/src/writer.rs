//! The session writer actor: assigns `seq`, appends events, acknowledges them once durable.
//!
//! Sequencing happens in the writer's inbox (see `inbox.rs`): the order in which appends are
//! *sent* is the order of their seqs. [`crate::SessionLog::send`] exposes that, so the
//! scheduler can fix the order of a step's `tool/call` events (the order of the blocks) and
//! still wait for the acknowledgements concurrently.
//!
//! The writer takes everything queued at once and commits it as one group. Under
//! [`Durability::Batch`] that is group commit: appends that arrive while a sync runs share the
//! next one, and none is acknowledged before it is on disk. [`Durability::None`] groups the
//! same way but skips the sync; [`Durability::Always`] commits and syncs each append alone. A
//! failed commit answers the error to every append in it and gives its seqs back, so the log
//! keeps no gap; a backend that cannot undo a failed write poisons the writer, and so does a
//! failed commit that held a `tool/result` (its call would otherwise stay open under events
//! of later steps, where recovery could no longer close it within its step).
//!
//! Before an event takes a seq, the writer makes sure dsh's own reader can read it back
//! identical (`limits.rs`: nesting depth, line length, the largest seq and step); an event it
//! could not is refused with [`SessionError::Refused`] and nothing of it is written.

use crate::backend::{Durability, LogBackend};
use crate::error::SessionError;
use crate::inbox::{Ack, Inbox, Pushed, Queued};
use crate::limits;
use dsh_core::live::LiveActor;
use dsh_core::{EventBody, SessionEvent};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most a `batch` group waits for appenders still waking, as a share of the last sync's
/// time: at most this much latency is traded for fewer syncs.
const GATHER_SHARE: u32 = 8;
/// A bound on the yields of one gather, whatever the clock says.
const GATHER_MAX_YIELDS: u32 = 256;

/// The writer's messages.
pub enum WriterMsg {
    /// Appends one event; answers its seq once it is as durable as the setting asks.
    /// ([`crate::SessionLog::send`] queues appends without a message each; this variant is for
    /// code that holds only the actor.)
    Append {
        /// The step the event belongs to.
        step: u64,
        /// Type and data.
        body: dsh_core::EventBody,
        /// The seq, or why the event is not in the log.
        reply: RpcReplyPort<Result<u64, SessionError>>,
    },
    /// Answers once everything appended before it is durable; an error when an append since
    /// the last flush failed.
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
    /// Appends are waiting in the inbox.
    Drain,
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
            WriterMsg::Drain => f.write_str("Drain"),
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

pub(crate) struct SessionWriter;

/// What a writer has committed so far, read through [`crate::SessionLog::stats`]: how well
/// appends are sharing commits and syncs.
///
/// ```
/// use dsh_core::event::{EventBody, UserMessageData};
/// use dsh_session::SessionLog;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let log = SessionLog::memory().await.unwrap();
/// let body = EventBody::UserMessage(UserMessageData { content: "hi".into(), origin: "c1".into() });
/// log.append(1, body).await.unwrap();
/// let stats = log.stats();
/// assert_eq!((stats.events, stats.commits, stats.syncs), (1, 1, 0));
/// # log.close().await.unwrap();
/// # });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Events committed (acknowledged with a seq).
    pub events: u64,
    /// Successful commits: under `batch`, each is one group of appends.
    pub commits: u64,
    /// Commits that synced to disk.
    pub syncs: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    events: AtomicU64,
    commits: AtomicU64,
    syncs: AtomicU64,
}

impl Counters {
    pub(crate) fn read(&self) -> LogStats {
        LogStats {
            events: self.events.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
        }
    }

    fn committed(&self, events: usize, synced: bool) {
        self.events.fetch_add(events as u64, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
        if synced {
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(crate) struct WriterArgs {
    pub backend: Box<dyn LogBackend>,
    pub config: WriterConfig,
    pub inbox: Arc<Inbox>,
    pub counters: Arc<Counters>,
}

pub(crate) struct WriterState {
    backend: Option<Box<dyn LogBackend>>,
    durability: Durability,
    next_seq: u64,
    inbox: Arc<Inbox>,
    /// The inbox's previous buffer, kept to swap back in.
    spare: Vec<Queued>,
    /// A failure since the last flush, which that flush reports.
    unflushed_failure: Option<SessionError>,
    poisoned: Option<String>,
    counters: Arc<Counters>,
    /// How many appends the last group committed, and how long its sync took: the next
    /// `batch` group waits (briefly) for as many.
    last_group: usize,
    last_sync: Duration,
    _live: LiveActor,
}

impl Drop for WriterState {
    // However the writer ends (stop, kill, panic), no appender is left waiting.
    fn drop(&mut self) {
        self.inbox.close(&SessionError::Closed);
    }
}

impl WriterState {
    fn refuse(&self) -> Option<SessionError> {
        match (&self.poisoned, &self.backend) {
            (Some(why), _) => Some(SessionError::Poisoned(why.clone())),
            (None, None) => Some(SessionError::Poisoned("the backend was lost".into())),
            _ => None,
        }
    }

    /// Runs one commit, off the async workers when it may wait on the disk. A write without a
    /// sync only copies into the page cache, which costs less than the hand-off to the
    /// blocking pool and back.
    async fn commit(&mut self, events: Vec<SessionEvent>, sync: bool) -> Result<(), SessionError> {
        let Some(mut backend) = self.backend.take() else {
            return Err(SessionError::Poisoned("the backend was lost".into()));
        };
        let (backend, result) = if backend.commit_blocks(sync) {
            match tokio::task::spawn_blocking(move || {
                let r = backend.commit(events, sync);
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
            let r = backend.commit(events, sync);
            (Some(backend), r)
        };
        self.backend = backend;
        if let Err(SessionError::Poisoned(why)) = &result {
            tracing::error!(reason = %why, "session writer poisoned");
            self.poisoned = Some(why.clone());
        }
        result
    }

    /// Poisons the writer because a `tool/result` is not in the log: its call is now open,
    /// and whatever came after it (a later step) would leave that call unpairable within its
    /// step. Recovery closes it only if it is still the last thing in the log.
    fn lost_result(&mut self, e: &SessionError) {
        if self.poisoned.is_none() {
            let why = format!(
                "a tool/result could not be recorded ({e}); no event may follow an unpaired \
                 call: reopen the log to close it as ABORTED"
            );
            tracing::error!(reason = %why, "session writer poisoned");
            self.poisoned = Some(why);
        }
    }

    /// Gives `items` the next seqs, commits them as one group and answers each. An event that
    /// dsh's reader could not read back identical ([`limits::admit`]) is answered
    /// [`SessionError::Refused`] at once and takes no seq; a refused `tool/result` poisons the
    /// writer (its call would stay open), and the events after it in the group are refused too.
    async fn commit_group(&mut self, items: impl ExactSizeIterator<Item = Queued>) {
        let n = items.len();
        if n == 0 {
            return;
        }
        if let Some(err) = self.refuse() {
            for item in items {
                let _ = item.reply.send(Err(err.clone()));
            }
            return;
        }
        let first = self.next_seq;
        let mut events = Vec::with_capacity(n);
        let mut acks: Vec<Ack> = Vec::with_capacity(n);
        let mut has_result = false;
        for item in items {
            if let Some(err) = self.refuse() {
                let _ = item.reply.send(Err(err));
                continue;
            }
            let is_result = matches!(item.body, EventBody::ToolResult { .. });
            let event = SessionEvent {
                seq: first.saturating_add(events.len() as u64),
                step: item.step,
                at: Some(item.at),
                body: item.body,
            };
            if let Err(e) = limits::admit(&event) {
                tracing::warn!(error = %e, seq = event.seq, "an append was refused");
                self.unflushed_failure.get_or_insert_with(|| e.clone());
                if is_result {
                    self.lost_result(&e);
                }
                let _ = item.reply.send(Err(e));
                continue;
            }
            has_result |= is_result;
            events.push(event);
            acks.push(item.reply);
        }
        let n = events.len();
        if n == 0 {
            return;
        }
        let sync = self.durability != Durability::None;
        let started = Instant::now();
        let result = self.commit(events, sync).await;
        match &result {
            Ok(()) => {
                self.next_seq = first + n as u64;
                self.counters.committed(n, sync);
                self.last_group = n;
                self.last_sync = started.elapsed();
            }
            // Nothing of the group is in the log: its seqs go to the next appends.
            Err(e) => {
                tracing::warn!(error = %e, events = n, "a session log commit failed");
                self.unflushed_failure.get_or_insert_with(|| e.clone());
                if has_result {
                    self.lost_result(e);
                }
            }
        }
        for (i, ack) in acks.into_iter().enumerate() {
            let _ = ack.send(result.clone().map(|()| first + i as u64));
        }
    }

    /// Takes everything queued and commits it.
    async fn drain(&mut self) {
        if self.durability == Durability::Batch {
            gather(&self.inbox, self.last_group, self.last_sync).await;
        }
        let mut items = std::mem::take(&mut self.spare);
        self.inbox.take(&mut items);
        if self.durability == Durability::Always {
            for item in items.drain(..) {
                self.commit_group(std::iter::once(item)).await;
            }
        } else {
            self.commit_group(items.drain(..)).await;
        }
        self.spare = items;
    }

    fn flushed(&mut self) -> Result<(), SessionError> {
        match (self.refuse(), self.unflushed_failure.take()) {
            (Some(err), _) | (None, Some(err)) => Err(err),
            (None, None) => Ok(()),
        }
    }
}

/// The appenders the last sync answered are waking now; the first of them rang. Letting
/// the others queue first makes one full group instead of a lone append followed by
/// everyone else: an adaptive commit delay without a timer. It yields until as many appends
/// are queued as the last group held, or an eighth of the last sync's time has passed, so a
/// lone appender never waits and a crowd costs one sync instead of two.
async fn gather(inbox: &Inbox, last_group: usize, last_sync: Duration) {
    tokio::task::yield_now().await;
    let budget = last_sync / GATHER_SHARE;
    let started = Instant::now();
    for _ in 0..GATHER_MAX_YIELDS {
        if inbox.len() >= last_group || started.elapsed() >= budget {
            return;
        }
        tokio::task::yield_now().await;
    }
}

impl Actor for SessionWriter {
    type Msg = WriterMsg;
    type State = WriterState;
    type Arguments = WriterArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<WriterMsg>,
        args: WriterArgs,
    ) -> Result<WriterState, ActorProcessingErr> {
        Ok(WriterState {
            backend: Some(args.backend),
            durability: args.config.durability,
            next_seq: args.config.next_seq.max(1),
            inbox: args.inbox,
            spare: Vec::new(),
            unflushed_failure: None,
            poisoned: None,
            counters: args.counters,
            last_group: 0,
            last_sync: Duration::ZERO,
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
                // Behind whatever the inbox already holds, like any other append.
                if let Pushed::Closed(item) = state.inbox.push(Queued {
                    step,
                    at: dsh_core::event::now_ms(),
                    body,
                    reply,
                }) {
                    let _ = item.reply.send(Err(SessionError::Closed));
                }
                state.drain().await;
            }
            WriterMsg::Drain => state.drain().await,
            WriterMsg::Flush { reply } => {
                state.drain().await;
                let _ = reply.send(state.flushed());
            }
            WriterMsg::Snapshot { reply } => {
                state.drain().await;
                let events = match &state.backend {
                    Some(b) => b.read_all(),
                    None => Err(SessionError::Poisoned("the backend was lost".into())),
                };
                let _ = reply.send(events);
            }
            WriterMsg::Close { reply } => {
                state.drain().await;
                state.inbox.close(&SessionError::Closed);
                let answer = state.flushed();
                // Let go of the storage (and the file's lock) before answering, so whoever
                // closed the log can open it again at once.
                drop(state.backend.take());
                let _ = reply.send(answer);
                myself.stop(Some("closed".into()));
            }
        }
        Ok(())
    }
}
