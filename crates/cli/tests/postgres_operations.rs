//! Operating `dsh` on a PostgreSQL store: the store's password never reaches the agent, the
//! log or the screen (taken from a file or the environment, masked in every message); a lease
//! is bounded and an operator can end a dead owner's; `dsh check` names a live writer; and an
//! owner frozen past its lease kills its own tools when it resumes, writing nothing more.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::pg::{export, psql, wait_for_a_call};
use common::procs::{descendants, resume_and_expect_tools_killed, signal};
use common::*;
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PASSWORD: &str = "Sup3rSECRETpw";

/// The test server's URL with a password in it (the server trusts every login, so any
/// password connects).
fn url_with_password() -> String {
    pg::url().replacen("postgres://dsh@", &format!("postgres://dsh:{PASSWORD}@"), 1)
}

fn shell_step(id: &str, command: &str) -> String {
    let args = json!({ "command": command }).to_string();
    json!({"role": "assistant", "tool_calls": [
        {"id": id, "type": "function", "function": {"name": "shell", "arguments": args}}
    ]})
    .to_string()
}

fn spawn_dsh(args: &[&std::ffi::OsStr], setup: impl FnOnce(&mut Command)) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG");
    setup(&mut command);
    command.spawn().unwrap()
}

#[test]
fn the_store_password_never_reaches_the_agent_the_log_or_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let url = pg::url();
    let secret_url = url_with_password();
    // What a command can read of dsh: the sandbox's PID 1 and its own environment.
    let snoop = "{ tr '\\0' ' ' < /proc/1/cmdline; echo; tr '\\0' ' ' < /proc/1/environ; echo; \
                 env; } 2>&1; true";
    let t = transcript(dir.path(), "t.jsonl", &[&shell_step("snoop", snoop)]);

    // The worst case: the password on dsh's own command line.
    let session = pg::session_id("argv-secret");
    let ran = dsh(&[
        "run".as_ref(),
        t.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--approve".as_ref(),
        "allow".as_ref(),
        "--store".as_ref(),
        secret_url.as_ref(),
        "--session".as_ref(),
        session.as_ref(),
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let seen = ran.tool_content("snoop");
    assert!(
        !seen.contains(PASSWORD),
        "the command read the password: {seen}"
    );
    let logged = serde_json::to_string(&export(&url, &session)).unwrap();
    assert!(logged.contains("snoop"), "{logged}");
    assert!(!logged.contains(PASSWORD), "the log holds the password");

    // The URL in the environment: neither the command nor a command hook sees it.
    let hook_env = dir.path().join("hook-env.txt");
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"hooks": {"PreToolUse": [{"matcher": "shell", "hooks": [{"type": "command",
            "command": format!("cat > /dev/null; env > '{}'", hook_env.display())}]}]}})
        .to_string(),
    )
    .unwrap();
    let session = pg::session_id("env-secret");
    let ran = dsh_with(
        &[
            "run".as_ref(),
            t.as_os_str(),
            "--workspace".as_ref(),
            ws.as_os_str(),
            "--approve".as_ref(),
            "allow".as_ref(),
            "--hooks".as_ref(),
            settings.as_os_str(),
            "--session".as_ref(),
            session.as_ref(),
        ],
        |c| {
            c.env("DSH_STORE", &secret_url);
        },
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let seen = ran.tool_content("snoop");
    assert!(
        !seen.contains(PASSWORD) && !seen.contains("DSH_STORE"),
        "the command read the store's variable: {seen}"
    );
    let hook_saw = std::fs::read_to_string(&hook_env).unwrap();
    assert!(hook_saw.contains("PATH="), "{hook_saw}");
    assert!(
        !hook_saw.contains(PASSWORD) && !hook_saw.contains("DSH_STORE"),
        "the hook read the store's variable: {hook_saw}"
    );
    assert_eq!(export(&url, &session).len(), 2);

    // Every form of password is masked in messages (a server that cannot be reached).
    for unreachable in [
        format!("postgres://dsh:{PASSWORD}@127.0.0.1:1/dsh"),
        format!("postgres://dsh@127.0.0.1:1/dsh?password={PASSWORD}&connect_timeout=2"),
        format!("host=127.0.0.1 port=1 user=dsh password={PASSWORD} dbname=dsh"),
        format!("host=127.0.0.1 port=1 user=dsh password='{PASSWORD} x' dbname=dsh"),
    ] {
        let out = dsh(&["sessions", "--store", &unreachable]);
        assert_eq!(out.code, 3, "{}", out.stderr);
        assert!(
            !out.stderr.contains(PASSWORD) && out.stderr.contains("***"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn check_names_a_live_writer_and_a_dead_ones_hint_hides_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let url = pg::url();
    let url_file = dir.path().join("store-url");
    std::fs::write(&url_file, format!("{}\n", url_with_password())).unwrap();
    let session = pg::session_id("check-live");
    let t = transcript(dir.path(), "t.jsonl", &[&shell_step("long", "sleep 60")]);
    let mut running = spawn_dsh(
        &[
            "run".as_ref(),
            t.as_os_str(),
            "--workspace".as_ref(),
            ws.as_os_str(),
            "--approve".as_ref(),
            "allow".as_ref(),
            "--store-file".as_ref(),
            url_file.as_os_str(),
            "--session".as_ref(),
            session.as_ref(),
            "--lease-ms".as_ref(),
            "1000".as_ref(),
        ],
        |_| {},
    );
    wait_for_a_call(&url, &session);
    let check =
        |setup: &dyn Fn(&mut Command)| dsh_with(&["check", "--session", &session], |c| setup(c));
    let by_file = |c: &mut Command| {
        c.env("DSH_STORE_FILE", &url_file);
    };
    let live = check(&by_file);
    assert_eq!(live.code, 1, "{}", live.stderr);
    assert!(
        live.stderr.contains("in use by ") && live.stderr.contains("lease until 20"),
        "{}",
        live.stderr
    );
    assert!(!live.stderr.contains("recover"), "{}", live.stderr);

    signal(running.id(), "-KILL");
    let _ = running.wait();
    std::thread::sleep(Duration::from_millis(1500));
    // A hostile file is read only so far, and said to hold no URL.
    let zeros = dsh(&["check", "--store-file", "/dev/zero", "--session", &session]);
    assert_eq!(zeros.code, 2, "{}", zeros.stderr);
    let dead = check(&by_file);
    assert_eq!(dead.code, 1, "{}", dead.stderr);
    assert!(
        dead.stderr
            .contains("dsh recover --store postgres://dsh:***@"),
        "{}",
        dead.stderr
    );
    assert!(!dead.stderr.contains(PASSWORD), "{}", dead.stderr);
}

#[test]
fn a_lease_past_ten_minutes_is_refused_at_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let t = transcript(dir.path(), "t.jsonl", &[&shell_step("a", "true")]);
    let url = pg::url();
    let session = pg::session_id("century");
    let out = dsh(&[
        "run".as_ref(),
        t.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--store".as_ref(),
        url.as_ref(),
        "--session".as_ref(),
        session.as_ref(),
        "--lease-ms".as_ref(),
        "9999999999999".as_ref(),
    ]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--lease-ms"), "{}", out.stderr);
    assert!(export(&url, &session).is_empty());
}

fn run_args<'a>(
    t: &'a Path,
    ws: &'a Path,
    url: &'a str,
    session: &'a str,
    lease: &'a str,
) -> Vec<&'a std::ffi::OsStr> {
    vec![
        "run".as_ref(),
        t.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--approve".as_ref(),
        "allow".as_ref(),
        "--store".as_ref(),
        url.as_ref(),
        "--session".as_ref(),
        session.as_ref(),
        "--lease-ms".as_ref(),
        lease.as_ref(),
    ]
}

#[test]
fn sessions_release_ends_a_dead_owners_lease_and_fences_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let url = pg::url();
    let session = pg::session_id("release");
    let first_t = transcript(
        dir.path(),
        "a.jsonl",
        &[&shell_step("a0", "sleep 1"), &shell_step("a1", "sleep 1")],
    );
    let second_t = transcript(dir.path(), "b.jsonl", &[&shell_step("b0", "true")]);
    // A lease of ten minutes: without a release, the next writer would wait it out.
    let first = spawn_dsh(&run_args(&first_t, &ws, &url, &session, "600000"), |_| {});
    wait_for_a_call(&url, &session);
    signal(first.id(), "-STOP");

    let released = dsh(&["sessions", "--store", &url, "--release", &session]);
    assert_eq!(released.code, 0, "{}", released.stderr);
    assert!(released.stderr.contains("released"), "{}", released.stderr);
    let started = Instant::now();
    let second = spawn_dsh(&run_args(&second_t, &ws, &url, &session, "5000"), |_| {})
        .wait_with_output()
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let after_takeover = export(&url, &session);

    signal(first.id(), "-CONT");
    let first = first.wait_with_output().unwrap();
    assert!(
        first.status.code().is_some_and(|c| c != 0),
        "a fenced writer exited {:?}",
        first.status
    );
    assert_eq!(export(&url, &session), after_takeover);
    let checked = dsh(&["check", "--store", &url, "--session", &session]);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    let missing = dsh(&["sessions", "--store", &url, "--release", "no-such-session"]);
    assert_eq!(missing.code, 3, "{}", missing.stderr);
}

