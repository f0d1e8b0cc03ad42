//! # dsh-net
//!
//! The network a sandboxed command gets when the policy has `net(…)` rules: no route out of
//! its own network namespace but one port, which leads here. The proxy speaks HTTP `CONNECT`,
//! plain HTTP with absolute URIs, and SOCKS5 (names resolved here), on the same port (the
//! first byte tells them apart), and judges every connection the same way:
//!
//! 1. the rules ([`dsh_core::net_rules`]) on the name the client asked for (deny beats ask
//!    beats allow; the network's own default is `deny`); an IP literal only matches rules
//!    naming addresses; `ask` goes to the approver once per host and session;
//! 2. the name resolved here (from a `--net-hosts` file when given, which then replaces the
//!    resolver), each address checked: loopback, link-local (169.254.0.0/16, the cloud
//!    metadata address), private, multicast and reserved space only when a rule or the hosts
//!    file names it; the connection goes to the address that was checked;
//! 3. a plain request whose `Host` differs from its target is refused; a tunnel's TLS
//!    ClientHello whose server name differs from its target is cut before a byte of it
//!    reaches the destination; a plain request is sent with `Connection: close`, so a second
//!    request cannot ride the same connection to another host.
//!
//! A refusal tells the client why (a 403 whose body and `X-Dsh-Refused` header hold one line,
//! or the SOCKS5 "not allowed by ruleset" reply), and every attempt is an [`Egress`] record,
//! bounded per call. A [`CallProxy`] ends every connection of its call when it finishes.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod egress;
mod error;
mod hosts;
mod proxy;
mod socks;
mod splice;
mod tls;

pub use egress::{Egress, EgressReport, Via};
pub use error::NetError;
pub use hosts::HostsFile;
pub use proxy::{CallProxy, CallTag, NetAnswer, NetAsker, NetProxy, ProxyLimits};
#[doc(hidden)]
pub use tls::client_hello_for;

/// The port the proxy listens on inside a command's network namespace (the namespace is the
/// command's own, so no other program holds it).
pub const SANDBOX_PROXY_PORT: u16 = 3128;
