//! A log cut short by a crash is recovered by the next `dsh run`: the torn line goes, the call
//! it left open is closed with `ABORTED`, the checker passes, and steps continue after the
//! last one in the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, example, log_events, replay, run, sample_workspace, transcript};

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
