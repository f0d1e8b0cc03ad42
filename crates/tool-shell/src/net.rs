//! The network by policy (`net(…)` rules): what a call needs around its sandbox.
//!
//! - **No route but one.** The command gets a network namespace of its own whose only
//!   interface is loopback. The keeper listens on `127.0.0.1:3128` in it and hands the
//!   listener to dsh (`process/child_net.rs`); dsh's proxy (`dsh-net`) accepts there, outside
//!   the sandbox, and judges every connection. Nothing inside relays, so there is nothing to
//!   walk around: a direct connect to any other address has no route, a relay the command
//!   starts can only reach the same port, and abstract Unix sockets are per namespace.
//! - **No DNS, no UDP, no ICMP.** A seccomp filter refuses every socket but `AF_UNIX` and TCP
//!   (`AF_INET`/`AF_INET6` streams), and `io_uring` (which opens sockets past the filter);
//!   names are resolved by the proxy (`socks5h`, CONNECT, absolute URIs).
//! - **The variables.** `HTTP_PROXY`, `HTTPS_PROXY` (and lowercase) name the proxy as an HTTP
//!   proxy, `ALL_PROXY` as SOCKS5 with remote names; `NO_PROXY` is removed.
//!   `GIT_SSH_COMMAND` is ssh with a `ProxyCommand` that tunnels through the proxy
//!   (`DSH_SSH_PROXY`, a bash script). Unsetting them gains nothing: without the proxy there
//!   is no way out.
//! - **The record.** Every attempt is in the result's `meta.egress`; `meta.egressRefused`
//!   names the refused hosts, and a note tells the model which were refused.

use crate::config::{SandboxConfig, SandboxMode};
use crate::process::Launch;
use crate::process::plan::NetSetup;
use dsh_net::{CallProxy, CallTag, EgressReport, NetProxy, SANDBOX_PROXY_PORT};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;
use std::time::Duration;

/// Whether calls of this sandbox get the network by policy.
pub(crate) fn proxied(config: &SandboxConfig) -> bool {
    config.proxy.is_some() && !config.network && config.mode != SandboxMode::Full
}

/// The proxy command git's ssh runs (`DSH_SSH_PROXY`, run as `bash -c "$DSH_SSH_PROXY" NAME
/// HOST PORT`): a `CONNECT HOST:PORT` to the proxy over bash's `/dev/tcp`, its answer read
/// byte by byte (bash's `read` never reads past a line on a socket), then the bytes both ways
/// with `cat`. A refusal ends it with the proxy's one-line reason on stderr, which ssh shows.
/// Nothing but bash and cat, which every sandbox has; the proxy judges the connection like
/// any other (it is a `CONNECT` in `meta.egress`).
const SSH_PROXY_SCRIPT: &str = r#"case $1 in *:*) target="[$1]:$2" ;; *) target="$1:$2" ;; esac
exec 4<&0 3<>/dev/tcp/127.0.0.1/{PROXY_PORT} || { echo "dsh: the network proxy is not reachable" >&2; exit 1; }
printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$target" "$target" >&3
IFS= read -r status <&3
status=${status%$'\r'}
why=
while IFS= read -r line <&3; do
  line=${line%$'\r'}
  [ -z "$line" ] && break
  case $line in [Xx]-[Dd]sh-[Rr]efused:*) why=${line#*: } ;; esac
done
case $status in
  "HTTP/1."?" 200"*) ;;
  *) echo "dsh: the network proxy refused $target: ${why:-$status}" >&2; exit 1 ;;
esac
# (A background command reads /dev/null unless told otherwise.)
cat <&4 >&3 4<&- &
exec cat <&3 4<&-
"#;

/// `GIT_SSH_COMMAND`: ssh with its `ProxyCommand` through the proxy (the script in
/// `DSH_SSH_PROXY`, so no quoting nests; ssh expands `%h` and `%p` only).
const GIT_SSH_COMMAND: &str =
    r#"ssh -o 'ProxyCommand=bash -c "$DSH_SSH_PROXY" dsh-ssh-proxy %h %p'"#;

/// The variables the command gets, and those removed.
fn variables() -> Vec<(&'static str, String)> {
    let http = format!("http://127.0.0.1:{SANDBOX_PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{SANDBOX_PROXY_PORT}");
    vec![
        ("HTTP_PROXY", http.clone()),
        ("http_proxy", http.clone()),
        ("HTTPS_PROXY", http.clone()),
        ("https_proxy", http),
        ("ALL_PROXY", socks.clone()),
        ("all_proxy", socks),
        (
            "DSH_SSH_PROXY",
            SSH_PROXY_SCRIPT.replace("{PROXY_PORT}", &SANDBOX_PROXY_PORT.to_string()),
        ),
        ("GIT_SSH_COMMAND", GIT_SSH_COMMAND.to_string()),
    ]
}

const REMOVED: &[&str] = &["NO_PROXY", "no_proxy"];

/// One call's end of the network by policy.
pub(crate) struct CallNet {
    proxy: NetProxy,
    ours: UnixStream,
    theirs: Option<OwnedFd>,
}

