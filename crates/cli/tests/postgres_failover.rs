//! Two `dsh run` processes on one PostgreSQL session. The second waits for the first's lease;
//! when the first is killed (SIGKILL) or paused (SIGSTOP) mid-step, the second takes the
//! session over once the lease runs out, closes the first's open call as `ABORTED` and
//! continues. A paused first writer that wakes up (SIGCONT) has its next append refused by the
//! epoch and exits non-zero, and the log holds nothing of it after the takeover. Repeated with
//! random timing: no acknowledged event lost, none duplicated, and `dsh check` passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEASE_MS: &str = "600";

fn step_line(id: &str) -> String {
    let args = json!({"command": "sleep 0.15"}).to_string();
    json!({"role": "assistant", "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "shell", "arguments": args}}
    ]})
    .to_string()
}

fn transcript_of(dir: &Path, name: &str, prefix: &str, steps: usize) -> std::path::PathBuf {
    let lines: Vec<String> = (0..steps)
        .map(|i| step_line(&format!("{prefix}{i}")))
        .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    transcript(dir, name, &refs)
}

fn start_run(transcript: &Path, ws: &Path, url: &str, session: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("run")
        .arg(transcript)
        .arg("--workspace")
        .arg(ws)
        .args(["--store", url, "--session", session, "--lease-ms", LEASE_MS])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap()
}

fn export(url: &str, session: &str) -> Vec<Value> {
    let out = dsh(&["export", "--store", url, "--session", session]);
    if out.code != 0 {
        return Vec::new();
    }
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// The call ids whose results a `dsh run` printed: acknowledged, so they must be in the log.
fn printed_results(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Stop,
}

/// Small deterministic randomness, seeded per run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn failover_once(url: &str, dir: &Path, fault: Fault, round: usize, rng: &mut Lcg) {
    let ws = dir.join(format!("ws{round}"));
    std::fs::create_dir_all(&ws).unwrap();
    let session = pg::session_id(&format!("failover{round}"));
    let first_t = transcript_of(dir, &format!("first{round}.jsonl"), "a", 30);
    let second_t = transcript_of(dir, &format!("second{round}.jsonl"), "b", 3);
    let first = start_run(&first_t, &ws, url, &session);
    // Wait until the first writer has done some steps, then a random moment more.
    let started = Instant::now();
    while export(url, &session).len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the first run never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(rng.below(500)));
    match fault {
        Fault::Kill => signal(&first, "-KILL"),
        Fault::Stop => signal(&first, "-STOP"),
    }
    let before = export(url, &session);
    let second = start_run(&second_t, &ws, url, &session)
        .wait_with_output()
        .unwrap();
    let second_err = String::from_utf8_lossy(&second.stderr).to_string();
    assert_eq!(second.status.code(), Some(0), "round {round}: {second_err}");
    let after_takeover = export(url, &session);
    if let Fault::Stop = fault {
        signal(&first, "-CONT");
    }
    let first_out = first.wait_with_output().unwrap();
    let first_err = String::from_utf8_lossy(&first_out.stderr).to_string();
    match fault {
        Fault::Kill => assert_eq!(first_out.status.code(), None, "round {round}"),
        Fault::Stop => assert!(
            first_out.status.code().is_some_and(|c| c != 0),
            "round {round}: a fenced writer exited {:?}: {first_err}",
            first_out.status
        ),
    }

    let events = export(url, &session);
    // The woken writer wrote nothing after the takeover.
    assert_eq!(events, after_takeover, "round {round}: {first_err}");
    // Everything the first writer had committed before the fault is still there, unchanged.
    assert!(events.len() >= before.len() && events[..before.len()] == before[..]);
    let checked = dsh(&["check", "--store", url, "--session", &session]);
    assert_eq!(checked.code, 0, "round {round}: {}", checked.stderr);

    // No call twice, every result the first writer printed is in the log (not ABORTED), and
    // every call of the second writer ran after the first's last event.
    let mut calls = std::collections::HashSet::new();
    let mut last_a = 0;
    let mut first_b = usize::MAX;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], json!(i + 1), "round {round}");
        if e["type"] == "tool/call" {
            let id = e["data"]["callId"].as_str().unwrap().to_string();
            assert!(calls.insert(id.clone()), "round {round}: {id} twice");
            if id.starts_with('a') {
                last_a = i;
            } else {
                first_b = first_b.min(i);
            }
        }
    }
    assert!(last_a < first_b, "round {round}: the writers interleaved");
    let results: std::collections::HashMap<String, &Value> = events
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| (e["data"]["callId"].as_str().unwrap().to_string(), e))
        .collect();
    for id in printed_results(&String::from_utf8_lossy(&first_out.stdout)) {
        let result = results
            .get(&id)
            .unwrap_or_else(|| panic!("round {round}: acknowledged {id} lost"));
        assert!(result["data"]["error"].is_null(), "round {round}: {id}");
    }
    for i in 0..3 {
        assert!(
            results.contains_key(&format!("b{i}")),
            "round {round}: b{i}"
        );
    }
}

