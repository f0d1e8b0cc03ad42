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
    let out = Command::new("bash")
        .arg(script())
        .arg("stop")
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

/// Every event of the store session `session` (`dsh export`), none when it does not exist.
pub fn export(url: &str, session: &str) -> Vec<serde_json::Value> {
    let out = super::dsh(&["export", "--store", url, "--session", session]);
    if out.code != 0 {
        return Vec::new();
    }
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits (up to 60 s) until the store session's log holds a `tool/call`.
pub fn wait_for_a_call(url: &str, session: &str) {
    let started = std::time::Instant::now();
    while !export(url, session)
        .iter()
        .any(|e| e["type"] == "tool/call")
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the session {session} never started a call"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Runs SQL on the test server as its owner, with the server's own `psql`.
pub fn psql(url: &str, sql: &str) {
    let found = Command::new("bash")
        .args([
            "-c",
            "ls /usr/lib/postgresql/*/bin/psql | sort -V | tail -n 1",
        ])
        .output()
        .unwrap();
    let psql = String::from_utf8(found.stdout).unwrap().trim().to_string();
    assert!(!psql.is_empty(), "no psql next to the test server");
    let out = Command::new(psql)
        .args([url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
