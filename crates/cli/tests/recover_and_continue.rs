//! A log cut short by a crash is recovered by the next `dsh run`, or by `dsh recover`: the
//! torn tail goes, the call it left open is closed with `ABORTED`, the checker passes, and
//! steps continue after the last one in the log. Before that, `dsh check` says the log needs
//! recovery, not that it breaks an invariant.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, dsh, example, log_events, replay, run, sample_workspace, transcript};
use std::path::Path;

const AGAIN: &str = r#"{"role":"assistant","tool_calls":[{"id":"again_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"CHANGELOG.md\"}"}}]}"#;

#[test]
fn a_log_cut_mid_line_is_recovered_and_continued() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let first = run(&example("openai"), &ws, &log, &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);

    // Cut the last event (a result of step 6, whose three parallel calls finish in any order)
    // in the middle of its line.
    let bytes = std::fs::read(&log).unwrap();
    let last_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    let last: serde_json::Value = serde_json::from_slice(&bytes[last_start..]).unwrap();
    assert_eq!(
        (last["type"].as_str(), last["step"].as_u64()),
        (Some("tool/result"), Some(6))
    );
    let cut_call = last["data"]["callId"].as_str().unwrap().to_string();
    let cut = last_start + (bytes.len() - last_start) / 2;
    std::fs::write(&log, &bytes[..cut]).unwrap();
    assert_eq!(
        check(&log).code,
        1,
        "a torn log is not whole before recovery"
    );

    let t = transcript(dir.path(), "again.jsonl", &[AGAIN]);
    let second = run(&t, &ws, &log, &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(second.stderr.contains("recovered"), "{}", second.stderr);
    let closed = format!("closed 1 call(s) left open with ABORTED ({cut_call})");
    assert!(second.stderr.contains(&closed), "{}", second.stderr);
    assert!(second.stderr.contains("at step 7"), "{}", second.stderr);
    assert!(second.tool_content("again_1").contains("## Unreleased"));

    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);

    // Seqs run on without a gap, and the new step is 7.
    let events = log_events(&log);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let again: Vec<_> = events
        .iter()
        .filter(|e| e["data"]["callId"] == "again_1")
        .collect();
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|e| e["step"] == 7));

    // The replay ends with exactly what the second run printed; before that, it is what the
    // first run printed but for the one call recovery closed.
    let replayed = replay(&log, "openai");
    assert!(replayed.stdout.ends_with(&second.stdout));
    assert!(
        replayed.tool_content(&cut_call).starts_with("ABORTED"),
        "{}",
        replayed.stdout
    );
    let before = &replayed.stdout[..replayed.stdout.len() - second.stdout.len()];
    let first_lines: Vec<&str> = first.stdout.lines().collect();
    let before_lines: Vec<&str> = before.lines().collect();
    assert_eq!(before_lines.len(), first_lines.len());
    let differing: Vec<usize> = (0..first_lines.len())
        .filter(|&i| before_lines[i] != first_lines[i])
        .collect();
    assert_eq!(differing.len(), 1, "{differing:?}");
    let id = format!("\"tool_call_id\":\"{cut_call}\"");
    assert!(before_lines[differing[0]].contains(&id));
}

