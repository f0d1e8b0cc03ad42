//! Network rules: `net(…)` subjects of the policy, judged by the proxy a sandboxed command
//! reaches the network through.
//!
//! ```text
//! net(HOST)            net(example.com): that name, any port
//! net(*.HOST)          net(*.example.com): every name below it (not the name itself)
//! net(HOST:PORT)       net(example.com:443), net(*.example.com:443)
//! net(IP)              net(10.0.0.7), net(::1)
//! net(IP:PORT)         net(10.0.0.7:5432), net([::1]:8080)
//! net(CIDR)            net(10.0.0.0/8), net(fd00::/8)
//! net(*)               every name (not an IP literal, and it names no address)
//! ```
//!
//! Network rules have their own default, `deny`: the policy's `default` never reaches them, so
//! no policy written before them gains the network. Deny beats ask beats allow, whatever the
//! order. A destination given as an IP literal is matched only by rules naming addresses
//! (`net(IP)`, `net(CIDR)`); a destination given as a name only by rules naming names.
//!
//! ```
//! use dsh_core::net_rules::{NetClass, NetRules};
//! let rules = NetRules::new(
//!     &["net(*.crates.io:443)", "net(github.com)"],
//!     &[],
//!     &["net(evil.github.com)"],
//!     NetClass::Deny,
//! ).unwrap();
//! assert_eq!(rules.judge("static.crates.io", 443).class, NetClass::Allow);
//! assert_eq!(rules.judge("static.crates.io", 80).class, NetClass::Deny);
//! assert_eq!(rules.judge("GitHub.com.", 22).class, NetClass::Allow);
//! assert_eq!(rules.judge("example.org", 443).rule, None);
//! ```

use std::fmt;
use std::net::IpAddr;

/// What a network rule (or the network default) decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NetClass {
    /// The connection is made.
    Allow,
    /// The approval responder is asked (once per host and session).
    Ask,
    /// The connection is refused.
    Deny,
}

impl NetClass {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            NetClass::Allow => "allow",
            NetClass::Ask => "ask",
            NetClass::Deny => "deny",
        }
    }
}

/// A `net(…)` rule that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRuleError {
    /// The rule as written.
    pub rule: String,
    /// Why it is refused.
    pub reason: String,
}

impl fmt::Display for NetRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid network rule `{}`: {}", self.rule, self.reason)
    }
}

impl std::error::Error for NetRuleError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// One name, lowercase, without a trailing dot.
    Name(String),
    /// Every name ending in `.SUFFIX` (the suffix stored with its leading dot).
    Below(String),
    /// Every name.
    AnyName,
    /// An address block.
    Block { addr: IpAddr, prefix: u8 },
}

/// One parsed `net(…)` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRule {
    source: String,
    target: Target,
    port: Option<u16>,
}

/// A name as rules compare it: lowercase, without a trailing dot.
pub fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

fn parse_port(text: &str, invalid: &dyn Fn(&str) -> NetRuleError) -> Result<u16, NetRuleError> {
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(invalid("the port must be a number from 1 to 65535")),
        Ok(port) => Ok(port),
    }
}

impl NetRule {
    /// Whether `text` is a network rule (`net(…)`), as opposed to a tool rule.
    pub fn is_net_rule(text: &str) -> bool {
        text.trim().starts_with("net(")
    }

