//! Test 4: with the network off, TCP to 127.0.0.1 and ::1, UDP sendto, bash's /dev/tcp, an
//! abstract Unix socket to a listener outside, and io_uring all fail; a socketpair works.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;
use std::os::linux::net::SocketAddrExt;

fn listener(addr: &str) -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind(addr).unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

#[tokio::test]
async fn the_network_is_off_but_local_socketpairs_work() {
    let env = Env::new(SandboxConfig::workspace_write());
    let (v4, p4) = listener("127.0.0.1:0");
    let (v6, p6) = listener("[::1]:0");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let pu = udp.local_addr().unwrap().port();
    let name = format!("dsh-test-{}", std::process::id());
    let abstract_addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let unix = std::os::unix::net::UnixListener::bind_addr(&abstract_addr).unwrap();
    unix.set_nonblocking(true).unwrap();

    let refused_commands = [
        format!("echo hi > /dev/tcp/127.0.0.1/{p4}"),
        format!("echo hi > /dev/tcp/::1/{p6}"),
        format!(
            "perl -MSocket -e 'socket(S, PF_INET, SOCK_STREAM, 0) or die \"$!\"; connect(S, sockaddr_in({p4}, inet_aton(\"127.0.0.1\"))) or die \"$!\"'"
        ),
        format!(
            "perl -MSocket -e 'socket(S, PF_INET, SOCK_DGRAM, 0) or die \"$!\"; send(S, \"x\", 0, sockaddr_in({pu}, inet_aton(\"127.0.0.1\"))) or die \"$!\"'"
        ),
        format!("echo hi > /dev/udp/127.0.0.1/{pu}"),
        format!(
            "perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die \"$!\"; connect(S, pack(\"S a*\", AF_UNIX, \"\\0{name}\")) or die \"$!\"'"
        ),
        // io_uring_setup(8, params): a ring could open sockets past the socket filter.
        "perl -e '$p = \"\\0\" x 120; $r = syscall(425, 8, $p); exit($r < 0 ? 1 : 0)'".to_string(),
        "perl -MSocket -e 'socket(S, AF_NETLINK, SOCK_RAW, 0) or die \"$!\"'".to_string(),
    ];
    for command in &refused_commands {
        let v = env.ok(command).await;
        assert_ne!(code(&v), 0, "`{command}` reached the network: {v}");
    }
    assert!(v4.accept().is_err(), "a connection reached 127.0.0.1");
    assert!(v6.accept().is_err(), "a connection reached ::1");
    assert!(udp.recv_from(&mut [0u8; 16]).is_err(), "a datagram arrived");
    assert!(unix.accept().is_err(), "the abstract socket was reached");

    let v = env
        .ok("perl -MSocket -e 'socketpair(A, B, AF_UNIX, SOCK_STREAM, PF_UNSPEC) or die \"$!\"; print \"pair ok\"'")
        .await;
    assert_eq!(stdout(&v), "pair ok", "{v}");
}

#[tokio::test]
async fn with_the_network_allowed_tcp_works() {
    // The same probe succeeds when the network is allowed: the refusals above are the
    // sandbox's, not the test's.
    let env = Env::new(SandboxConfig::workspace_write().with_network(true));
    let (v4, p4) = listener("127.0.0.1:0");
    let v = env
        .ok(&format!("echo hi > /dev/tcp/127.0.0.1/{p4} && echo sent"))
        .await;
    assert_eq!(stdout(&v), "sent\n", "{v}");
    v4.set_nonblocking(false).unwrap();
    assert!(v4.accept().is_ok());
}
