//! `net(…)` rules on the command line: the proxy the shell's sandbox sends every connection
//! through (`--net-hosts` replaces its resolver), and the approver's questions about hosts
//! under `ask`.

use crate::cli::PipelineOptions;
use crate::error::CliError;
use async_trait::async_trait;
use dsh_core::{ApprovalAnswer, ApprovalRequest, ApprovalResponder};
use dsh_guards::PermissionRules;
use dsh_net::{CallTag, HostsFile, NetAnswer, NetAsker, NetProxy};
use dsh_tool_shell::SandboxConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

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

/// The sandbox with its proxy asking `approval` about hosts under `ask`, each question
/// bounded by `timeout` (the pipeline's approval timeout), about the call whose command
/// connects. Where the responder cannot answer in the middle of that call
/// ([`ApprovalResponder::asks_mid_call`]: `dsh serve`'s, for a client of the stateless
/// 2026-07-28 era or one without elicitation) it is not asked: such a host is refused with a
/// reason naming the host and the rule to add.
pub(crate) fn asking(
    mut sandbox: SandboxConfig,
    approval: &Arc<dyn ApprovalResponder>,
    timeout: Duration,
) -> SandboxConfig {
    if let Some(proxy) = sandbox.proxy.take() {
        let asker: Arc<dyn NetAsker> = Arc::new(Asker(approval.clone()));
        sandbox.proxy = Some(proxy.with_asker(Some(asker), timeout));
    }
    sandbox
}

/// A host under `ask`, put to the approval responder as a request of the pseudo-tool `net`,
/// with the agent and id of the call whose command connects.
struct Asker(Arc<dyn ApprovalResponder>);

#[async_trait]
impl NetAsker for Asker {
    async fn ask(&self, call: &CallTag, host: &str, port: u16, rule: &str) -> NetAnswer {
        if !self.0.asks_mid_call(&call.agent, &call.call_id) {
            return NetAnswer::CannotAsk;
        }
        let request = ApprovalRequest {
            call_id: call.call_id.clone(),
            tool: "net".into(),
            agent: call.agent.clone(),
            arguments: json!({"host": host, "port": port}),
            prompt: format!(
                "a shell command wants to connect to {host}:{port} (rule `{rule}`); allow {host} for the rest of this session?"
            ),
        };
        match self.0.respond(&request).await {
            Ok(ApprovalAnswer::Approve) => NetAnswer::Allow,
            _ => NetAnswer::Decline,
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use dsh_core::HookError;
    use dsh_core::net_rules::{NetClass, NetRules};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A responder that never answers, and says whether it can be asked mid-call.
    struct Silent {
        mid_call: bool,
        asked: AtomicUsize,
    }

    #[async_trait]
    impl ApprovalResponder for Silent {
        async fn respond(&self, _request: &ApprovalRequest) -> Result<ApprovalAnswer, HookError> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            std::future::pending().await
        }

        fn asks_mid_call(&self, _agent: &str, _call_id: &str) -> bool {
            self.mid_call
        }
    }

    /// `GET http://ask.test/` through the proxy of `sandbox` (`ask = ["net(ask.test)"]`): the
    /// refusal's reason, and how long it took.
    async fn ask_through(sandbox: &SandboxConfig) -> (String, std::time::Duration) {
        let proxy = sandbox.proxy.clone().expect("the sandbox has its proxy");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let call = proxy.serve(listener);
        let started = std::time::Instant::now();
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET http://ask.test/ HTTP/1.1\r\nHost: ask.test\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        let took = started.elapsed();
        let report = call.finish().await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let reason = report.records[0].reason.clone().unwrap_or_default();
        assert!(answer.contains(&reason), "{answer} / {reason}");
        (reason, took)
    }

    fn sandbox() -> SandboxConfig {
        let rules = NetRules::new::<&str>(&[], &["net(ask.test)"], &[], NetClass::Deny).unwrap();
        let hosts = dsh_net::HostsFile::parse("127.0.0.2 ask.test\n").unwrap();
        let mut sandbox = SandboxConfig::workspace_write();
        sandbox.proxy = Some(NetProxy::new(rules, Some(hosts)));
        sandbox
    }

    #[tokio::test]
    async fn a_responder_that_cannot_be_asked_mid_call_is_not_asked() {
        let silent = Arc::new(Silent {
            mid_call: false,
            asked: AtomicUsize::new(0),
        });
        let approval: Arc<dyn ApprovalResponder> = silent.clone();
        let sandbox = asking(sandbox(), &approval, Duration::from_secs(300));
        let (reason, took) = ask_through(&sandbox).await;
        assert!(
            reason.contains("ask.test") && reason.contains("cannot be asked"),
            "{reason}"
        );
        assert!(
            reason.contains("add `net(ask.test)` to `allow`"),
            "{reason}"
        );
        assert_eq!(silent.asked.load(Ordering::SeqCst), 0);
        assert!(
            took < Duration::from_secs(30),
            "refused at once, not waited: {took:?}"
        );
    }

    #[tokio::test]
    async fn an_unanswered_question_ends_at_the_approval_timeout_given() {
        let silent = Arc::new(Silent {
            mid_call: true,
            asked: AtomicUsize::new(0),
        });
        let approval: Arc<dyn ApprovalResponder> = silent.clone();
        let sandbox = asking(sandbox(), &approval, Duration::from_millis(300));
        let (reason, took) = ask_through(&sandbox).await;
        assert!(reason.contains("approval timeout"), "{reason}");
        assert_eq!(silent.asked.load(Ordering::SeqCst), 1);
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(30), "{took:?}");
    }
}
