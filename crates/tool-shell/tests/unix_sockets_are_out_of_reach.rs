//! Issue 28, break 5: a command reaches no Unix socket outside its sandbox (docker, D-Bus,
//! ssh-agent, PostgreSQL listen on socket files, which neither a read-only mount nor a network
//! namespace keeps a `connect` from), with the network off and with it on; socketpairs keep
//! working, and the result's meta says what held.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;
use std::os::unix::net::UnixListener;

async fn no_socket_is_reached(env: &Env) {
    let outside = tempfile::tempdir().unwrap();
    let path = outside.path().canonicalize().unwrap().join("agent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    // One inside the workspace, too (a dev server's socket, say): the same refusal.
    let inner = env.path("inner.sock");
    let inner_listener = UnixListener::bind(&inner).unwrap();
    inner_listener.set_nonblocking(true).unwrap();
    for target in [&path, &inner] {
        let t = target.display();
        for command in [
            format!(
                "perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die \"$!\"; connect(S, pack_sockaddr_un(\"{t}\")) or die \"$!\"; print S \"hi\"'"
            ),
            format!(
                "perl -MSocket -e 'socket(S, PF_UNIX, SOCK_DGRAM, 0) or die \"$!\"; send(S, \"hi\", 0, pack_sockaddr_un(\"{t}\")) or die \"$!\"'"
            ),
            format!(
                "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{t}\")'"
            ),
        ] {
            let v = env.ok(&command).await;
            assert_ne!(code(&v), 0, "`{command}` reached a Unix socket: {v}");
        }
    }
    assert!(listener.accept().is_err(), "the socket outside was reached");
    assert!(
        inner_listener.accept().is_err(),
        "the socket inside was reached"
    );
    let v = env
        .ok("perl -MSocket -e 'socketpair(A, B, AF_UNIX, SOCK_STREAM, PF_UNSPEC) or die \"$!\"; print \"pair ok\"'")
        .await;
    assert_eq!(stdout(&v), "pair ok", "{v}");
    assert!(
        v["meta"]["unixSockets"]
            .as_str()
            .is_some_and(|s| s.contains("AF_UNIX")),
        "the meta says what held: {v}"
    );
    // Issue 28, break 4: what Landlock holds on this kernel is in the meta, and every right
    // its ABI lacks is named (ABI 2 refer, 3 truncate, 4 tcp, 5 ioctl_dev, 6 scopes).
    let abi = v["meta"]["landlock"]["abi"]
        .as_u64()
        .expect("meta.landlock.abi");
    assert!((1..=6).contains(&abi), "{v}");
    let gaps = v["meta"]["landlock"]["notHeldByLandlock"]
        .as_array()
        .expect("meta.landlock.notHeldByLandlock");
    assert_eq!(gaps.len() as u64, 6 - abi, "one gap per missing ABI: {v}");
}

#[tokio::test]
async fn unix_sockets_are_out_of_reach_with_the_network_off() {
    no_socket_is_reached(&Env::new(SandboxConfig::workspace_write())).await;
}

#[tokio::test]
async fn unix_sockets_are_out_of_reach_with_the_network_on() {
    no_socket_is_reached(&Env::new(
        SandboxConfig::workspace_write().with_network(true),
    ))
    .await;
}
