//! `net(…)` rules in a policy file: split from the tool rules when the file loads, so a tool
//! glob (`*`, `mcp__*`) never matches a network destination and the policy's `default` never
//! reaches one. Parsing and matching live in [`dsh_core::net_rules`].

use crate::RuleClass;
use crate::error::GuardsError;
use crate::shell_policy::ShellPolicy;
use dsh_core::net_rules::{NetClass, NetRule, NetRules};

/// Splits a rule list into tool rules and network rules.
pub(crate) fn split(list: Vec<String>) -> (Vec<String>, Vec<String>) {
    list.into_iter().partition(|r| !NetRule::is_net_rule(r))
}

/// The class a policy's `RuleClass` is for the network.
pub(crate) fn class(class: RuleClass) -> NetClass {
    match class {
        RuleClass::Allow => NetClass::Allow,
        RuleClass::Ask => NetClass::Ask,
        RuleClass::Deny => NetClass::Deny,
    }
}

/// The network rules, or `None` when there are none.
pub(crate) fn rules(
    allow: &[String],
    ask: &[String],
    deny: &[String],
    shell: &ShellPolicy,
) -> Result<Option<NetRules>, GuardsError> {
    if allow.is_empty() && ask.is_empty() && deny.is_empty() {
        return Ok(None);
    }
    let default = shell.net_default.map_or(NetClass::Deny, class);
    NetRules::new(allow, ask, deny, default)
        .map(Some)
        .map_err(|e| GuardsError::InvalidRule {
            rule: e.rule,
            reason: e.reason,
        })
}

#[cfg(test)]
mod tests {
    use crate::PermissionRules;
    use dsh_core::net_rules::NetClass;

    #[test]
    fn net_rules_have_their_own_default_and_tool_globs_never_match_them() {
        let rules = PermissionRules::from_toml(
            r#"
            default = "allow"
            allow = ["*", "net(example.com)"]
            "#,
        )
        .unwrap();
        let net = rules.net_rules().unwrap();
        assert_eq!(net.judge("example.com", 443).class, NetClass::Allow);
        // `default = "allow"` and `allow = ["*"]` do not reach the network.
        assert_eq!(net.judge("other.org", 443).class, NetClass::Deny);
    }

    #[test]
    fn the_default_is_settable_in_the_shell_table() {
        let rules = PermissionRules::from_toml(
            "deny = [\"net(evil.org)\"]\n[shell]\nnet_default = \"ask\"\n",
        )
        .unwrap();
        let net = rules.net_rules().unwrap();
        assert_eq!(net.judge("other.org", 443).class, NetClass::Ask);
        assert_eq!(net.judge("evil.org", 443).class, NetClass::Deny);
    }

    #[test]
    fn no_net_rule_no_proxy_and_bad_ones_are_refused() {
        assert!(
            PermissionRules::from_toml("allow = [\"shell\"]")
                .unwrap()
                .net_rules()
                .is_none()
        );
        let err = PermissionRules::from_toml("allow = [\"net(a b)\"]").unwrap_err();
        assert!(err.to_string().contains("net(a b)"), "{err}");
        assert!(PermissionRules::from_toml("[shell]\nnet_default = \"maybe\"").is_err());
    }
}
