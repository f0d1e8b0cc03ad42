//! A policy `ask`, put to the MCP client as an elicitation.

use async_trait::async_trait;
use dsh_core::{ApprovalAnswer, ApprovalRequest, ApprovalResponder, HookError};
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, GetExtensions, RequestId, ServerRequest,
};
use rmcp::service::{ElicitationMode, OriginatingRequestId, ServiceError};
use rmcp::{Peer, RoleServer};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use tokio::sync::{mpsc, oneshot};

/// An `ask` of a call of the 2026-07-28 era, handed to the request that made the call: it
/// puts the question to its client as an `InputRequiredResult`, and the client's retry sends
/// the answer. Dropping `answer` unanswered is a rejection.
#[derive(Debug)]
pub(crate) struct Question {
    pub tool: String,
    pub prompt: String,
    pub arguments: serde_json::Value,
    pub answer: oneshot::Sender<ApprovalAnswer>,
}

/// Where the `ask` of one call of the 2026-07-28 era goes (no server-to-client request exists
/// in that era).
#[derive(Debug)]
struct Route {
    /// The client declared elicitation in the request's capabilities.
    can_ask: bool,
    questions: mpsc::Sender<Question>,
}

/// Removes a call's route when its request is done with it.
pub(crate) struct RouteGuard<'a> {
    approver: &'a ElicitingApprover,
    key: (String, String),
}

impl Drop for RouteGuard<'_> {
    fn drop(&mut self) {
        self.approver
            .routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// The approval responder of served sessions: asks the client connected for the agent whose
/// call asked (over stdio one client, `main`; over HTTP one agent per client session), by
/// elicitation, when it declared that capability (accept: approved once; decline, cancel or
/// a failed request: rejected), and rejects when it did not or no client is connected for that
/// agent. Never approves by default, and never asks another client. The pipeline's approval
/// timeout bounds the wait.
#[derive(Debug, Default)]
pub struct ElicitingApprover {
    peers: Mutex<HashMap<String, Peer<RoleServer>>>,
    /// The calls of the 2026-07-28 era, by (agent, call id): their `ask` is handed to their
    /// request rather than put to a peer.
    routes: Mutex<HashMap<(String, String), Route>>,
    /// The JSON-RPC id of the request that made each call in flight of the 2025-11-25 era, by
    /// (agent, call id): its `ask` goes on that request's own stream (SEP-2260), which every
    /// client reads, rather than on the optional GET stream.
    origins: Mutex<HashMap<(String, String), RequestId>>,
}

/// Forgets a call's originating request when the request is done with it.
pub(crate) struct OriginGuard<'a> {
    approver: &'a ElicitingApprover,
    key: (String, String),
}

impl Drop for OriginGuard<'_> {
    fn drop(&mut self) {
        self.approver
            .origins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl ElicitingApprover {
    /// A responder with no client yet (every `ask` is rejected until one connects).
    pub fn new() -> ElicitingApprover {
        ElicitingApprover::default()
    }

    /// The client to ask, from now on, about the calls of `agent`.
    pub fn connect(&self, agent: &str, peer: Peer<RoleServer>) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(agent.to_string(), peer);
    }

    /// No client to ask about the calls of `agent` any more.
    pub fn disconnect(&self, agent: &str) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(agent);
    }

    /// The `ask` of call `call_id` of `agent`, if it comes, is sent on the receiver returned
    /// (once) instead of to a peer; rejected at once when `can_ask` is false (the client did
    /// not declare elicitation). Until the guard is dropped.
    pub(crate) fn route(
        &self,
        agent: &str,
        call_id: &str,
        can_ask: bool,
    ) -> (RouteGuard<'_>, mpsc::Receiver<Question>) {
        let (questions, receiver) = mpsc::channel(1);
        let key = (agent.to_string(), call_id.to_string());
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), Route { can_ask, questions });
        (
            RouteGuard {
                approver: self,
                key,
            },
            receiver,
        )
    }

    /// The `ask` of call `call_id` of `agent`, if it comes, goes on the stream of the request
    /// `request` (the `tools/call` that made the call). Until the guard is dropped.
    pub(crate) fn originate(
        &self,
        agent: &str,
        call_id: &str,
        request: RequestId,
    ) -> OriginGuard<'_> {
        let key = (agent.to_string(), call_id.to_string());
        self.origins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), request);
        OriginGuard {
            approver: self,
            key,
        }
    }

    fn origin(&self, agent: &str, call_id: &str) -> Option<RequestId> {
        self.origins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(agent.to_string(), call_id.to_string()))
            .cloned()
    }

    fn take_route(&self, agent: &str, call_id: &str) -> Option<Route> {
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(agent.to_string(), call_id.to_string()))
    }

    fn peer(&self, agent: &str) -> Option<Peer<RoleServer>> {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .cloned()
    }
}

