//! The seccomp filters of a sandboxed command.
//!
//! Always ([`always`]): no kernel keyring calls (`keyctl`, `add_key`, `request_key`), as
//! Docker's default profile refuses them: the keyrings are not namespaced, so a command could
//! otherwise read the keys of its user's session or leave keys that outlive the call. No new
//! `AF_UNIX` socket (`socket(AF_UNIX, …)`): neither a read-only mount nor a network namespace
//! stops `connect()` to a socket file (docker, systemd, D-Bus, ssh-agent, PostgreSQL), and this
//! kernel's Landlock (before ABI 8's `LANDLOCK_ACCESS_FS_RESOLVE_UNIX`) cannot either;
//! `socketpair` keeps working, and so do pipes. No io_uring (it creates and connects sockets
//! past this filter).
//!
//! With the network off ([`network_off`]): no socket of any other family either (AF_INET,
//! AF_INET6, AF_NETLINK, …), no
//! ptrace or process_vm_* (no reaching into another process). Refused calls fail with EPERM, an
//! ordinary error the command reports.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

fn arch() -> Result<TargetArch, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err(format!(
            "seccomp filters are not built for {}",
            std::env::consts::ARCH
        ))
    }
}

/// Refuses every call `rules` names (under its conditions) with EPERM, the rest allowed.
fn refusing(rules: BTreeMap<i64, Vec<SeccompRule>>) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// The filter every sandboxed command gets, whatever the network setting: no keyring calls,
/// no new Unix socket, no io_uring.
pub(crate) fn always() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ]
    .into_iter()
    .map(|call| (call, vec![]))
    .collect();
    let unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::AF_UNIX as u64,
    )
    .map_err(|e| e.to_string())?;
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![unix]).map_err(|e| e.to_string())?],
    );
    refusing(rules)
}

/// The network-off filter, compiled.
pub(crate) fn network_off() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // Any socket whose family is not AF_UNIX: AF_INET, AF_INET6, AF_NETLINK, AF_VSOCK, raw
    // packet sockets and the rest.
    let not_unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .map_err(|e| e.to_string())?;
    rules.insert(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![not_unix]).map_err(|e| e.to_string())?],
    );
    for call in [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
    ] {
        rules.insert(call, vec![]);
    }
    refusing(rules)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles() {
        assert!(!super::network_off().unwrap().is_empty());
        assert!(!super::always().unwrap().is_empty());
    }
}
