//! `dsh run` on each bundled example edits a fresh workspace, and `dsh replay` of its log
//! prints exactly what `run` printed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, dsh, dsh_with, example, replay, run, sample_workspace};
use serde_json::Value;

#[test]
fn replay_reproduces_what_run_printed_for_each_example() {
    for format in ["openai", "anthropic"] {
        let dir = tempfile::tempdir().unwrap();
        let ws = sample_workspace(dir.path());
        let log = dir.path().join("session.jsonl");
        let ran = run(&example(format), &ws, &log, &["--approve", "deny"]);
        assert_eq!(ran.code, 0, "{format}: {}", ran.stderr);
        // Six steps, each an assistant message and its results.
        let assistants = ran
            .messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count();
        assert_eq!(assistants, 6, "{format}");

        let replayed = replay(&log, format);
        assert_eq!(replayed.code, 0, "{format}: {}", replayed.stderr);
        assert_eq!(replayed.stdout, ran.stdout, "{format}");
        assert_eq!(check(&log).code, 0, "{format}");
    }
}

#[test]
fn the_openai_example_reads_greps_edits_patches_and_is_denied_outside() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let ran = run(&common::example("openai"), &ws, &log, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);

    assert!(
        ran.tool_content("call_03").contains("a * b"),
        "the read shows the file"
    );
    assert!(
        ran.tool_content("call_05").contains("src/main.rs:2:"),
        "grep finds TODOs"
    );
    assert!(
        ran.tool_content("call_06").contains("pub fn mul"),
        "the parallel grep"
    );
    assert!(ran.tool_content("call_07").starts_with("Edited"));
    let denied = ran.tool_content("call_08");
    assert!(denied.starts_with("DENIED: "), "{denied}");
    assert!(ran.tool_content("call_09").contains("CHANGELOG.md"));

    let lib = std::fs::read_to_string(ws.join("src/lib.rs")).unwrap();
    assert!(lib.contains("a.saturating_mul(b)") && !lib.contains("TODO"));
    let changelog = std::fs::read_to_string(ws.join("CHANGELOG.md")).unwrap();
    assert!(changelog.contains("## Unreleased"));
    assert!(ws.join("NOTES.md").exists());
    assert!(
        !dir.path().join("outside.txt").exists(),
        "the write outside was stopped"
    );
}

#[test]
fn the_anthropic_example_answers_in_one_user_message_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let ran = run(&example("anthropic"), &ws, &log, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let messages = ran.messages();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["assistant", "user"].repeat(6));
    let denied = messages
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .find(|b| b["tool_use_id"] == "toolu_08")
        .unwrap();
    assert_eq!(denied["is_error"], Value::Bool(true));
    assert!(
        denied["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("DENIED: ")
    );
    // Successful results carry no is_error at all.
    let read = messages[1]["content"][1].clone();
    assert_eq!(read["type"], "tool_result");
    assert!(read.get("is_error").is_none());
}

#[test]
fn demo_runs_on_a_fresh_copy_and_its_log_replays_to_the_same_output() {
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let ran = dsh(&["demo".as_ref(), "--dir".as_ref(), demo_dir.as_os_str()]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let log = demo_dir.join("session.jsonl");
    assert!(
        ran.stderr.contains(&log.display().to_string()),
        "{}",
        ran.stderr
    );
    assert!(ran.tool_content("call_08").starts_with("DENIED: "));
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
    assert_eq!(check(&log).code, 0);

    // A second demo into the same, now used, directory is refused rather than mixed in.
    let again = dsh(&["demo".as_ref(), "--dir".as_ref(), demo_dir.as_os_str()]);
    assert_eq!(again.code, 2, "{}", again.stderr);
}

#[test]
fn demo_without_a_dir_makes_a_fresh_temporary_one() {
    let tmp = tempfile::tempdir().unwrap();
    let ran = dsh_with(&["demo", "--format", "anthropic"], |c| {
        c.env("TMPDIR", tmp.path());
    });
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let made: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(made.len(), 1);
    assert!(
        made[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("dsh-demo-")
    );
    let log = made[0].join("session.jsonl");
    assert_eq!(replay(&log, "anthropic").stdout, ran.stdout);
}

#[test]
fn pipeline_options_change_how_it_runs_not_what_the_model_sees() {
    let dir = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for (i, extra) in [
        vec!["--max-parallel", "1", "--durability", "always"],
        vec![
            "--max-parallel",
            "4",
            "--durability",
            "none",
            "--timeout-ms",
            "60000",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let sub = dir.path().join(i.to_string());
        let ws = sample_workspace(&sub);
        let log = sub.join("session.jsonl");
        let ran = run(&example("openai"), &ws, &log, &extra);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        assert_eq!(replay(&log, "openai").stdout, ran.stdout);
        outputs.push(ran.stdout);
    }
    assert_eq!(outputs[0], outputs[1]);
}