impl CallNet {
    /// The call's channel, when the sandbox proxies the network.
    pub(crate) fn new(config: &SandboxConfig) -> Result<Option<CallNet>, String> {
        let Some(proxy) = config.proxy.clone().filter(|_| proxied(config)) else {
            return Ok(None);
        };
        let (ours, theirs) = UnixStream::pair()
            .map_err(|e| format!("the network proxy's channel could not be made: {e}"))?;
        ours.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| format!("the network proxy's channel: {e}"))?;
        Ok(Some(CallNet {
            proxy,
            ours,
            theirs: Some(OwnedFd::from(theirs)),
        }))
    }

    /// Gives the keeper its end of the channel and the command its variables.
    pub(crate) fn apply(&self, launch: &mut Launch) {
        if let Some(theirs) = &self.theirs {
            launch.plan.net = Some(NetSetup {
                channel: theirs.as_raw_fd(),
                port: SANDBOX_PROXY_PORT,
            });
        }
        let vars = variables();
        launch.plan.envp.retain(|pair| {
            let bytes = pair.as_bytes();
            let name = bytes.split(|b| *b == b'=').next().unwrap_or(bytes);
            !vars.iter().any(|(n, _)| n.as_bytes() == name)
                && !REMOVED.iter().any(|n| n.as_bytes() == name)
        });
        for (name, value) in vars {
            if let Ok(pair) = CString::new(format!("{name}={value}")) {
                launch.plan.envp.push(pair);
            }
        }
    }

    /// After the fork: dsh's copy of the keeper's end closes (so a keeper that fails closes
    /// the channel), the listener arrives, and the proxy serves the call `call_id` of
    /// `agent` (whose approver it asks about hosts under `ask`). `Err` when the keeper closed
    /// the channel without a listener: its report says why.
    pub(crate) async fn serve(mut self, agent: &str, call_id: &str) -> Result<CallProxy, String> {
        drop(self.theirs.take());
        let ours = self.ours;
        let received = tokio::task::spawn_blocking(move || {
            crate::process::child_net::receive_fd(ours.as_raw_fd())
        })
        .await
        .map_err(|e| format!("receiving the proxy's listener: {e}"))?;
        let fd = match received {
            Ok(Some(fd)) => fd,
            Ok(None) => return Err("the sandbox's network setup failed".into()),
            Err(e) => return Err(format!("receiving the proxy's listener: {e}")),
        };
        let listener = std::net::TcpListener::from(fd);
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("the proxy's listener: {e}"))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("the proxy's listener: {e}"))?;
        let call = CallTag {
            agent: agent.to_string(),
            call_id: call_id.to_string(),
        };
        Ok(self.proxy.serve_call(listener, call))
    }
}

/// The seccomp filter of a proxied command: no socket but `AF_UNIX` and TCP, no `io_uring`,
/// no `ptrace` or `process_vm_*`.
pub(crate) fn filter() -> Result<BpfProgram, String> {
    static FILTER: OnceLock<Result<BpfProgram, String>> = OnceLock::new();
    FILTER.get_or_init(build_filter).clone()
}

fn build_filter() -> Result<BpfProgram, String> {
    let e = |e: seccompiler::BackendError| e.to_string();
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(e)
    };
    let mut socket_rules = vec![
        SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        ])
        .map_err(e)?,
    ];
    // AF_INET and AF_INET6: every type but SOCK_STREAM (the low four bits; the rest are
    // SOCK_NONBLOCK and SOCK_CLOEXEC).
    for family in [libc::AF_INET, libc::AF_INET6] {
        for kind in 0..16u64 {
            if kind == libc::SOCK_STREAM as u64 {
                continue;
            }
            socket_rules.push(
                SeccompRule::new(vec![
                    cond(0, SeccompCmpOp::Eq, family as u64)?,
                    cond(1, SeccompCmpOp::MaskedEq(0xf), kind)?,
                ])
                .map_err(e)?,
            );
        }
    }
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket_rules);
    for call in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
    ] {
        rules.insert(call, vec![]);
    }
    let arch = if cfg!(target_arch = "x86_64") {
        seccompiler::TargetArch::x86_64
    } else if cfg!(target_arch = "aarch64") {
        seccompiler::TargetArch::aarch64
    } else if cfg!(target_arch = "riscv64") {
        seccompiler::TargetArch::riscv64
    } else {
        return Err(format!(
            "seccomp filters are not built for {}",
            std::env::consts::ARCH
        ));
    };
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    filter.try_into().map_err(e)
}

/// The call's records in its result's meta (`egress`, `egressRefused`, `egressOmitted`), and
/// a note naming the refused hosts.
pub(crate) fn record(
    report: &EgressReport,
    meta: &mut Map<String, Value>,
    notes: &mut Vec<String>,
) {
    meta.insert("networkProxy".into(), json!(true));
    meta.insert("egress".into(), report.to_json());
    let refused = report.refused_hosts();
    if !refused.is_empty() {
        notes.push(format!(
            "the network proxy refused connections to {} (meta.egress says why; the policy's \
             net(…) rules decide)",
            refused.join(", ")
        ));
        meta.insert("egressRefused".into(), json!(refused));
    }
    if report.omitted > 0 {
        meta.insert("egressOmitted".into(), json!(report.omitted));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles() {
        assert!(!super::filter().unwrap().is_empty());
    }
}
