//! `dsh run`'s `run_code` runs each script in a worker process (the `dsh` binary itself): a
//! script stuck inside a built-in ends at its deadline and leaves no process behind; a small
//! transcript cannot write a huge log through sub-calls; and a model id of the form dsh gives
//! sub-calls is renamed, so the log's ids stay unique within each step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::*;
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

fn openai_calls(calls: &[(&str, &str, serde_json::Value)]) -> String {
    let calls: Vec<_> = calls
        .iter()
        .map(|(id, tool, args)| {
            json!({"id": id, "type": "function",
                "function": {"name": tool, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "tool_calls": calls}).to_string()
}

/// Live processes started as script workers by a `dsh` run whose environment holds `tag`.
fn dsh_workers(tag: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let args = split(std::fs::read(e.path().join("cmdline")).ok()?);
            let env = split(std::fs::read(e.path().join("environ")).ok()?);
            (args.get(1).is_some_and(|a| a == "--dsh-code-mode-worker")
                && env.iter().any(|v| v == tag))
            .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

#[test]
fn a_script_stuck_in_a_built_in_ends_at_its_deadline_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let stuck = "Array(100000).fill(3n ** 60000n).forEach(String); return 1;";
    let t = transcript(
        dir.path(),
        "stuck.jsonl",
        &[
            &openai_calls(&[("c1", "run_code", json!({"code": stuck}))]),
            &openai_calls(&[("c2", "run_code", json!({"code": "return 6 * 7"}))]),
        ],
    );
    // Marks this run's processes: other tests run `dsh` at the same time.
    let tag = format!("DSH_TEST_RUN={}", dir.path().display());
    let start = Instant::now();
    let args: Vec<std::ffi::OsString> = vec![
        "run".into(),
        t.into(),
        "--workspace".into(),
        ws.into(),
        "--log".into(),
        log.clone().into(),
        "--timeout-ms".into(),
        "1000".into(),
    ];
    let out = dsh_with(&args, |cmd| {
        cmd.env("DSH_TEST_RUN", dir.path());
    });
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let stuck = out.tool_content("c1");
    assert!(stuck.starts_with("TOOL_TIMEOUT"), "{stuck}");
    assert!(stuck.contains("its process was killed"), "{stuck}");
    assert!(
        out.tool_content("c2").contains("42"),
        "the next script runs"
    );
    assert!(dsh_workers(&tag).is_empty(), "{:?}", dsh_workers(&tag));
    assert_eq!(check(&log).code, 0);
}

#[test]
fn a_small_transcript_cannot_write_a_huge_log_through_sub_calls() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    // The issue's shapes: a loop of sub-calls with big invalid arguments (30 MB of them),
    // and 200 sub-calls at once (20 MB).
    let looped = r#"
        const big = "x".repeat(1000000);
        for (let i = 0; i < 30; i++) { try { await tools.read_file({ path: big, nope: i }); } catch (e) {} }
        return "done";"#;
    let parallel = r#"
        const big = "y".repeat(100000);
        await Promise.allSettled(Array.from({ length: 200 }, (_, i) => tools.read_file({ path: big + i })));
        return "done";"#;
    let t = transcript(
        dir.path(),
        "flood.jsonl",
        &[
            &openai_calls(&[("c1", "run_code", json!({"code": looped}))]),
            &openai_calls(&[("c2", "run_code", json!({"code": parallel}))]),
        ],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for id in ["c1", "c2"] {
        let text = out.tool_content(id);
        assert!(text.contains("log budget"), "{id}: {text}");
    }
    let bytes = std::fs::metadata(&log).unwrap().len();
    // Two calls, each at most its 8 MiB budget and a little more.
    assert!(bytes < 20 << 20, "the log is {bytes} bytes");
    let checked = check(&log);
    assert_eq!(checked.code, 0, "{}", checked.stderr);
    assert_eq!(
        replay(&log, "openai").stdout,
        out.stdout,
        "replay equals run"
    );
}

#[test]
fn a_model_id_of_the_sub_call_form_is_renamed_and_the_logs_ids_stay_unique() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let code = r#"return (await tools.read_file({ path: "README.md" })).text.length > 0;"#;
    let t = transcript(
        dir.path(),
        "ids.jsonl",
        &[&openai_calls(&[
            ("r", "run_code", json!({"code": code})),
            ("r.sub1", "read_file", json!({"path": "CHANGELOG.md"})),
        ])],
    );
    let out = run(&t, &ws, &log, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("has the id `r.sub1`, of the form dsh gives sub-calls"),
        "{}",
        out.stderr
    );
    assert_eq!(check(&log).code, 0);
    let mut by_step: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for e in log_events(&log) {
        if e["type"] == "tool/call" || e["type"] == "tool/code-dispatch" {
            by_step
                .entry(e["step"].as_u64().unwrap())
                .or_default()
                .push(e["data"]["callId"].as_str().unwrap().to_string());
        }
    }
    for (step, ids) in by_step {
        let unique: HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "step {step}: {ids:?}");
        assert!(
            ids.contains(&"r.sub1".to_string()),
            "the sub-call's id: {ids:?}"
        );
    }
    assert!(out.tool_content("dsh_1_1").contains("Changelog"));
}
