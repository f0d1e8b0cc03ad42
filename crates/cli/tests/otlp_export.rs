//! Built with the `otlp` feature, `dsh run` exports one `execute_tool {tool}` span per call to
//! the OTLP endpoint the standard variable names, and nothing when no variable is set.
#![cfg(feature = "otlp")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{dsh_with, example, sample_workspace};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An OTLP/HTTP endpoint on the loopback that answers 200 and keeps every request body.
fn collector() -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                kept.lock().unwrap().push(body);
            }
            let mut stream = stream;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (base, bodies)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn run_exports_a_span_per_call_to_the_configured_endpoint() {
    let (base, bodies) = collector();
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let transcript = example("openai");
    let args = [
        "run".as_ref(),
        transcript.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
        "--approve".as_ref(),
        "deny".as_ref(),
    ];
    let ran = dsh_with(&args, |cmd| {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &base)
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    });
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let bodies = bodies.lock().unwrap();
    let all: Vec<u8> = bodies.concat();
    assert!(!bodies.is_empty(), "nothing was posted");
    for needle in [
        "execute_tool read_file",
        "execute_tool grep",
        "gen_ai.tool.call.id",
        "call_03",
        "prepare",
        "dispatch",
        "finalize",
        // call_08 is denied: its span carries the error type.
        "error.type",
        "DENIED",
    ] {
        assert!(contains(&all, needle), "{needle} not exported");
    }
}

#[test]
fn without_an_endpoint_variable_nothing_is_exported_and_run_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let transcript = example("openai");
    let args = [
        "run".as_ref(),
        transcript.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
        "--approve".as_ref(),
        "deny".as_ref(),
    ];
    let ran = dsh_with(&args, |cmd| {
        cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    });
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!ran.stderr.contains("OTLP"), "{}", ran.stderr);
}
