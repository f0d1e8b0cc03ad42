//! Whatever file is handed to `dsh` as a log, `dsh run --log`, `recover`, `check` and `replay`
//! either treat it as a dsh log or refuse it with a message and a non-zero exit, leaving it
//! byte for byte as it was: a settings file, a policy, notes behind a symbolic link, prose
//! after a real log, `/dev/zero`, a FIFO, a sparse multi-gigabyte file, a log at the largest
//! step. None of them may hang `dsh` or make it grow without bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Run, check, dsh, example, finish, replay, run, sample_workspace, transcript};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const READ: &str = r#"{"role":"assistant","tool_calls":[{"id":"r1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"CHANGELOG.md\"}"}}]}"#;
const READ_AGAIN: &str = r#"{"role":"assistant","tool_calls":[{"id":"r2","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"CHANGELOG.md\"}"}}]}"#;

/// `dsh ARGS`, killed (and the test failed) if it has not finished within a generous bound:
/// a reader stuck on a FIFO or growing on `/dev/zero` fails instead of hanging the suite.
fn dsh_within<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    // Under a cap on its address space: a reader that would hold a whole sparse file (or
    // /dev/zero) fails here instead of taking the machine's memory.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 8000000 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            return finish(child.wait_with_output().unwrap());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "dsh {:?} did not finish within 60 s; stderr: {}",
                args.iter()
                    .map(|a| a.as_ref().to_owned())
                    .collect::<Vec<_>>(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `run`, `recover`, `check` and `replay` on `log`, each bounded in time.
fn all_four(dir: &Path, log: &Path) -> [(&'static str, Run); 4] {
    let ws = sample_workspace(&dir.join(format!("ws-{}", log.file_name().unwrap().display())));
    let t = transcript(dir, "read.jsonl", &[READ]);
    let ran = dsh_within(&[
        "run".as_ref(),
        t.as_os_str(),
        "--workspace".as_ref(),
        ws.as_os_str(),
        "--log".as_ref(),
        log.as_os_str(),
    ]);
    let recovered = dsh_within(&["recover".as_ref(), log.as_os_str()]);
    let checked = dsh_within(&["check".as_ref(), log.as_os_str()]);
    let replayed = dsh_within(&["replay".as_ref(), log.as_os_str()]);
    [
        ("run", ran),
        ("recover", recovered),
        ("check", checked),
        ("replay", replayed),
    ]
}

/// Every command refuses `log` (exit 1 for `check`'s verdict, 3 otherwise) saying `says`, and
/// the file keeps its bytes.
fn refused_untouched(dir: &Path, log: &Path, says: &str) {
    let before = std::fs::read(log).unwrap();
    for (what, out) in all_four(dir, log) {
        assert_ne!(out.code, 0, "dsh {what} {}: {}", log.display(), out.stderr);
        assert!(
            out.stderr.contains(says),
            "dsh {what} {}: expected `{says}` in: {}",
            log.display(),
            out.stderr
        );
        assert!(out.stdout.is_empty(), "dsh {what}: {}", out.stdout);
        assert_eq!(std::fs::read(log).unwrap(), before, "dsh {what} changed it");
    }
}

#[test]
fn a_settings_file_and_a_policy_are_refused_as_not_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        "{\n  \"editor.tabSize\": 4,\n  \"files.autoSave\": \"off\"\n}\n",
    )
    .unwrap();
    refused_untouched(dir.path(), &settings, "this is not a dsh log");
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[rules]\nallow = [\"read_file\"]\ndeny = [\"write_file(/etc/**)\"]\n",
    )
    .unwrap();
    refused_untouched(dir.path(), &policy, "this is not a dsh log");
}

#[test]
fn a_log_symlink_to_notes_is_refused_and_the_notes_kept() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.md");
    std::fs::write(&notes, "# Notes\n\nBuy milk.\n").unwrap();
    let link = dir.path().join("session.jsonl");
    std::os::unix::fs::symlink(&notes, &link).unwrap();
    let ws = sample_workspace(dir.path());
    let t = transcript(dir.path(), "read.jsonl", &[READ]);
    let ran = run(&t, &ws, &link, &[]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(ran.stderr.contains("symbolic link"), "{}", ran.stderr);
    let recovered = dsh(&["recover".as_ref(), link.as_os_str()]);
    assert_eq!(recovered.code, 3, "{}", recovered.stderr);
    assert!(
        recovered.stderr.contains("symbolic link"),
        "{}",
        recovered.stderr
    );
    // The readers follow it, read-only, and find no log there.
    let checked = check(&link);
    assert_eq!(checked.code, 1, "{}", checked.stderr);
    assert!(
        checked.stderr.contains("not a dsh log"),
        "{}",
        checked.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "# Notes\n\nBuy milk.\n"
    );
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
}

