//! A fleet: many `dsh serve --http` nodes over one PostgreSQL store, any node serving any
//! named session (see the book's "A fleet of servers" chapter).
//!
//! - The harness's store is PostgreSQL: opening a session takes its lease (the node's
//!   advertised address is the lease's owner), rebuilds it from the store (steps, the reads
//!   read-before-edit needs), and fences every other writer.
//! - A named session with nothing in flight (no request, no call, no `ask` waiting) for
//!   [`FleetConfig::release_after`] is released ([`release_idle_sessions`]): its log is closed
//!   and its lease given back, so its next request may land on any node.
//! - A request for a session whose lease another live node holds waits for it a bounded time
//!   (the lease's `wait`), then is answered with the retryable JSON-RPC error
//!   [`SESSION_BUSY_CODE`], whose `data` names the owner.
//! - The `requestState` of an `ask` is signed with a key the fleet shares
//!   ([`StateSecret`]), so that any node verifies it. The call it answers waits on the node
//!   that asked (which holds the session's lease meanwhile): another node that gets the
//!   answer forwards it there and relays the reply (`fleet_forward`). When that node
//!   cannot be reached (it died), the answer waits for its lease to run out, takes the
//!   session, and is answered with what the log says of the call: the recovery closed it.

use crate::fleet_forward::{self, Forwarded};
use crate::server::{DshServer, failure};
use crate::stateless::StatelessSessions;
use dsh_core::{ErrorCode as DshCode, EventBody};
use dsh_scheduler::SchedulerError;
use dsh_session::SessionError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The JSON-RPC code of a request for a session that another node of the fleet holds: retry
/// it (after a short pause, or at the node its `data.owner` names).
pub const SESSION_BUSY_CODE: i32 = -32002;

/// The shortest secret a fleet's `requestState` key is made from.
pub const MIN_STATE_SECRET: usize = 16;

/// The key every node of a fleet signs `requestState`s with: SHA-256 of a secret the nodes
/// share (a file of the deployment's). Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct StateSecret([u8; 32]);

impl std::fmt::Debug for StateSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateSecret(redacted)")
    }
}

impl StateSecret {
    /// The key made from `secret` (surrounding whitespace ignored); `None` when it is shorter
    /// than [`MIN_STATE_SECRET`] bytes.
    pub fn from_secret(secret: &[u8]) -> Option<StateSecret> {
        let secret = secret.trim_ascii();
        if secret.len() < MIN_STATE_SECRET {
            return None;
        }
        let mut hasher = Sha256::new();
        hasher.update(b"dsh-serve/fleet-state-key/v1");
        hasher.update(secret);
        Some(StateSecret(hasher.finalize().into()))
    }

    pub(crate) fn bytes(&self) -> [u8; 32] {
        self.0
    }
}

/// How a node of a fleet serves (set in [`crate::ServeConfig::fleet`]).
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The key `requestState`s are signed with, shared by the fleet.
    pub state_key: StateSecret,
    /// How long a named session stays on this node with nothing in flight before its lease
    /// is given back.
    pub release_after: Duration,
}

/// The retryable error for a request whose session another node holds, when `error` says
/// so; `None` for every other error.
pub(crate) fn busy(error: &SchedulerError) -> Option<McpError> {
    let SchedulerError::Log(SessionError::Leased {
        session,
        owner,
        until,
    }) = error
    else {
        return None;
    };
    tracing::info!(session = %session, owner = %owner, "the session is held by another node");
    Some(McpError::new(
        ErrorCode(SESSION_BUSY_CODE),
        format!(
            "session {session} is busy on another node ({owner}, its lease runs until {until} \
             UTC unless renewed): retry shortly, or send the request to {owner}"
        ),
        Some(json!({
            "retryable": true,
            "session": session,
            "owner": owner,
            "until": until,
        })),
    ))
}

/// How many times an answer whose call waits on a node that cannot be reached tries the
/// session's lease (each try waits up to the node's lease wait) before it is answered
/// [`SESSION_BUSY_CODE`].
const UNREACHABLE_TRIES: usize = 5;

/// The owner named by a held lease.
fn leased_owner(error: &SchedulerError) -> Option<&str> {
    match error {
        SchedulerError::Log(SessionError::Leased { owner, .. }) => Some(owner),
        _ => None,
    }
}