#[test]
fn a_second_dsh_takes_over_a_killed_or_paused_one_twenty_times_with_random_timing() {
    let url = pg::url();
    let dir = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = Lcg(seed);
    for round in 0..20 {
        let fault = if round % 2 == 0 {
            Fault::Kill
        } else {
            Fault::Stop
        };
        failover_once(&url, dir.path(), fault, round, &mut rng);
    }
}

#[test]
fn a_second_dsh_on_a_held_session_waits_twice_the_lease_then_names_the_holder() {
    let url = pg::url();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let session = pg::session_id("held");
    let long = transcript_of(dir.path(), "long.jsonl", "a", 60);
    let mut first = start_run(&long, &ws, &url, &session);
    let started = Instant::now();
    while export(&url, &session).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
    }
    let short = transcript_of(dir.path(), "short.jsonl", "b", 1);
    let waited = Instant::now();
    let second = start_run(&short, &ws, &url, &session)
        .wait_with_output()
        .unwrap();
    let elapsed = waited.elapsed();
    signal(&first, "-KILL");
    let _ = first.wait();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(3), "{err}");
    assert!(
        err.contains("in use by ") && err.contains(", lease until 20"),
        "{err}"
    );
    assert!(
        elapsed >= Duration::from_millis(1100),
        "waited only {elapsed:?}"
    );
}

#[test]
fn export_is_byte_for_byte_the_log_file_of_the_same_run_and_sessions_lists_and_prunes() {
    let url = pg::url();
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let session = pg::session_id("export");
    let t = example("openai");
    let file_log = dir.path().join("file.jsonl");
    // One call at a time: parallel calls' results are logged in the order they finish.
    let by_file = run(
        &t,
        &ws,
        &file_log,
        &["--approve", "allow", "--max-parallel", "1"],
    );
    let ws2 = sample_workspace(&dir.path().join("again"));
    let by_store = dsh(&[
        "run".as_ref(),
        t.as_os_str(),
        "--workspace".as_ref(),
        ws2.as_os_str(),
        "--store".as_ref(),
        url.as_ref(),
        "--session".as_ref(),
        session.as_ref(),
        "--approve".as_ref(),
        "allow".as_ref(),
        "--max-parallel".as_ref(),
        "1".as_ref(),
    ]);
    assert_eq!(by_store.code, by_file.code, "{}", by_store.stderr);
    assert_eq!(by_store.stdout, by_file.stdout);
    let exported = dsh(&["export", "--store", &url, "--session", &session]);
    assert_eq!(exported.code, 0, "{}", exported.stderr);
    let file_text = std::fs::read_to_string(&file_log).unwrap();
    // The workspace's path is in some results: the two runs had their own.
    let same = file_text.replace(ws.to_str().unwrap(), "WS");
    // Both carry their times (the store keeps them), which differ between two runs.
    assert!(same.contains(",\"at\":") && same.contains(",\"startedAt\":"));
    assert!(exported.stdout.contains(",\"at\":") && exported.stdout.contains(",\"startedAt\":"));
    assert_eq!(
        common::without_times(&exported.stdout.replace(ws2.to_str().unwrap(), "WS")),
        common::without_times(&same)
    );
    let replayed = dsh(&["replay", "--store", &url, "--session", &session]);
    assert_eq!(replayed.stdout, replay(&file_log, "openai").stdout);

    let listed = dsh(&["sessions", "--store", &url]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let mine: Vec<Value> = listed
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|s| s["session"] == json!(session))
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["events"], json!(file_text.lines().count()));
    assert_eq!(mine[0]["holder"], Value::Null);
    // Nothing this recent is pruned at 1 day.
    let pruned = dsh(&["sessions", "--store", &url, "--prune-older-than", "1"]);
    assert_eq!(pruned.code, 0, "{}", pruned.stderr);
    assert!(!pruned.stderr.contains(&session), "{}", pruned.stderr);
    assert_eq!(
        dsh(&["export", "--store", &url, "--session", &session]).stdout,
        exported.stdout
    );
}