#[test]
fn a_whole_log_is_continued_at_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(dir.path(), "again.jsonl", &[AGAIN]);
    assert_eq!(run(&t, &ws, &log, &[]).code, 0);
    let second = run(&t, &ws, &log, &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(!second.stderr.contains("recovered"), "{}", second.stderr);
    let steps: Vec<u64> = log_events(&log)
        .iter()
        .map(|e| e["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 1, 2, 2]);
    // The same call id in a later step is its own call.
    assert_eq!(check(&log).code, 0);
    let replayed = replay(&log, "openai");
    assert_eq!(replayed.stdout.lines().count(), 4);
}

/// `dsh recover LOG`.
fn recover(log: &Path) -> common::Run {
    dsh(&["recover".as_ref(), log.as_os_str()])
}

/// Runs the OpenAI example into a fresh log, then cuts its last event (a result of step 6) in
/// the middle of its line. Returns the log, the whole bytes, where the cut line starts (its
/// 1-based number and offset), and the call the cut result answered.
fn crashed_log(dir: &Path) -> (std::path::PathBuf, Vec<u8>, usize, usize, String) {
    let ws = sample_workspace(dir);
    let log = dir.join("session.jsonl");
    let first = run(&example("openai"), &ws, &log, &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let bytes = std::fs::read(&log).unwrap();
    let last_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    let last: serde_json::Value = serde_json::from_slice(&bytes[last_start..]).unwrap();
    assert_eq!(last["type"], "tool/result");
    let cut_call = last["data"]["callId"].as_str().unwrap().to_string();
    let line = bytes[..last_start].iter().filter(|b| **b == b'\n').count() + 1;
    (log, bytes, line, last_start, cut_call)
}

#[test]
fn check_says_a_crashed_log_needs_recovery_and_dsh_recover_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let (log, bytes, line, last_start, cut_call) = crashed_log(dir.path());
    let cut = last_start + (bytes.len() - last_start) / 2;
    std::fs::write(&log, &bytes[..cut]).unwrap();

    let checked = check(&log);
    assert_eq!(checked.code, 1, "still a failure: {}", checked.stderr);
    assert_eq!(checked.stderr.lines().count(), 1, "{}", checked.stderr);
    let expected = format!(
        "check failed: the log needs recovery (what a crash leaves, not a broken invariant): \
         a torn tail at line {line} ({} bytes to the end of the file), and 1 call(s) left open \
         without a result (`{cut_call}`); `dsh recover {}` repairs it",
        cut - last_start,
        log.display()
    );
    assert!(checked.stderr.contains(&expected), "{}", checked.stderr);

    let recovered = recover(&log);
    assert_eq!(recovered.code, 0, "{}", recovered.stderr);
    assert!(recovered.stdout.is_empty());
    assert_eq!(
        recovered.stderr,
        format!(
            "dsh: recovered {}: cut a torn tail of {} bytes at line {line}; closed 1 call(s) \
             left open with ABORTED ({cut_call}) ({line} events now)\n",
            log.display(),
            cut - last_start
        )
    );
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    // The cut result is replaced by recovery's ABORTED one, at the end of the whole part.
    let after = std::fs::read(&log).unwrap();
    assert_eq!(&after[..last_start], &bytes[..last_start]);
    let events = log_events(&log);
    assert_eq!(events.len(), line);
    let closing = &events[line - 1];
    assert_eq!(closing["data"]["callId"], cut_call.as_str());
    assert_eq!(closing["data"]["error"]["code"], "ABORTED");
    assert!(
        replay(&log, "openai")
            .tool_content(&cut_call)
            .starts_with("ABORTED: ")
    );

    // Nothing is left to do, and saying so is still a success.
    let again = recover(&log);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("nothing to recover"),
        "{}",
        again.stderr
    );
    assert_eq!(std::fs::read(&log).unwrap(), after);
}

#[test]
fn a_tail_of_garbage_lines_from_a_power_loss_is_cut_by_recover_and_run() {
    // Under `batch`, the region written since the last fsync can come back as zero blocks and
    // pieces of lines, newline-terminated or not.
    let dir = tempfile::tempdir().unwrap();
    let (log, bytes, line, _, _) = crashed_log(dir.path());
    let mut crashed = bytes.clone();
    crashed.extend_from_slice(&[0u8; 4096]);
    crashed.push(b'\n');
    crashed.extend_from_slice(b"ep\":7,\"type\":\"tool/call\"}\n");
    crashed.extend_from_slice(&[0u8; 512]);
    crashed.push(b'\n');
    std::fs::write(&log, &crashed).unwrap();
    let garbage = crashed.len() - bytes.len();

    let checked = check(&log);
    assert_eq!(checked.code, 1);
    let torn = format!(
        "needs recovery (what a crash leaves, not a broken invariant): a torn tail at line {} \
         ({garbage} bytes to the end of the file); `dsh recover",
        line + 1
    );
    assert!(checked.stderr.contains(&torn), "{}", checked.stderr);

    let recovered = recover(&log);
    assert_eq!(recovered.code, 0, "{}", recovered.stderr);
    assert!(
        recovered.stderr.contains(&format!(
            "cut a torn tail of {garbage} bytes at line {}",
            line + 1
        )),
        "{}",
        recovered.stderr
    );
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "back to the whole log");
    assert_eq!(check(&log).code, 0);

    // `dsh run` recovers the same way before it continues.
    std::fs::write(&log, &crashed).unwrap();
    let ws = dir.path().join("workspace");
    let t = transcript(dir.path(), "again.jsonl", &[AGAIN]);
    let second = run(&t, &ws, &log, &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains(&format!(
            "recovered {}: cut a torn tail of {garbage} bytes at line {}",
            log.display(),
            line + 1
        )),
        "{}",
        second.stderr
    );
    assert_eq!(check(&log).code, 0);
}

