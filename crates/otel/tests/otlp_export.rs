//! With the `otlp` feature: spans reach an OTLP/HTTP endpoint (a listener on the loopback
//! that records the request) as protobuf on `/v1/traces`.
#![cfg(feature = "otlp")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_otel::{Telemetry, dsh_targets};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

struct Request {
    head: String,
    body: Vec<u8>,
}

/// Answers the first request with 200 and hands it over.
fn one_request_endpoint() -> (String, mpsc::Receiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let length = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut stream = stream;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .unwrap();
        let _ = tx.send(Request { head, body });
    });
    (url, rx)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn spans_are_posted_as_otlp_protobuf() {
    let (url, received) = one_request_endpoint();
    let telemetry = Telemetry::otlp_to(&url).unwrap();
    let subscriber =
        tracing_subscriber::registry().with(telemetry.layer().with_filter(dsh_targets()));
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!(target: "dsh_scheduler::telemetry", "execute_tool",
            otel.name = "execute_tool lookup", otel.kind = "internal",
            gen_ai.operation.name = "execute_tool", gen_ai.tool.name = "lookup",
            gen_ai.tool.call.id = "call-7", error.type = tracing::field::Empty);
        span.record("error.type", "TOOL_TIMEOUT");
    });
    telemetry.shutdown().unwrap();
    let request = received.recv_timeout(Duration::from_secs(10)).unwrap();
    let head = request.head.to_ascii_lowercase();
    assert!(head.starts_with("post /v1/traces "), "{head}");
    assert!(
        head.contains("content-type: application/x-protobuf"),
        "{head}"
    );
    for needle in [
        "execute_tool lookup",
        "gen_ai.tool.call.id",
        "call-7",
        "TOOL_TIMEOUT",
        "service.name",
    ] {
        assert!(
            contains(&request.body, needle.as_bytes()),
            "{needle} not in the OTLP body"
        );
    }
}
