//! A policy `ask`, put to the MCP client as an elicitation.

use async_trait::async_trait;
use dsh_core::{ApprovalAnswer, ApprovalRequest, ApprovalResponder, HookError};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// The approval responder of served sessions: asks the client connected for the agent whose
/// call asked (over stdio one client, `main`; over HTTP one agent per client session), by
/// elicitation, when it declared that capability (accept: approved once; decline, cancel or
/// a failed request: rejected), and rejects when it did not or no client is connected for that
/// agent. Never approves by default, and never asks another client. The pipeline's approval
/// timeout bounds the wait.
#[derive(Debug, Default)]
pub struct ElicitingApprover {
    peers: Mutex<HashMap<String, Peer<RoleServer>>>,
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

    fn peer(&self, agent: &str) -> Option<Peer<RoleServer>> {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .cloned()
    }
}

fn reject(why: impl Into<String>) -> Result<ApprovalAnswer, HookError> {
    Ok(ApprovalAnswer::Reject(Some(why.into())))
}

#[async_trait]
impl ApprovalResponder for ElicitingApprover {
    async fn respond(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        let Some(peer) = self.peer(&request.agent) else {
            return reject("no MCP client is connected to approve it");
        };
        if !peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            return reject("the MCP client cannot be asked (it did not declare elicitation)");
        }
        let mut arguments = request.arguments.to_string();
        if arguments.len() > 2000 {
            let mut cut = 2000;
            while !arguments.is_char_boundary(cut) {
                cut -= 1;
            }
            arguments.truncate(cut);
            arguments.push('…');
        }
        let message = format!(
            "dsh asks before running `{}`: {}\narguments: {arguments}\nAccept to allow this call once.",
            request.tool, request.prompt
        );
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: ElicitationSchema::new(BTreeMap::new()),
        };
        match peer.create_elicitation(params).await {
            Ok(answer) => match answer.action {
                ElicitationAction::Accept => Ok(ApprovalAnswer::Approve),
                ElicitationAction::Decline => reject("declined by the MCP client"),
                ElicitationAction::Cancel => reject("cancelled by the MCP client"),
                _ => reject("the MCP client gave an answer dsh does not know"),
            },
            Err(e) => reject(format!("the MCP client's elicitation failed: {e}")),
        }
    }
}
