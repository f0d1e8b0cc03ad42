//! Tests 6 and 7: a flood keeps dsh's memory flat and reports what it omitted; `cat` with no
//! input returns at once; a cut output is spilled whole to a file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;
use std::time::{Duration, Instant};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_keeps_memory_flat_and_reports_the_omitted_bytes() {
    let env = Env::new(SandboxConfig::workspace_write());
    // Warm up (allocator arenas, the spawner thread).
    env.ok("yes | head -c 10M").await;
    let before = rss_kib();
    let v = env.ok("yes | head -c 2G").await;
    let growth_mib = rss_kib().saturating_sub(before) / 1024;
    assert_eq!(code(&v), 0);
    assert_eq!(v["stdoutBytes"], 2u64 << 30);
    let omitted = v["stdoutOmitted"].as_u64().unwrap();
    assert!(omitted > 2_000_000_000, "{omitted}");
    assert!(
        stdout(&v).contains(&format!("… {omitted} bytes omitted …")),
        "the marker"
    );
    assert!(growth_mib < 16, "RSS grew {growth_mib} MiB");
    // The spill holds the first 64 MiB.
    let spill = v["spill"]["stdout"]["path"].as_str().unwrap();
    let len = std::fs::metadata(env.path(spill)).unwrap().len();
    assert_eq!(len, 64 << 20);
}

#[tokio::test]
async fn cat_with_no_input_returns_at_once() {
    let env = Env::new(SandboxConfig::workspace_write());
    let start = Instant::now();
    let v = env.ok("cat; read line; echo \"read: $?\"").await;
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(stdout(&v), "read: 1\n");
}

#[tokio::test]
async fn a_cut_output_keeps_its_end_and_spills_whole() {
    let env = Env::new(SandboxConfig::workspace_write());
    let v = env
        .ok("for i in $(seq 1 20000); do echo line $i; done; echo 'error: the end' >&2; exit 1")
        .await;
    assert_eq!(code(&v), 1);
    let out = stdout(&v);
    assert!(out.starts_with("line 1\n"));
    assert!(out.trim_end().ends_with("line 20000"));
    assert!(out.contains("bytes omitted"));
    let text = env.tool_text(&v);
    assert!(text.contains("error: the end"));
    let spill = v["spill"]["stdout"]["path"].as_str().unwrap();
    assert!(spill.starts_with(".dsh/spill/"), "{spill}");
    assert!(text.contains(spill));
    let whole = std::fs::read_to_string(env.path(spill)).unwrap();
    assert_eq!(whole.lines().count(), 20000);
    // The command itself cannot write there.
    let w = env.ok(&format!("echo x >> {spill}")).await;
    assert_ne!(code(&w), 0);
}

#[tokio::test]
async fn only_the_last_spilling_calls_keep_their_files() {
    let env = Env::new(SandboxConfig::workspace_write());
    let mut files = Vec::new();
    for _ in 0..22 {
        let v = env.ok("seq 1 100000").await;
        files.push(env.path(v["spill"]["stdout"]["path"].as_str().unwrap()));
    }
    assert!(!files[0].exists() && !files[1].exists());
    assert!(files[2..].iter().all(|f| f.exists()));
}
