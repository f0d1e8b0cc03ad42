//! Test 6: `yes | head -c 2G` keeps dsh's RSS growth under 16 MiB and reports the omitted
//! bytes. Alone in its test binary: RSS is the whole process's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::SandboxConfig;

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
