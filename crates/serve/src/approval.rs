//! A policy `ask`, put to the MCP client as an elicitation.

use async_trait::async_trait;
use dsh_core::{ApprovalAnswer, ApprovalRequest, ApprovalResponder, HookError};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The approval responder of a served session: asks the client that is connected, by
/// elicitation, when it declared that capability (accept: approved once; decline, cancel or
/// a failed request: rejected), and rejects when it did not or no client is connected. Never
/// approves by default. The pipeline's approval timeout bounds the wait.
#[derive(Debug, Default)]
pub struct ElicitingApprover {
    peer: Mutex<Option<Peer<RoleServer>>>,
}

impl ElicitingApprover {
    /// A responder with no client yet (every `ask` is rejected until one connects).
    pub fn new() -> ElicitingApprover {
        ElicitingApprover::default()
    }

    /// The client to ask from now on.
    pub fn connect(&self, peer: Peer<RoleServer>) {
        *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = Some(peer);
    }

    /// No client to ask any more.
    pub fn disconnect(&self) {
        *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn peer(&self) -> Option<Peer<RoleServer>> {
        self.peer.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn reject(why: impl Into<String>) -> Result<ApprovalAnswer, HookError> {
    Ok(ApprovalAnswer::Reject(Some(why.into())))
}

#[async_trait]
impl ApprovalResponder for ElicitingApprover {
    async fn respond(&self, request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
        let Some(peer) = self.peer() else {
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
