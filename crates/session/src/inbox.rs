//! The writer's append queue, and the acknowledgement an appender waits on.
//!
//! An actor message per append costs more than the append itself (boxing, the mailbox's
//! priority select, a panic guard), and an in-memory append would be paced by it. So appends
//! go into this queue, in the order they are sent, and only the first append since the writer
//! last looked rings it with a message; the writer then takes everything queued at once. What
//! arrives while a sync runs is therefore the next group: group commit without timers.

use crate::error::SessionError;
use dsh_core::EventBody;
use ractor::RpcReplyPort;
use ractor::concurrency::OneshotReceiver;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

pub(crate) type Ack = RpcReplyPort<Result<u64, SessionError>>;

/// One append waiting for the writer.
pub(crate) struct Queued {
    pub step: u64,
    /// When the append was made (SPEC.md's "Time"): the event's `at`.
    pub at: u64,
    pub body: EventBody,
    pub reply: Ack,
}

#[derive(Default)]
struct State {
    items: Vec<Queued>,
    /// A wake-up message is on its way to the writer.
    rung: bool,
    /// The writer is gone: appends are answered at once.
    closed: bool,
}

#[derive(Default)]
pub(crate) struct Inbox {
    state: Mutex<State>,
}

/// What [`Inbox::push`] asks of the caller.
pub(crate) enum Pushed {
    /// Queued; the writer already knows there is work.
    Queued,
    /// Queued; the caller must wake the writer.
    Ring,
    /// The writer is gone; here is the append back.
    Closed(Box<Queued>),
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held, so a poisoned lock still holds a sound queue.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn push(&self, item: Queued) -> Pushed {
        let mut state = self.lock();
        if state.closed {
            return Pushed::Closed(Box::new(item));
        }
        state.items.push(item);
        if state.rung {
            Pushed::Queued
        } else {
            state.rung = true;
            Pushed::Ring
        }
    }

    /// How many appends are queued.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Moves everything queued into `into` (which must be empty), keeping both allocations.
    pub fn take(&self, into: &mut Vec<Queued>) {
        let mut state = self.lock();
        state.rung = false;
        std::mem::swap(&mut state.items, into);
    }

    /// Refuses every later append and answers the queued ones with `error`.
    pub fn close(&self, error: &SessionError) {
        let items = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.items)
        };
        for item in items {
            let _ = item.reply.send(Err(error.clone()));
        }
    }
}

/// An acknowledgement on its way: resolves to the event's seq once it is durable.
pub struct PendingAppend {
    rx: Option<OneshotReceiver<Result<u64, SessionError>>>,
    early: Option<SessionError>,
}

impl PendingAppend {
    pub(crate) fn waiting(rx: OneshotReceiver<Result<u64, SessionError>>) -> PendingAppend {
        PendingAppend {
            rx: Some(rx),
            early: None,
        }
    }

    pub(crate) fn failed(error: SessionError) -> PendingAppend {
        PendingAppend {
            rx: None,
            early: Some(error),
        }
    }
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