#[test]
fn an_owner_frozen_past_its_lease_kills_its_tools_when_it_resumes_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let url = pg::url();
    let session = pg::session_id("frozen-owner");
    // Six seconds of work, then a mark on the shared workspace.
    let work = "for i in $(seq 1 60); do sleep 0.1; done; echo late > a-finished";
    let first_t = transcript(dir.path(), "a.jsonl", &[&shell_step("a0", work)]);
    let second_t = transcript(
        dir.path(),
        "b.jsonl",
        &[&shell_step("b0", "echo b > b-ran")],
    );
    let first = spawn_dsh(&run_args(&first_t, &ws, &url, &session, "2000"), |_| {});
    wait_for_a_call(&url, &session);
    std::thread::sleep(Duration::from_millis(300));

    // The owner and its tool freeze together (a paused VM or container).
    signal(first.id(), "-STOP");
    let mut tree = Vec::new();
    for _ in 0..3 {
        for pid in descendants(first.id()) {
            signal(pid, "-STOP");
            if !tree.contains(&pid) {
                tree.push(pid);
            }
        }
    }
    assert!(
        tree.len() >= 2,
        "no tool processes found under dsh: {tree:?}"
    );
    std::thread::sleep(Duration::from_millis(2500));

    // Another node takes the session over and runs its own call.
    let second = spawn_dsh(&run_args(&second_t, &ws, &url, &session, "2000"), |_| {})
        .wait_with_output()
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let after_takeover = export(&url, &session);
    let closed = after_takeover
        .iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == "a0")
        .expect("the new owner closed the old one's call");
    let said = closed["data"]["error"]["message"].as_str().unwrap();
    assert!(said.contains("may have finished"), "{said}");

    // The old owner resumes: its tools are killed at once, and it stops with an error.
    resume_and_expect_tools_killed(first.id(), &tree);
    let first = first.wait_with_output().unwrap();
    let first_err = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.status.code(), Some(3), "{first_err}");
    assert!(first_err.contains("lease"), "{first_err}");
    // Its work never finished, and nothing of it reached the log.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!ws.join("a-finished").exists());
    assert!(ws.join("b-ran").exists());
    assert_eq!(export(&url, &session), after_takeover);
    let checked = dsh(&["check", "--store", &url, "--session", &session]);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
}

#[test]
fn a_role_with_row_rights_only_runs_replays_checks_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let url = pg::url();
    // The schema is made once, by a role that may create tables.
    let listed = dsh(&["sessions", "--store", &url]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let role = format!("dsh_rows_{nanos}");
    psql(
        &url,
        &format!(
            "CREATE ROLE {role} LOGIN; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        ),
    );
    let limited = url.replacen("postgres://dsh@", &format!("postgres://{role}@"), 1);
    let session = pg::session_id("rows-only");
    let t = transcript(dir.path(), "t.jsonl", &[&shell_step("a", "echo hi")]);
    let ran = dsh(&run_args(&t, &ws, &limited, &session, "5000"));
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let replayed = dsh(&["replay", "--store", &limited, "--session", &session]);
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert!(replayed.stdout.contains("hi"), "{}", replayed.stdout);
    let checked = dsh(&["check", "--store", &limited, "--session", &session]);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    assert_eq!(export(&limited, &session).len(), 2);
    let listed = dsh(&["sessions", "--store", &limited]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
}