    /// Parses `net(…)`.
    ///
    /// ```
    /// use dsh_core::net_rules::NetRule;
    /// assert!(NetRule::parse("net(10.0.0.0/8)").is_ok());
    /// assert!(NetRule::parse("net([::1]:8080)").is_ok());
    /// assert!(NetRule::parse("net(exa mple.com)").is_err());
    /// assert!(NetRule::parse("net(*example.com)").is_err());
    /// assert!(NetRule::parse("net(10.0.0.0/33)").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<NetRule, NetRuleError> {
        let source = text.trim().to_string();
        let invalid = |reason: &str| NetRuleError {
            rule: source.clone(),
            reason: reason.to_string(),
        };
        let Some(inner) = source
            .strip_prefix("net(")
            .and_then(|rest| rest.strip_suffix(')'))
        else {
            return Err(invalid(
                "a network rule is `net(HOST)`, `net(HOST:PORT)`, `net(IP)`, `net(CIDR)` or `net(*.HOST)`",
            ));
        };
        let inner = inner.trim();
        if inner.is_empty() {
            return Err(invalid("the destination is empty"));
        }
        // `[v6]` or `[v6]:port`.
        if let Some(rest) = inner.strip_prefix('[') {
            let Some(close) = rest.find(']') else {
                return Err(invalid("`[` without `]`"));
            };
            let addr: IpAddr = rest[..close]
                .parse()
                .map_err(|_| invalid("not an IPv6 address between `[` and `]`"))?;
            let after = &rest[close + 1..];
            let port = match after {
                "" => None,
                _ => match after.strip_prefix(':') {
                    Some(p) => Some(parse_port(p, &invalid)?),
                    None => return Err(invalid("after `]` only `:PORT` may follow")),
                },
            };
            return Ok(NetRule {
                target: Target::Block {
                    prefix: prefix_len(addr),
                    addr,
                },
                port,
                source,
            });
        }
        // A CIDR block.
        if let Some((addr, bits)) = inner.split_once('/') {
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| invalid("a block is `ADDRESS/BITS`"))?;
            let prefix: u8 = bits
                .parse()
                .ok()
                .filter(|b| *b <= prefix_len(addr))
                .ok_or_else(|| invalid("the prefix length is too long for the address"))?;
            return Ok(NetRule {
                target: Target::Block {
                    addr: mask(addr, prefix),
                    prefix,
                },
                port: None,
                source,
            });
        }
        // A bare IPv6 address (colons, no port).
        if let Ok(addr) = inner.parse::<IpAddr>() {
            return Ok(NetRule {
                target: Target::Block {
                    prefix: prefix_len(addr),
                    addr,
                },
                port: None,
                source,
            });
        }
        let (host, port) = match inner.rsplit_once(':') {
            Some((host, port)) => (host, Some(parse_port(port, &invalid)?)),
            None => (inner, None),
        };
        if let Ok(addr) = host.parse::<IpAddr>() {
            if addr.is_ipv6() {
                return Err(invalid(
                    "an IPv6 address with a port is written `[ADDRESS]:PORT`",
                ));
            }
            return Ok(NetRule {
                target: Target::Block {
                    prefix: prefix_len(addr),
                    addr,
                },
                port,
                source,
            });
        }
        let target = if host == "*" {
            Target::AnyName
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let suffix = normalize_host(suffix);
            if !is_name(&suffix) {
                return Err(invalid("`*.` must be followed by a host name"));
            }
            Target::Below(format!(".{suffix}"))
        } else {
            let name = normalize_host(host);
            if !is_name(&name) {
                return Err(invalid(
                    "not a host name (letters, digits, `-`, `_` and dots; a wildcard only as a leading `*.`)",
                ));
            }
            Target::Name(name)
        };
        Ok(NetRule {
            target,
            port,
            source,
        })
    }

    /// The rule as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether the rule covers a destination asked for as `host` (a name, or an IP literal),
    /// on `port`.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if !self.port_matches(port) {
            return false;
        }
        match parse_ip_literal(host) {
            Some(ip) => self.contains(ip),
            None => {
                let name = normalize_host(host);
                match &self.target {
                    Target::Name(n) => *n == name,
                    Target::Below(suffix) => name.ends_with(suffix.as_str()),
                    Target::AnyName => true,
                    Target::Block { .. } => false,
                }
            }
        }
    }

    /// Whether the rule names this address (an IP or CIDR rule containing it).
    fn contains(&self, ip: IpAddr) -> bool {
        match self.target {
            Target::Block { addr, prefix } => {
                let ip = canonical_ip(ip);
                addr.is_ipv4() == ip.is_ipv4() && mask(ip, prefix) == addr
            }
            _ => false,
        }
    }
}

/// An IP literal as a client may write it (`10.0.0.1`, `::1`, `[::1]`), mapped IPv4 in IPv6
/// taken as IPv4.
pub fn parse_ip_literal(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<IpAddr>().ok().map(canonical_ip)
}

/// `::ffff:a.b.c.d` is `a.b.c.d`.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn prefix_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match canonical_ip(addr) {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6((bits & m).into())
        }
    }
}

/// Whether an address lies in space a command must not reach unless a rule names it:
/// loopback, link-local (169.254.0.0/16: the cloud metadata address), private, unique-local,
/// multicast, broadcast, unspecified, shared (100.64.0.0/10).
pub fn is_special_address(ip: IpAddr) -> bool {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_private()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_unspecified()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || o[0] >= 240
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// The verdict on one destination: the class, and the rule that gave it (`None`: the network
/// default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetVerdict {
    /// What happens to the connection.
    pub class: NetClass,
    /// The rule as written, or `None` when no rule matched and the default decided.
    pub rule: Option<String>,
}

/// The network rules of a policy and their default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRules {
    allow: Vec<NetRule>,
    ask: Vec<NetRule>,
    deny: Vec<NetRule>,
    default: NetClass,
}

impl NetRules {
    /// Parses the three lists.
    pub fn new<S: AsRef<str>>(
        allow: &[S],
        ask: &[S],
        deny: &[S],
        default: NetClass,
    ) -> Result<NetRules, NetRuleError> {
        let parse = |list: &[S]| -> Result<Vec<NetRule>, NetRuleError> {
            list.iter().map(|r| NetRule::parse(r.as_ref())).collect()
        };
        Ok(NetRules {
            allow: parse(allow)?,
            ask: parse(ask)?,
            deny: parse(deny)?,
            default,
        })
    }

