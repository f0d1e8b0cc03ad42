//! Issue 28, break 10: every call has limits a user can change (memory, processes, CPU time,
//! file size, open files, the size of its temp folder), and a command that hits one ends with
//! a result that says which (or which it may have hit, where the mechanism cannot tell); the
//! meta names the mechanism that held each.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod common;

use common::*;
use dsh_tool_shell::{SandboxConfig, ShellLimits};
use serde_json::Value;

fn bounded() -> Env {
    Env::with(|c| {
        c.sandbox(SandboxConfig::workspace_write())
            .limits(ShellLimits {
                memory_bytes: Some(256 << 20),
                processes: Some(64),
                cpu_seconds: Some(1),
                file_size_bytes: Some(1 << 20),
                open_files: Some(64),
                tmp_bytes: 2 << 20,
                ..ShellLimits::default()
            })
    })
}

/// Whether the command failed (an exit code but 0, or a signal).
fn failed(v: &Value) -> bool {
    v["exitCode"].as_i64().is_none_or(|c| c != 0)
}

/// Whether the result says `key` was hit (surely or possibly).
fn names_limit(v: &Value, key: &str) -> bool {
    let listed = |field: &str| {
        v["meta"][field]
            .as_array()
            .is_some_and(|a| a.iter().any(|k| k == key))
    };
    listed("limitHit") || listed("limitMayHaveHit")
}

#[tokio::test]
async fn each_limit_stops_a_command_and_the_result_says_which() {
    let env = bounded();
    let limits = &env.ok("true").await["meta"]["limits"];
    for key in [
        "memoryBytes",
        "processes",
        "cpuSeconds",
        "fileSizeBytes",
        "openFiles",
        "tmpBytes",
        "workspaceBytes",
    ] {
        assert!(
            limits[key]["heldBy"].is_string(),
            "the meta names what holds {key}: {limits}"
        );
    }
    assert_eq!(limits["processes"]["max"], 64);

    // 200 processes at once, under a bound of 64.
    let v = env
        .ok("perl -e 'for (1..200) { my $p = fork; die \"fork: $!\\n\" unless defined $p; if (!$p) { sleep 5; exit } } print \"all started\\n\"'")
        .await;
    assert!(failed(&v), "200 processes started: {v}");
    assert!(names_limit(&v, "processes"), "{v}");

    // 512 MiB of memory, under a bound of 256 MiB.
    let v = env
        .ok("python3 -c 'b = b\"x\" * (512 * 1024 * 1024); print(len(b))'")
        .await;
    assert!(failed(&v), "512 MiB were allocated: {v}");
    assert!(names_limit(&v, "memoryBytes"), "{v}");

    // A 2 MiB file, under a bound of 1 MiB per file.
    let v = env
        .ok("head -c 2097152 /dev/zero > big; stat -c %s big")
        .await;
    assert!(
        std::fs::metadata(env.path("big")).unwrap().len() <= 1 << 20,
        "the file grew past the bound: {v}"
    );
    assert!(names_limit(&v, "fileSizeBytes"), "{v}");

    // 200 open files, under a bound of 64.
    let v = env
        .ok("python3 -c 'fs = [open(\"/dev/null\") for _ in range(200)]'")
        .await;
    assert!(failed(&v), "{v}");
    assert!(names_limit(&v, "openFiles"), "{v}");

    // 4 MiB into $TMPDIR (files of 1 MiB, the file-size bound), a tmpfs of 2 MiB.
    let v = env
        .ok("for i in 1 2 3 4; do head -c 1048576 /dev/zero > $TMPDIR/f$i || exit 1; done")
        .await;
    assert!(failed(&v), "{v}");
    assert!(names_limit(&v, "tmpBytes"), "{v}");

    // Busy past one CPU second.
    let v = env.ok("exec perl -e '1 while 1'").await;
    assert_eq!(v["signal"], "SIGXCPU", "{v}");
    assert!(names_limit(&v, "cpuSeconds"), "{v}");
    assert!(
        env.tool_text(&v).contains("limit"),
        "the model reads which limit: {}",
        env.tool_text(&v)
    );
}

#[tokio::test]
async fn the_defaults_bound_every_call() {
    let env = Env::new(SandboxConfig::workspace_write());
    let v = env.ok("ulimit -u -n -f -t; echo").await;
    let limits = &v["meta"]["limits"];
    let d = ShellLimits::default();
    assert_eq!(limits["openFiles"]["max"], d.open_files.unwrap());
    assert_eq!(limits["tmpBytes"]["max"], d.tmp_bytes);
    assert!(limits["memoryBytes"]["max"].as_u64().is_some(), "{v}");
    let text = stdout(&v);
    assert!(
        !text.contains("unlimited\nunlimited\nunlimited\nunlimited"),
        "{text}"
    );
    assert!(text.contains("4096"), "open files bounded: {text}");
}