#[test]
fn recover_refuses_a_log_corrupt_in_the_middle_and_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let (log, bytes, _, _, _) = crashed_log(dir.path());
    let text = String::from_utf8(bytes).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{garbage in the middle";
    let corrupt = lines.join("\n") + "\n";
    std::fs::write(&log, &corrupt).unwrap();

    let checked = check(&log);
    assert_eq!(checked.code, 1);
    assert!(
        checked
            .stderr
            .contains("check failed: line 3 is not a whole session event"),
        "{}",
        checked.stderr
    );
    assert!(!checked.stderr.contains("recover"), "{}", checked.stderr);
    let recovered = recover(&log);
    assert_eq!(recovered.code, 3, "{}", recovered.stderr);
    assert!(
        recovered.stderr.contains("corrupt at line 3"),
        "{}",
        recovered.stderr
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), corrupt, "untouched");

    let missing = dir.path().join("missing.jsonl");
    let recovered = recover(&missing);
    assert_eq!(recovered.code, 3, "{}", recovered.stderr);
    assert!(
        recovered.stderr.starts_with("dsh: cannot read the log "),
        "{}",
        recovered.stderr
    );
    assert!(!missing.exists(), "recover creates no log");
}

#[test]
fn a_log_whose_whole_events_break_an_invariant_is_refused_everywhere_and_left_as_it_was() {
    // Not what a crash leaves: a result in the middle of the log naming its own seq, then a
    // torn tail. Continuing it would bury the fault under new steps.
    let dir = tempfile::tempdir().unwrap();
    let (log, bytes, _, _, _) = crashed_log(dir.path());
    let mut lines: Vec<serde_json::Value> = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let result = lines
        .iter_mut()
        .find(|e| e["type"] == "tool/result")
        .unwrap();
    let own = result["seq"].as_u64().unwrap();
    result["sourceEventSeqs"] = serde_json::json!([own]);
    let mut broken: String = lines.iter().map(|e| format!("{e}\n")).collect();
    broken.push_str("{\"seq\":99,\"st");
    std::fs::write(&log, &broken).unwrap();
    let ws = dir.path().join("workspace");
    let again = transcript(dir.path(), "again.jsonl", &[AGAIN]);

    let ran = run(&again, &ws, &log, &[]);
    let recovered = recover(&log);
    let replayed = replay(&log, "openai");
    for (what, out) in [
        ("run", &ran),
        ("recover", &recovered),
        ("replay", &replayed),
    ] {
        assert_eq!(out.code, 3, "dsh {what}: {}", out.stderr);
        assert!(
            out.stderr.contains("invariant violated at seq "),
            "dsh {what} names the violation: {}",
            out.stderr
        );
        assert_eq!(out.stdout, "", "dsh {what} printed nothing");
    }
    let checked = check(&log);
    assert_eq!(checked.code, 1, "{}", checked.stderr);
    assert!(
        checked.stderr.contains(&format!(
            "seq {own}: tool/result names seq {own}, which is not a tool/call"
        )),
        "{}",
        checked.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        broken,
        "the log is untouched"
    );
}

#[test]
fn recovery_removes_the_temporary_files_of_writers_that_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let first = run(&example("openai"), &ws, &log, &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    // The crash: the last result never written, a write's temporary file left beside its
    // target (pid 999999999 is past any pid_max, so that writer is gone).
    let bytes = std::fs::read(&log).unwrap();
    let last_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    std::fs::write(&log, &bytes[..last_start]).unwrap();
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    let stale = [
        ws.join(".README.md.dsh-999999999-0.tmp"),
        ws.join("src/deep/.lib.rs.dsh-999999999-17.tmp"),
    ];
    // A live writer's (this test's own pid) and a file merely named alike stay.
    let live = ws.join(format!(".notes.txt.dsh-{}-2.tmp", std::process::id()));
    let alike = ws.join("src/.x.dsh-abc-1.tmp");
    for f in stale.iter().chain([&live, &alike]) {
        std::fs::write(f, "half a write").unwrap();
    }
    let t = transcript(dir.path(), "again.jsonl", &[AGAIN]);
    let second = run(&t, &ws, &log, &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains("removed 2 temporary file(s)"),
        "{}",
        second.stderr
    );
    for f in &stale {
        assert!(!f.exists(), "{} was left", f.display());
    }
    assert!(live.exists() && alike.exists());
    assert_eq!(check(&log).code, 0);
}
