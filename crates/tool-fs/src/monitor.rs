//! The fs-intent monitor: an actor holding, per agent, the hash of each file as that agent
//! last read (or wrote) it, and the read-before-edit rule built on those records.
//!
//! Changing an existing file needs a read of it by the same agent, and the file must not
//! have changed since (its hash is compared). A new file needs no read. A tool's own write
//! updates the record, so consecutive edits work without reading again.

use crate::error::FsError;
use crate::hash::ContentHash;
use crate::intent::{FsIntent, FsIntentHandler, IntentVerdict};
use async_trait::async_trait;
use dsh_core::live::LiveActor;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// Why the read-before-edit rule refused a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The agent never read the file.
    NeverRead,
    /// The file changed since the agent read it.
    ChangedSinceRead,
}

/// The monitor's messages.
pub enum MonitorMsg {
    /// `agent` read `path`, whose content hashes to `hash`.
    RecordRead {
        /// The agent.
        agent: String,
        /// The file, relative to the root.
        path: String,
        /// Its hash.
        hash: ContentHash,
        /// Answered once the record is in place.
        done: Option<RpcReplyPort<()>>,
    },
    /// May `agent` change `path`, which now hashes to `current` (`None`: it does not exist)?
    CheckIntent {
        /// The agent.
        agent: String,
        /// The file.
        path: String,
        /// Its hash now.
        current: Option<ContentHash>,
        /// The answer.
        reply: RpcReplyPort<Result<(), Refusal>>,
    },
    /// `agent` wrote `path`: its record now holds `hash`; `None` means the file was
    /// deleted, and every agent's record of it is dropped.
    RecordWrite {
        /// The agent.
        agent: String,
        /// The file.
        path: String,
        /// The new hash, or `None` after a delete.
        hash: Option<ContentHash>,
    },
    /// Records rebuilt from a session's log (agent, path, hash), put in place as if each
    /// agent had read each file again; answered once they are.
    Restore {
        /// The records.
        records: Vec<(String, String, ContentHash)>,
        /// Answered once the records are in place.
        done: RpcReplyPort<()>,
    },
}

impl fmt::Debug for MonitorMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MonitorMsg::RecordRead { agent, path, .. } => {
                write!(f, "RecordRead({agent}, {path})")
            }
            MonitorMsg::CheckIntent { agent, path, .. } => {
                write!(f, "CheckIntent({agent}, {path})")
            }
            MonitorMsg::RecordWrite { agent, path, .. } => {
                write!(f, "RecordWrite({agent}, {path})")
            }
            MonitorMsg::Restore { records, .. } => write!(f, "Restore({})", records.len()),
        }
    }
}

struct MonitorActor;

/// The monitor's state: agent → path → hash.
pub struct MonitorState {
    records: HashMap<String, HashMap<String, ContentHash>>,
    _live: LiveActor,
}

impl MonitorState {
    fn check(&self, agent: &str, path: &str, current: Option<ContentHash>) -> Result<(), Refusal> {
        let Some(current) = current else {
            return Ok(());
        };
        match self.records.get(agent).and_then(|r| r.get(path)) {
            None => Err(Refusal::NeverRead),
            Some(seen) if *seen != current => Err(Refusal::ChangedSinceRead),
            Some(_) => Ok(()),
        }
    }
}

impl Actor for MonitorActor {
    type Msg = MonitorMsg;
    type State = MonitorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<MonitorMsg>,
        _args: (),
    ) -> Result<MonitorState, ActorProcessingErr> {
        Ok(MonitorState {
            records: HashMap::new(),
            _live: LiveActor::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<MonitorMsg>,
        msg: MonitorMsg,
        state: &mut MonitorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            MonitorMsg::RecordRead {
                agent,
                path,
                hash,
                done,
            } => {
                state.records.entry(agent).or_default().insert(path, hash);
                if let Some(done) = done {
                    // The reader may have given up waiting; the record stands anyway.
                    let _ = done.send(());
                }
            }
            MonitorMsg::CheckIntent {
                agent,
                path,
                current,
                reply,
            } => {
                // The caller may have given up waiting; nothing to do about it here.
                let _ = reply.send(state.check(&agent, &path, current));
            }
            MonitorMsg::RecordWrite {
                agent,
                path,
                hash: Some(hash),
            } => {
                state.records.entry(agent).or_default().insert(path, hash);
            }
            MonitorMsg::RecordWrite {
                path, hash: None, ..
            } => {
                for records in state.records.values_mut() {
                    records.remove(&path);
                }
            }
            MonitorMsg::Restore { records, done } => {
                // A record only ever allows a change to the very content it hashes, so
                // adding what the log remembers cannot allow more than the reads it records.
                for (agent, path, hash) in records {
                    state.records.entry(agent).or_default().insert(path, hash);
                }
                let _ = done.send(());
            }
        }
        Ok(())
    }
}

/// A handle on the monitor. Clones share it. As an [`FsIntentHandler`] it is the
/// read-before-edit rule.
#[derive(Clone)]
pub struct FsIntentMonitor {
    actor: ActorRef<MonitorMsg>,
    timeout: Duration,
}

impl fmt::Debug for FsIntentMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsIntentMonitor")
            .field("actor", &self.actor.get_id())
            .finish()
    }
}

impl FsIntentMonitor {
    /// Starts the monitor, linked under `supervisor` if given.
    pub async fn spawn(supervisor: Option<ActorCell>) -> Result<FsIntentMonitor, FsError> {
        let spawned = match supervisor {
            Some(sup) => Actor::spawn_linked(None, MonitorActor, (), sup).await,
            None => Actor::spawn(None, MonitorActor, ()).await,
        };
        let (actor, _) = spawned.map_err(|e| FsError::Spawn(e.to_string()))?;
        Ok(FsIntentMonitor {
            actor,
            timeout: Duration::from_secs(5),
        })
    }

