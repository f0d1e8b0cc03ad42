//! `net/proxy`: a local HTTP server's 1 MiB download through dsh's network proxy against the
//! same download direct (`ratio`, goal ≤ 1.2), and a connection's set-up through the proxy
//! (`setup_p50_ms`: connect, `CONNECT host:port`, judged, resolved from a hosts file,
//! connected, `200` back; goal ≤ 1 ms). The server listens on 127.0.0.2.
#![allow(clippy::expect_used, clippy::panic)]

use crate::Bench;
use crate::report::{emit, quantile};
use dsh_core::net_rules::{NetClass, NetRules};
use dsh_net::{HostsFile, NetProxy};
use std::net::SocketAddr;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const BENCHES: &[Bench] = &[Bench {
    name: "net/proxy",
    in_all: true,
    run: proxy,
}];

const BODY: usize = 1024 * 1024;
const DOWNLOADS: usize = 60;
const SETUPS: usize = 400;

async fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let addr = listener.local_addr().expect("address");
    let body = vec![b'x'; BODY];
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            let head = head.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                // A CONNECT tunnel sends nothing after its head: only answer requests.
                if got.starts_with(b"GET") {
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(&body).await;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

async fn download(to: SocketAddr, request: &[u8]) -> usize {
    let mut s = TcpStream::connect(to).await.expect("connect");
    let _ = s.set_nodelay(true);
    s.write_all(request).await.expect("request");
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return total,
            Ok(n) => total += n,
        }
    }
}

fn proxy() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = server().await;
        let rules = NetRules::new(&["net(bench.test)"], &[], &[], NetClass::Deny).expect("rules");
        let hosts = HostsFile::parse("127.0.0.2 bench.test\n").expect("hosts");
        let net = NetProxy::new(rules, Some(hosts));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let proxy_addr = listener.local_addr().expect("address");
        let call = net.serve(listener);
        let port = server.port();
        let direct_req = format!("GET / HTTP/1.1\r\nHost: bench.test:{port}\r\n\r\n");
        let proxy_req =
            format!("GET http://bench.test:{port}/ HTTP/1.1\r\nHost: bench.test:{port}\r\n\r\n");
        // Warm up both paths.
        for _ in 0..5 {
            download(server, direct_req.as_bytes()).await;
            download(proxy_addr, proxy_req.as_bytes()).await;
        }
        let (mut direct, mut proxied) = (Vec::new(), Vec::new());
        for _ in 0..DOWNLOADS {
            let t = Instant::now();
            let n = download(server, direct_req.as_bytes()).await;
            direct.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(n > BODY, "direct download cut short");
            let t = Instant::now();
            let n = download(proxy_addr, proxy_req.as_bytes()).await;
            proxied.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(n > BODY, "proxied download cut short");
        }
        let mut setups = Vec::new();
        let connect = format!("CONNECT bench.test:{port} HTTP/1.1\r\n\r\n");
        for _ in 0..SETUPS {
            let t = Instant::now();
            let mut s = TcpStream::connect(proxy_addr).await.expect("connect");
            let _ = s.set_nodelay(true);
            s.write_all(connect.as_bytes())
                .await
                .expect("connect request");
            let mut head = [0u8; 39];
            s.read_exact(&mut head).await.expect("200");
            setups.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(head.starts_with(b"HTTP/1.1 200"));
        }
        let d = quantile(&mut direct, 0.5);
        let p = quantile(&mut proxied, 0.5);
        emit("net/proxy", "direct_1mib_p50_ms", d, "ms");
        emit("net/proxy", "proxied_1mib_p50_ms", p, "ms");
        emit("net/proxy", "ratio", p / d, "x");
        emit(
            "net/proxy",
            "setup_p50_ms",
            quantile(&mut setups, 0.5),
            "ms",
        );
        let report = call.finish().await;
        emit(
            "net/proxy",
            "records",
            (report.records.len() as u64 + report.omitted) as f64,
            "count",
        );
    });
}