    /// These rules and more (a profile's settings mapped onto `net(…)` rules).
    pub fn extended<S: AsRef<str>>(
        &self,
        allow: &[S],
        ask: &[S],
        deny: &[S],
    ) -> Result<NetRules, NetRuleError> {
        let more = NetRules::new(allow, ask, deny, self.default)?;
        let mut out = self.clone();
        out.allow.extend(more.allow);
        out.ask.extend(more.ask);
        out.deny.extend(more.deny);
        Ok(out)
    }

    /// The default for destinations no rule matches (`deny` unless the policy's `[shell]`
    /// table says otherwise).
    pub fn default_class(&self) -> NetClass {
        self.default
    }

    /// Whether there is any rule at all.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.ask.is_empty() && self.deny.is_empty()
    }

    /// Judges a destination as the client asked for it (a name or an IP literal) and port:
    /// deny beats ask beats allow; no match gets the default.
    pub fn judge(&self, host: &str, port: u16) -> NetVerdict {
        for (class, list) in [
            (NetClass::Deny, &self.deny),
            (NetClass::Ask, &self.ask),
            (NetClass::Allow, &self.allow),
        ] {
            if let Some(rule) = list.iter().find(|r| r.matches(host, port)) {
                return NetVerdict {
                    class,
                    rule: Some(rule.source.clone()),
                };
            }
        }
        NetVerdict {
            class: self.default,
            rule: None,
        }
    }

    /// Whether an `allow` or `ask` rule names this address itself (an IP or CIDR rule), which
    /// is what lets a name resolve to loopback, private or link-local space. A `deny` rule
    /// naming it wins.
    pub fn names_address(&self, ip: IpAddr, port: u16) -> bool {
        let named =
            |list: &Vec<NetRule>| list.iter().any(|r| r.port_matches(port) && r.contains(ip));
        !named(&self.deny) && (named(&self.allow) || named(&self.ask))
    }

    /// Whether a `deny` rule names this address (checked on every resolved address).
    pub fn denies_address(&self, ip: IpAddr, port: u16) -> Option<&str> {
        self.deny
            .iter()
            .find(|r| r.port_matches(port) && r.contains(ip))
            .map(|r| r.source.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> NetRules {
        NetRules::new(allow, ask, deny, NetClass::Deny).unwrap()
    }

    #[test]
    fn names_wildcards_and_ports() {
        let r = rules(&["net(example.com)", "net(*.pkg.dev:443)"], &[], &[]);
        assert_eq!(r.judge("example.com", 80).class, NetClass::Allow);
        assert_eq!(r.judge("EXAMPLE.com.", 443).class, NetClass::Allow);
        assert_eq!(r.judge("a.example.com", 443).class, NetClass::Deny);
        assert_eq!(r.judge("x.y.pkg.dev", 443).class, NetClass::Allow);
        assert_eq!(r.judge("pkg.dev", 443).class, NetClass::Deny);
        assert_eq!(r.judge("evilpkg.dev", 443).class, NetClass::Deny);
        assert_eq!(r.judge("x.pkg.dev", 80).class, NetClass::Deny);
    }

    #[test]
    fn ip_literals_are_matched_only_by_address_rules() {
        let r = rules(&["net(*)", "net(10.1.0.0/16)", "net([::1]:8080)"], &[], &[]);
        assert_eq!(r.judge("10.1.2.3", 80).class, NetClass::Allow);
        assert_eq!(r.judge("10.2.0.1", 80).class, NetClass::Deny);
        assert_eq!(r.judge("[::1]", 8080).class, NetClass::Allow);
        assert_eq!(r.judge("::ffff:10.1.0.9", 1).class, NetClass::Allow);
        assert_eq!(r.judge("1.1.1.1", 443).class, NetClass::Deny);
        assert!(r.names_address("10.1.9.9".parse().unwrap(), 1));
        assert!(!r.names_address("127.0.0.1".parse().unwrap(), 1));
    }

    #[test]
    fn deny_beats_ask_beats_allow() {
        let r = rules(&["net(*.a.com)"], &["net(*.b.a.com)"], &["net(c.b.a.com)"]);
        assert_eq!(r.judge("x.a.com", 1).class, NetClass::Allow);
        assert_eq!(r.judge("x.b.a.com", 1).class, NetClass::Ask);
        let v = r.judge("c.b.a.com", 1);
        assert_eq!(v.class, NetClass::Deny);
        assert_eq!(v.rule.as_deref(), Some("net(c.b.a.com)"));
    }

    #[test]
    fn malformed_rules_are_refused() {
        for bad in [
            "net()",
            "net(a b)",
            "net(a.*.com)",
            "net(x:0)",
            "net(x:70000)",
            "net(1.2.3.4:x)",
            "net([::1)",
            "net(1.2.3.4/40)",
            "net(example.com",
        ] {
            assert!(NetRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn special_space() {
        for s in [
            "127.0.0.2",
            "169.254.169.254",
            "10.0.0.1",
            "192.168.1.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "224.0.0.1",
            "0.0.0.0",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_special_address(s.parse().unwrap()), "{s}");
        }
        for s in ["93.184.216.34", "2606:2800:220:1::1"] {
            assert!(!is_special_address(s.parse().unwrap()), "{s}");
        }
    }
}
