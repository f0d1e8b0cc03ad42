//! A PostgreSQL server for the tests: the one `.ci/run` started (`DSH_TEST_POSTGRES_URL`),
//! or a throwaway cluster this test binary starts through `scripts/postgres.sh` and that stops
//! when the binary exits. Never a skip: without a server the tests fail.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The script that starts and stops throwaway clusters.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres.sh")
}

/// Starts a cluster in `dir` (stopped when this process exits) and answers its URL.
pub fn start_cluster(dir: &Path) -> String {
    let out = Command::new("bash")
        .arg(script())
        .arg("start")
        .arg(dir)
        .arg("--watch")
        .arg(std::process::id().to_string())
        .output()
        .expect("running scripts/postgres.sh");
    assert!(
        out.status.success(),
        "scripts/postgres.sh start failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Stops the cluster in `dir`.
pub fn stop_cluster(dir: &Path) {
    run_script("stop", dir);
}

/// Stops the cluster in `dir` as a crash of the server does (no checkpoint, no WAL flush).
pub fn crash_cluster(dir: &Path) {
    run_script("crash", dir);
}

fn run_script(command: &str, dir: &Path) {
    let out = Command::new("bash")
        .arg(script())
        .arg(command)
        .arg(dir)
        .output()
        .expect("running scripts/postgres.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A folder the `postgres` user can enter (the cluster runs as it when the tests run as root).
pub fn cluster_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dsh-pg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The shared server's URL.
pub fn url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("DSH_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => start_cluster(&cluster_dir("tests")),
    })
    .clone()
}

/// A session id no other test (or earlier run against the same server) uses.
pub fn session_id(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}