/// The client's answer to call `call_id` of `server`'s session, which does not wait on this
/// node: forwarded to the node that holds the session (its reply relayed); or, once this node
/// holds the session (nobody else did, or the holder died and its lease ran out), answered
/// with what the log says of the call.
pub(crate) async fn answer_elsewhere(
    server: &DshServer,
    request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    call_id: &str,
) -> Result<CallToolResponse, McpError> {
    let forwarded = fleet_forward::was_forwarded(context);
    let mut last_busy = None;
    for _ in 0..UNREACHABLE_TRIES {
        let error = match server.open(context).await {
            Ok(_) => return ended_here(server, call_id).await,
            Err(error) => error,
        };
        let (Some(owner), Some(busy)) = (leased_owner(&error), busy(&error)) else {
            return Ok(failure(&error).into());
        };
        // A forwarded answer is never forwarded again: two nodes cannot bounce it.
        if forwarded {
            return Err(busy);
        }
        match fleet_forward::forward(owner, &request, context).await {
            Forwarded::Answer(answer) => return answer,
            Forwarded::Unreachable(why) => {
                tracing::warn!(
                    call = call_id,
                    owner,
                    why,
                    "the node holding the session does not answer: waiting for its lease"
                );
                last_busy = Some(busy);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Err(last_busy.unwrap_or_else(|| {
        McpError::internal_error("the session's lease could not be taken", None)
    }))
}

/// The answer to call `call_id`, which does not wait on this node though it holds the
/// session: a call the log closed as aborted (the node it ran on died, and this node's
/// recovery closed it) is answered with that result; any other is refused.
async fn ended_here(server: &DshServer, call_id: &str) -> Result<CallToolResponse, McpError> {
    let events = match server.session() {
        Some(session) => session.log().snapshot().await.unwrap_or_default(),
        None => Vec::new(),
    };
    let closed = events.iter().find_map(|event| match &event.body {
        EventBody::ToolResult { data, .. } if data.call_id == call_id => data.error.clone(),
        _ => None,
    });
    if let Some(error) = closed
        && matches!(
            error.code,
            DshCode::Aborted | DshCode::AbortedBeforeDispatch
        )
    {
        tracing::info!(
            call = call_id,
            "answered with the call's result as the log closed it"
        );
        let text = format!(
            "{}: {} (the answer came after the call was closed: it was not run by this answer)",
            error.code.as_str(),
            error.message
        );
        return Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into());
    }
    Err(McpError::invalid_params(
        format!(
            "call {call_id} does not wait for an answer (it was answered already, or ended long \
             ago)"
        ),
        None,
    ))
}

/// Releases the named sessions of `sessions` that had nothing in flight for `after`, checking
/// a few times per `after`, until the sessions are dropped (or the task is aborted).
pub fn release_idle_sessions(
    sessions: &Arc<StatelessSessions>,
    after: Duration,
) -> tokio::task::JoinHandle<()> {
    let weak: Weak<StatelessSessions> = Arc::downgrade(sessions);
    let every = (after / 4).clamp(Duration::from_millis(5), Duration::from_millis(500));
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            let released = sessions.release_idle(after);
            if released > 0 {
                tracing::debug!(released, "gave back the leases of idle sessions");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_secret_makes_no_key_and_equal_secrets_make_equal_keys() {
        assert!(StateSecret::from_secret(b"short").is_none());
        assert!(StateSecret::from_secret(b"   padded-short \n").is_none());
        let a = StateSecret::from_secret(b"a secret of the whole fleet\n").unwrap();
        let b = StateSecret::from_secret(b"a secret of the whole fleet").unwrap();
        assert_eq!(a.bytes(), b.bytes());
        let c = StateSecret::from_secret(b"another secret of the fleet").unwrap();
        assert_ne!(a.bytes(), c.bytes());
        assert_eq!(format!("{a:?}"), "StateSecret(redacted)");
    }

    #[test]
    fn only_a_held_lease_is_busy() {
        let held = SchedulerError::Log(SessionError::Leased {
            session: "s".into(),
            owner: "10.0.0.2:8080".into(),
            until: "2026-01-01T00:00:00.000Z".into(),
        });
        let error = busy(&held).unwrap();
        assert_eq!(error.code.0, SESSION_BUSY_CODE);
        assert!(error.message.contains("10.0.0.2:8080"));
        let data = error.data.unwrap();
        assert_eq!(data["owner"], "10.0.0.2:8080");
        assert_eq!(data["retryable"], true);
        assert!(busy(&SchedulerError::ShutDown).is_none());
    }
}
