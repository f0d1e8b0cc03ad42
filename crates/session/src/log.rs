//! [`SessionLog`]: the handle on a session writer that the scheduler and the agent loop hold.

use crate::backend::{Durability, LogBackend};
use crate::error::SessionError;
use crate::file::FileBackend;
use crate::inbox::{Inbox, PendingAppend, Pushed, Queued};
use crate::recover::Recovery;
use crate::writer::{Counters, LogStats, SessionWriter, WriterArgs, WriterConfig, WriterMsg};
use dsh_core::{EventBody, SessionEvent};
use ractor::{Actor, ActorCell, ActorRef};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
    inbox: Arc<Inbox>,
    counters: Arc<Counters>,
    description: Arc<str>,
    /// Shared by every clone: the last one dropped closes the writer.
    _close_on_drop: Arc<CloseOnDrop>,
}

/// Closes the writer when the last handle on it is dropped, as [`SessionLog::close`] does
/// without waiting: what is queued is committed, the storage (a file's lock, a store's lease)
/// is let go, and the actor stops, instead of living until the process ends.
struct CloseOnDrop(ActorRef<WriterMsg>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let (reply, _) = ractor::concurrency::oneshot();
        // A writer already closed (or gone) has nothing left to let go.
        let _ = self.0.send_message(WriterMsg::Close {
            reply: reply.into(),
        });
    }
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

    /// Opens (creating or recovering) the JSON Lines log at `path` and starts a writer over it
    /// that continues with the next seq. The [`Recovery`] says what was repaired and where a
    /// resumed session continues (`next_step`, for the scheduler's `first_step`).
    ///
    /// ```
    /// use dsh_core::event::{EventBody, UserMessageData};
    /// use dsh_session::{Durability, SessionLog};
    /// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
    /// let dir = std::env::temp_dir().join(format!("dsh-doc-open-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("session.jsonl");
    /// # let _ = std::fs::remove_file(&path);
    /// let body = EventBody::UserMessage(UserMessageData { content: "hi".into(), origin: "c1".into() });
    /// let (log, recovery) = SessionLog::open_file(&path, Durability::Batch, None).await.unwrap();
    /// assert_eq!(recovery.next_seq, 1);
    /// assert_eq!(log.append(1, body.clone()).await.unwrap(), 1);
    /// log.close().await.unwrap();
    /// let (log, recovery) = SessionLog::open_file(&path, Durability::Batch, None).await.unwrap();
    /// assert_eq!((recovery.next_seq, recovery.next_step), (2, 2));
    /// assert_eq!(log.append(2, body).await.unwrap(), 2);
    /// log.close().await.unwrap();
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # });
    /// ```
    pub async fn open_file(
        path: impl AsRef<Path>,
        durability: Durability,
        supervisor: Option<ActorCell>,
    ) -> Result<(SessionLog, Recovery), SessionError> {
        let path = path.as_ref().to_path_buf();
        let (backend, recovery) =
            match tokio::task::spawn_blocking(move || FileBackend::open(path)).await {
                Ok(opened) => opened?,
                Err(e) => return unavailable(format!("opening the log panicked: {e}")),
            };
        let config = WriterConfig {
            durability,
            next_seq: recovery.next_seq,
        };
        let log = SessionLog::spawn(Box::new(backend), config, supervisor).await?;
        Ok((log, recovery))
    }

    /// [`SessionLog::open_file`], waiting up to `wait` while another writer holds the log (a
    /// `dsh` process on the same log that is still finishing, as when a client starts a new
    /// server for each session): tried again every few tens of milliseconds, then
    /// [`SessionError::StillInUse`].
    pub async fn open_file_waiting(
        path: impl AsRef<Path>,
        durability: Durability,
        wait: Duration,
        supervisor: Option<ActorCell>,
    ) -> Result<(SessionLog, Recovery), SessionError> {
        let path = path.as_ref();
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            match SessionLog::open_file(path, durability, supervisor.clone()).await {
                Err(SessionError::InUse(log)) => {
                    let waited = started.elapsed();
                    if waited >= wait {
                        return Err(SessionError::StillInUse {
                            log,
                            waited_ms: waited.as_millis(),
                        });
                    }
                    tracing::debug!(log = %log, "the log is in use by another writer; waiting");
                    tokio::time::sleep(pause.min(wait - waited)).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                other => return other,
            }
        }
    }

    /// Opens session `session` in the PostgreSQL database at `url`: takes its lease (waiting
    /// up to `options.wait` for another writer's to end, then failing with
    /// [`SessionError::Leased`]), recovers it as [`SessionLog::open_file`] recovers a file
    /// (open calls closed as `ABORTED`, every invariant checked), and starts a writer over it
    /// that continues its seq. See [`crate::postgres`] for the lease and fencing.
    #[cfg(feature = "postgres")]
    pub async fn open_postgres(
        url: &str,
        session: &str,
        durability: Durability,
        options: crate::postgres::LeaseOptions,
        supervisor: Option<ActorCell>,
    ) -> Result<(SessionLog, Recovery), SessionError> {
        let url = url.to_string();
        let id = session.to_string();
        let opened = tokio::task::spawn_blocking(move || {
            crate::postgres::PostgresBackend::open(&url, &id, durability, options)
        })
        .await;
        let (backend, recovery) = match opened {
            Ok(opened) => opened?,
            Err(e) => return unavailable(format!("opening the session panicked: {e}")),
        };
        let config = WriterConfig {
            durability,
            next_seq: recovery.next_seq,
        };
        let log = SessionLog::spawn(Box::new(backend), config, supervisor).await?;
        Ok((log, recovery))
    }

    /// Starts a writer over `backend`, linked under `supervisor` if given.
    pub async fn spawn(
        backend: Box<dyn LogBackend>,
        config: WriterConfig,
        supervisor: Option<ActorCell>,
    ) -> Result<SessionLog, SessionError> {
        let description: Arc<str> = backend.describe().into();
        let inbox = Arc::new(Inbox::default());
        let counters = Arc::new(Counters::default());
        let args = WriterArgs {
            backend,
            config,
            inbox: inbox.clone(),
            counters: counters.clone(),
        };
        let spawned = match supervisor {
            Some(sup) => Actor::spawn_linked(None, SessionWriter, args, sup).await,
            None => Actor::spawn(None, SessionWriter, args).await,
        };
        match spawned {
            Ok((actor, _)) => Ok(SessionLog {
                _close_on_drop: Arc::new(CloseOnDrop(actor.clone())),
                actor,
                inbox,
                counters,
                description,
            }),
            Err(e) => unavailable(e),
        }
    }

    /// Sends an append now (fixing its place in the log) and returns its acknowledgement.
    pub fn send(&self, step: u64, body: EventBody) -> PendingAppend {
        let (tx, rx) = ractor::concurrency::oneshot();
        let item = Queued {
            step,
            at: dsh_core::event::now_ms(),
            body,
            reply: tx.into(),
        };
        match self.inbox.push(item) {
            Pushed::Queued => {}
            Pushed::Ring => {
                if let Err(e) = self.actor.send_message(WriterMsg::Drain) {
                    // The writer is gone: nobody else will answer what is queued.
                    self.inbox.close(&SessionError::Unavailable(e.to_string()));
                }
            }
            Pushed::Closed(_) => return PendingAppend::failed(SessionError::Closed),
        }
        PendingAppend::waiting(rx)
    }

    /// Appends one event and waits until it is durable; answers its seq.
    pub async fn append(&self, step: u64, body: EventBody) -> Result<u64, SessionError> {
        self.send(step, body).await
    }

    /// Waits until everything appended so far is durable. An error says an append since the
    /// last flush failed (that append was answered with the error and is not in the log).
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

    /// Every event so far, in order.
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

    /// What the writer has committed so far (events, commits, syncs).
    pub fn stats(&self) -> LogStats {
        self.counters.read()
    }

    /// What the log is stored in.
    pub fn describe(&self) -> &str {
        &self.description
    }
}