    /// Records that `agent` was shown `path`, whose bytes (the ones the content shown was
    /// made from) hash to `hash`, and waits until the record is in place: a read's result is
    /// returned only once a write that follows it can see the record.
    pub async fn record_read(
        &self,
        agent: &str,
        path: &str,
        hash: ContentHash,
    ) -> Result<(), FsError> {
        let (agent, path) = (agent.to_string(), path.to_string());
        let answer = self
            .actor
            .call(
                |done| MonitorMsg::RecordRead {
                    agent,
                    path,
                    hash,
                    done: Some(done),
                },
                Some(self.timeout),
            )
            .await;
        match answer {
            Ok(CallResult::Success(())) => Ok(()),
            Ok(CallResult::Timeout) => Err(FsError::MonitorUnavailable("no answer in time".into())),
            Ok(CallResult::SenderError) => Err(FsError::MonitorUnavailable(
                "the monitor dropped the record".into(),
            )),
            Err(e) => Err(FsError::MonitorUnavailable(e.to_string())),
        }
    }

    /// Puts back records rebuilt from a session's log (`(agent, path, hash)`), as if each
    /// agent had been shown each file as it hashes; waits until they are in place.
    pub async fn restore(
        &self,
        records: Vec<(String, String, ContentHash)>,
    ) -> Result<(), FsError> {
        let answer = self
            .actor
            .call(
                |done| MonitorMsg::Restore { records, done },
                Some(self.timeout),
            )
            .await;
        match answer {
            Ok(CallResult::Success(())) => Ok(()),
            Ok(CallResult::Timeout) => Err(FsError::MonitorUnavailable("no answer in time".into())),
            Ok(CallResult::SenderError) => Err(FsError::MonitorUnavailable(
                "the monitor dropped the records".into(),
            )),
            Err(e) => Err(FsError::MonitorUnavailable(e.to_string())),
        }
    }

    /// Records a tool's own write (`None`: a delete).
    pub fn record_write(&self, agent: &str, path: &str, hash: Option<ContentHash>) {
        let sent = self.actor.send_message(MonitorMsg::RecordWrite {
            agent: agent.to_string(),
            path: path.to_string(),
            hash,
        });
        if let Err(e) = sent {
            tracing::warn!(error = %e, path, "fs-intent monitor gone; write not recorded");
        }
    }

    /// Asks whether `agent` may change `path`, which hashes to `current` now.
    pub async fn check(
        &self,
        agent: &str,
        path: &str,
        current: Option<ContentHash>,
    ) -> Result<Result<(), Refusal>, FsError> {
        let (agent, path) = (agent.to_string(), path.to_string());
        let answer = self
            .actor
            .call(
                |reply| MonitorMsg::CheckIntent {
                    agent,
                    path,
                    current,
                    reply,
                },
                Some(self.timeout),
            )
            .await;
        match answer {
            Ok(CallResult::Success(verdict)) => Ok(verdict),
            Ok(CallResult::Timeout) => Err(FsError::MonitorUnavailable("no answer in time".into())),
            Ok(CallResult::SenderError) => Err(FsError::MonitorUnavailable(
                "the monitor dropped the question".into(),
            )),
            Err(e) => Err(FsError::MonitorUnavailable(e.to_string())),
        }
    }

    /// The actor (for supervision).
    pub fn actor_cell(&self) -> ActorCell {
        self.actor.get_cell()
    }

    /// Stops the actor and waits for it.
    pub async fn shutdown(&self) {
        let _ = self
            .actor
            .stop_and_wait(Some("shutdown".into()), Some(Duration::from_secs(5)))
            .await;
    }
}

#[async_trait]
impl FsIntentHandler for FsIntentMonitor {
    fn name(&self) -> &str {
        "read-before-edit"
    }

    async fn check(&self, intent: &FsIntent) -> IntentVerdict {
        let path = &intent.path;
        let agent = &intent.agent;
        match FsIntentMonitor::check(self, agent, path, intent.current).await {
            Ok(Ok(())) => IntentVerdict::Allow,
            Ok(Err(Refusal::NeverRead)) => IntentVerdict::Deny(format!(
                "`{path}` has not been read by agent `{agent}`; read it with read_file before changing it"
            )),
            Ok(Err(Refusal::ChangedSinceRead)) => IntentVerdict::Deny(format!(
                "`{path}` has changed since agent `{agent}` last read it; read it again before changing it"
            )),
            Err(e) => IntentVerdict::Deny(format!("{e}; denied to be safe")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> MonitorState {
        MonitorState {
            records: HashMap::new(),
            _live: LiveActor::new(),
        }
    }

    #[test]
    fn the_rule_on_its_own() {
        let mut s = state();
        let (a, b) = (ContentHash::of(b"a"), ContentHash::of(b"b"));
        assert_eq!(
            s.check("main", "f", None),
            Ok(()),
            "a new file needs no read"
        );
        assert_eq!(s.check("main", "f", Some(a)), Err(Refusal::NeverRead));
        s.records
            .entry("main".into())
            .or_default()
            .insert("f".into(), a);
        assert_eq!(s.check("main", "f", Some(a)), Ok(()));
        assert_eq!(
            s.check("main", "f", Some(b)),
            Err(Refusal::ChangedSinceRead)
        );
        assert_eq!(
            s.check("helper", "f", Some(a)),
            Err(Refusal::NeverRead),
            "records are per agent"
        );
    }
}
