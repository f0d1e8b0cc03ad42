//! `dsh check` and `dsh recover` stream a log: memory for one line and the current step's
//! calls, not for the whole log. Checking a 32 MB log once took 155 MB; here it runs under an
//! address-space cap smaller than that.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Run, finish};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// `dsh ARGS` under `ulimit -v KIB`.
fn dsh_capped(kib: u64, args: &[&Path]) -> Run {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .stdin(Stdio::null())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    finish(out)
}

#[test]
fn check_and_recover_hold_one_line_not_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("big.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
    let text = "x".repeat(100);
    let mut seq = 0u64;
    let mut step = 0u64;
    let mut written = 0usize;
    while written < 32 << 20 {
        step += 1;
        let call = format!(
            "{{\"seq\":{},\"step\":{step},\"type\":\"tool/call\",\"data\":{{\"callId\":\"c{step}\",\"name\":\"read_file\",\"arguments\":{{\"path\":\"a.txt\"}},\"agent\":\"main\",\"parent\":null}}}}\n",
            seq + 1
        );
        let result = format!(
            "{{\"seq\":{},\"step\":{step},\"type\":\"tool/result\",\"data\":{{\"callId\":\"c{step}\",\"message\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}},\"surfaceOp\":\"append\",\"sourceEventSeqs\":[{}]}}\n",
            seq + 2,
            seq + 1
        );
        seq += 2;
        out.write_all(call.as_bytes()).unwrap();
        out.write_all(result.as_bytes()).unwrap();
        written += call.len() + result.len();
    }
    drop(out);
    // dsh itself takes some 60 MB of address space here; holding the log's events took more
    // than 200 MB.
    let cap = 150_000;
    let checked = dsh_capped(cap, &[Path::new("check"), &log]);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    assert!(
        checked.stdout.contains(&format!("({seq} events,")),
        "{}",
        checked.stdout
    );
    let recovered = dsh_capped(cap, &[Path::new("recover"), &log]);
    assert_eq!(recovered.code, 0, "{}", recovered.stderr);
    assert!(
        recovered.stderr.contains("nothing to recover"),
        "{}",
        recovered.stderr
    );
}
