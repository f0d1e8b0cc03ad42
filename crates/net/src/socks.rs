//! SOCKS5 (RFC 1928): no authentication, `CONNECT` only, names resolved by the proxy
//! (`socks5h`); `BIND` and `UDP ASSOCIATE` are refused.

use crate::egress::{EgressLog, Via};
use crate::proxy::{Judge, plain_record, read_more, refused, tunnel};
use std::net::{Ipv4Addr, Ipv6Addr};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Reply codes.
const NOT_ALLOWED: u8 = 0x02;
const HOST_UNREACHABLE: u8 = 0x04;
const COMMAND_NOT_SUPPORTED: u8 = 0x07;
const ADDRESS_NOT_SUPPORTED: u8 = 0x08;

async fn reply(client: &mut TcpStream, code: u8) {
    let _ = client.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).await;
}

/// Reads until `buf` holds `n` bytes.
async fn fill(client: &mut TcpStream, buf: &mut Vec<u8>, n: usize, judge: &Judge<'_>) -> bool {
    while buf.len() < n {
        match tokio::time::timeout(
            judge.limits().handshake_timeout,
            read_more(client, buf, n.max(judge.limits().max_head)),
        )
        .await
        {
            Ok(Ok(k)) if k > 0 => {}
            _ => return false,
        }
    }
    true
}

pub(crate) async fn handle(
    judge: Judge<'_>,
    log: &EgressLog,
    mut client: TcpStream,
    mut buf: Vec<u8>,
) {
    // Greeting: VER NMETHODS METHODS…
    if !fill(&mut client, &mut buf, 2, &judge).await {
        return;
    }
    let methods = usize::from(buf[1]);
    if !fill(&mut client, &mut buf, 2 + methods, &judge).await {
        return;
    }
    if !buf[2..2 + methods].contains(&0) {
        let _ = client.write_all(&[5, 0xff]).await;
        log.push(
            plain_record(
                "",
                0,
                Via::Socks5,
                "SOCKS5 without the no-authentication method",
            ),
            None,
        );
        return;
    }
    buf.drain(..2 + methods);
    if client.write_all(&[5, 0]).await.is_err() {
        return;
    }
    // Request: VER CMD RSV ATYP DST.ADDR DST.PORT
    if !fill(&mut client, &mut buf, 5, &judge).await {
        return;
    }
    let (cmd, atyp) = (buf[1], buf[3]);
    let (host, at) = match atyp {
        1 => {
            if !fill(&mut client, &mut buf, 10, &judge).await {
                return;
            }
            (Ipv4Addr::new(buf[4], buf[5], buf[6], buf[7]).to_string(), 8)
        }
        3 => {
            let len = usize::from(buf[4]);
            if !fill(&mut client, &mut buf, 7 + len, &judge).await {
                return;
            }
            (
                String::from_utf8_lossy(&buf[5..5 + len]).into_owned(),
                5 + len,
            )
        }
        4 => {
            if !fill(&mut client, &mut buf, 22, &judge).await {
                return;
            }
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&buf[4..20]);
            (format!("[{}]", Ipv6Addr::from(octets)), 20)
        }
        _ => {
            reply(&mut client, ADDRESS_NOT_SUPPORTED).await;
            log.push(
                plain_record(
                    "",
                    0,
                    Via::Socks5,
                    "a SOCKS5 address type that does not exist",
                ),
                None,
            );
            return;
        }
    };
    let port = u16::from_be_bytes([buf[at], buf[at + 1]]);
    let rest = buf[at + 2..].to_vec();
    if cmd != 1 {
        let what = match cmd {
            2 => "BIND",
            3 => "UDP ASSOCIATE",
            _ => "an unknown command",
        };
        reply(&mut client, COMMAND_NOT_SUPPORTED).await;
        log.push(
            plain_record(
                &host,
                port,
                Via::Socks5,
                &format!("SOCKS5 {what} is refused: only CONNECT goes through the proxy"),
            ),
            None,
        );
        return;
    }
    match judge.admit_and_connect(&host, port).await {
        Err((reason, rule, allowed)) => {
            reply(
                &mut client,
                if allowed {
                    HOST_UNREACHABLE
                } else {
                    NOT_ALLOWED
                },
            )
            .await;
            log.push(
                refused(&host, port, Via::Socks5, reason, rule, allowed),
                None,
            );
        }
        Ok((upstream, addr, rule)) => {
            if client
                .write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0])
                .await
                .is_err()
            {
                return;
            }
            tunnel(
                log,
                client,
                upstream,
                rest,
                &host,
                port,
                Via::Socks5,
                addr,
                rule,
                judge.limits(),
            )
            .await;
        }
    }
}