#[test]
fn prose_appended_after_a_real_log_is_refused_never_cut() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let first = run(&example("openai"), &ws, &log, &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let whole = std::fs::read(&log).unwrap();
    let lines = whole.iter().filter(|b| **b == b'\n').count();
    for (i, prose) in [
        "\nNotes: the session went fine.\n",
        "Notes: the session went fine.",
    ]
    .iter()
    .enumerate()
    {
        let with = dir.path().join(format!("with-prose-{i}.jsonl"));
        let mut bytes = whole.clone();
        bytes.extend_from_slice(prose.as_bytes());
        std::fs::write(&with, &bytes).unwrap();
        refused_untouched(dir.path(), &with, &format!("line {}", lines + 1));
    }
}

#[test]
fn dev_zero_and_a_fifo_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.jsonl");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for log in [PathBuf::from("/dev/zero"), fifo.clone()] {
        for (what, out) in all_four(dir.path(), &log) {
            assert_eq!(out.code, 3, "dsh {what} {}: {}", log.display(), out.stderr);
            assert!(
                out.stderr.contains("not a regular file"),
                "dsh {what} {}: {}",
                log.display(),
                out.stderr
            );
        }
    }
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

use std::os::unix::fs::FileTypeExt;

#[test]
fn a_sparse_file_of_gigabytes_is_refused_quickly_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let sparse = dir.path().join("sparse.jsonl");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(64 << 30)
        .unwrap();
    let started = Instant::now();
    for (what, out) in all_four(dir.path(), &sparse) {
        assert_ne!(out.code, 0, "dsh {what}: {}", out.stderr);
        assert!(
            out.stderr.contains("longer than the largest event"),
            "dsh {what}: {}",
            out.stderr
        );
        assert_eq!(std::fs::metadata(&sparse).unwrap().len(), 64 << 30);
    }
    // Well before the 18 s one `check` of a 3 GB file took (four commands here, on 64 GB).
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "{:?}",
        started.elapsed()
    );
}

/// A log of one call and its result, in `step`.
fn log_at_step(path: &Path, step: u64) -> Vec<u8> {
    let text = format!(
        "{{\"seq\":1,\"step\":{step},\"type\":\"tool/call\",\"data\":{{\"callId\":\"x\",\"name\":\"read_file\",\"arguments\":{{\"path\":\"CHANGELOG.md\"}},\"agent\":\"main\",\"parent\":null}}}}\n\
         {{\"seq\":2,\"step\":{step},\"type\":\"tool/result\",\"data\":{{\"callId\":\"x\",\"message\":[{{\"type\":\"text\",\"text\":\"ok\"}}]}},\"surfaceOp\":\"append\",\"sourceEventSeqs\":[1]}}\n"
    );
    std::fs::write(path, &text).unwrap();
    text.into_bytes()
}

const MAX_STEP: u64 = i64::MAX as u64;

#[test]
fn a_log_at_the_largest_step_takes_no_more_steps_and_one_past_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let t = transcript(dir.path(), "read.jsonl", &[READ]);

    // One step before the end: the next step is the last one there is.
    let log = dir.path().join("almost.jsonl");
    log_at_step(&log, MAX_STEP - 1);
    let ran = run(&t, &ws, &log, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stderr.contains(&format!("ran step {MAX_STEP}")),
        "{}",
        ran.stderr
    );
    assert_eq!(check(&log).code, 0);

    // At the end: `run` refuses the next step, and the log stays whole and as it was.
    let before = std::fs::read(&log).unwrap();
    let t2 = transcript(dir.path(), "again.jsonl", &[READ_AGAIN]);
    let again = run(&t2, &ws, &log, &[]);
    assert_eq!(again.code, 3, "{}", again.stderr);
    assert!(again.stderr.contains("2^63"), "{}", again.stderr);
    assert_eq!(std::fs::read(&log).unwrap(), before);
    assert_eq!(check(&log).code, 0);

    // Past the end, and at the end of u64 (where a step once wrapped to 0): refused by all.
    for step in [MAX_STEP + 1, u64::MAX - 1] {
        let log = dir.path().join(format!("past-{step}.jsonl"));
        log_at_step(&log, step);
        refused_untouched(dir.path(), &log, "2^63");
    }
    // A first event whose seq is past the largest seq.
    let log = dir.path().join("seq.jsonl");
    let text = format!(
        "{{\"seq\":{},\"step\":1,\"type\":\"user/message\",\"data\":{{\"content\":\"x\",\"origin\":\"c\"}}}}\n",
        i64::MAX as u64 + 1
    );
    std::fs::write(&log, text).unwrap();
    refused_untouched(dir.path(), &log, "line 1");
    let replayed = replay(&log, "openai");
    assert_eq!(replayed.code, 3);
}
