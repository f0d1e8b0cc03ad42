//! `net(…)` rules on the command line: the proxy the shell's sandbox sends every connection
//! through (`--net-hosts` replaces its resolver), and the approver's questions about hosts
//! under `ask`.

use crate::cli::PipelineOptions;
use crate::error::CliError;
use async_trait::async_trait;
use dsh_core::{ApprovalAnswer, ApprovalRequest, ApprovalResponder};
use dsh_guards::PermissionRules;
use dsh_net::{HostsFile, NetAsker, NetProxy};
use dsh_tool_shell::SandboxConfig;
use serde_json::json;
use std::sync::Arc;

/// The proxy for the policy's `net(…)` rules; `None` without any, or with `--shell-network`
/// (the whole network, no proxy: what that flag has always meant).
pub(crate) fn proxy(
    options: &PipelineOptions,
    rules: Option<&PermissionRules>,
) -> Result<Option<NetProxy>, CliError> {
    let net = rules.and_then(PermissionRules::net_rules);
    let Some(net) = net.filter(|_| !options.shell_network) else {
        if options.net_hosts.is_some() && !options.shell_network {
            return Err(CliError::Usage(
                "--net-hosts needs net(…) rules in the policy: without them commands have no network"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let hosts = match &options.net_hosts {
        Some(file) => Some(HostsFile::read(file).map_err(|e| CliError::Usage(e.to_string()))?),
        None => None,
    };
    Ok(Some(NetProxy::new(net.clone(), hosts)))
}

/// The sandbox with its proxy asking `approval` about hosts under `ask`.
pub(crate) fn asking(
    mut sandbox: SandboxConfig,
    approval: &Arc<dyn ApprovalResponder>,
) -> SandboxConfig {
    if let Some(proxy) = sandbox.proxy.take() {
        sandbox.proxy = Some(proxy.with_asker(Arc::new(Asker(approval.clone()))));
    }
    sandbox
}

/// A host under `ask`, put to the approval responder as a request of the pseudo-tool `net`.
struct Asker(Arc<dyn ApprovalResponder>);

#[async_trait]
impl NetAsker for Asker {
    async fn ask(&self, host: &str, port: u16, rule: &str) -> bool {
        let request = ApprovalRequest {
            call_id: format!("net:{host}"),
            tool: "net".into(),
            agent: String::new(),
            arguments: json!({"host": host, "port": port}),
            prompt: format!(
                "a shell command wants to connect to {host}:{port} (rule `{rule}`); allow {host} for the rest of this session?"
            ),
        };
        matches!(self.0.respond(&request).await, Ok(ApprovalAnswer::Approve))
    }
}

/// Claude Code settings' lists, their `net(…)` rules taken out (as allow, ask, deny).
pub(crate) fn split_settings(
    mut lists: dsh_claude_code::settings::PermissionLists,
) -> (dsh_claude_code::settings::PermissionLists, [Vec<String>; 3]) {
    let take = |list: &mut Vec<String>| {
        let (net, tools): (Vec<String>, Vec<String>) = std::mem::take(list)
            .into_iter()
            .partition(|r| dsh_core::net_rules::NetRule::is_net_rule(r));
        *list = tools;
        net
    };
    let net = [
        take(&mut lists.allow),
        take(&mut lists.ask),
        take(&mut lists.deny),
    ];
    (lists, net)
}

/// The policy's network rules with the settings' added (`None`: there are none at all).
pub(crate) fn merge_rules(
    rules: &PermissionRules,
    net: &[Vec<String>; 3],
) -> Result<Option<dsh_core::net_rules::NetRules>, CliError> {
    let usage = |e: dsh_core::net_rules::NetRuleError| {
        CliError::Usage(format!("Claude Code settings: {e}"))
    };
    if net.iter().all(Vec::is_empty) {
        return Ok(rules.net_rules().cloned());
    }
    let base = match rules.net_rules() {
        Some(existing) => existing.clone(),
        None => {
            let default = match rules.shell().net_default {
                Some(dsh_guards::RuleClass::Allow) => dsh_core::net_rules::NetClass::Allow,
                Some(dsh_guards::RuleClass::Ask) => dsh_core::net_rules::NetClass::Ask,
                _ => dsh_core::net_rules::NetClass::Deny,
            };
            dsh_core::net_rules::NetRules::new::<&str>(&[], &[], &[], default).map_err(usage)?
        }
    };
    base.extended(&net[0], &net[1], &net[2])
        .map(Some)
        .map_err(usage)
}