/// The text an `ask` is put to the client with: the tool, the policy's prompt, the arguments
/// (cut at 2000 bytes).
pub(crate) fn ask_message(tool: &str, prompt: &str, arguments: &serde_json::Value) -> String {
    let mut arguments = arguments.to_string();
    if arguments.len() > 2000 {
        let mut cut = 2000;
        while !arguments.is_char_boundary(cut) {
            cut -= 1;
        }
        arguments.truncate(cut);
        arguments.push('…');
    }
    format!(
        "dsh asks before running `{tool}`: {prompt}\narguments: {arguments}\nAccept to allow this call once."
    )
}

fn reject(why: impl Into<String>) -> Result<ApprovalAnswer, HookError> {
    Ok(ApprovalAnswer::Reject(Some(why.into())))
}

#[async_trait]
impl ApprovalResponder for ElicitingApprover {
    async fn respond(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        if let Some(route) = self.take_route(&request.agent, &request.call_id) {
            if !route.can_ask {
                return reject("the MCP client cannot be asked (it did not declare elicitation)");
            }
            let (answer, answered) = oneshot::channel();
            let question = Question {
                tool: request.tool.clone(),
                prompt: request.prompt.clone(),
                arguments: request.arguments.clone(),
                answer,
            };
            if route.questions.send(question).await.is_err() {
                return reject("the MCP client's request ended before it could be asked");
            }
            // Bounded by the pipeline's approval timeout (this future is dropped then).
            return match answered.await {
                Ok(answer) => Ok(answer),
                Err(_) => reject("the MCP client did not answer"),
            };
        }
        let Some(peer) = self.peer(&request.agent) else {
            return reject("no MCP client is connected to approve it");
        };
        if !peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return reject("the MCP client cannot be asked (it did not declare elicitation)");
        }
        let message = ask_message(&request.tool, &request.prompt, &request.arguments);
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: ElicitationSchema::new(BTreeMap::new()),
        };
        let mut elicit = ElicitRequest::new(params);
        if let Some(origin) = self.origin(&request.agent, &request.call_id) {
            elicit.extensions_mut().insert(OriginatingRequestId(origin));
        }
        let answered = match peer
            .send_request(ServerRequest::ElicitRequest(elicit))
            .await
        {
            Ok(ClientResult::ElicitResult(answer)) => Ok(answer),
            Ok(_) => Err(ServiceError::UnexpectedResponse),
            Err(e) => Err(e),
        };
        let answered: Result<ElicitResult, ServiceError> = answered;
        match answered {
            Ok(answer) => match answer.action {
                ElicitationAction::Accept => Ok(ApprovalAnswer::Approve),
                ElicitationAction::Decline => reject("declined by the MCP client"),
                ElicitationAction::Cancel => reject("cancelled by the MCP client"),
                _ => reject("the MCP client gave an answer dsh does not know"),
            },
            Err(e) => reject(format!("the MCP client's elicitation failed: {e}")),
        }
    }

    /// A question from inside the running call `call_id` of `agent` (its command's
    /// connection to a host under `ask`) goes to that agent's client when the call came from a
    /// 2025-11-25 era request still open (the elicitation goes on that request's stream) and
    /// the client declared form elicitation. A client of the stateless 2026-07-28 era can be
    /// asked only in the answer to its own request, which the running call has not given
    /// yet: `false`, and so for a client without elicitation; such hosts are refused with a
    /// reason naming the `net(…)` rule to add.
    fn asks_mid_call(&self, agent: &str, call_id: &str) -> bool {
        self.origin(agent, call_id).is_some()
            && self.peer(agent).is_some_and(|peer| {
                peer.supported_elicitation_modes()
                    .contains(&ElicitationMode::Form)
            })
    }
}
