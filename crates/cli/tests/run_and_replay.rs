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
    // It ends by naming the page of its session, written next to the log.
    let page = demo_dir.join("session.html");
    let last = ran.stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.ends_with(&page.display().to_string()),
        "{}",
        ran.stderr
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("call_08"));
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

#[test]
fn a_transcript_mixing_formats_prints_each_step_in_its_own_lines_format() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = common::transcript(
        dir.path(),
        "mixed.jsonl",
        &[
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"README.md\"}"}}]}"#,
            r#"{"role":"assistant","content":[{"type":"text","text":"Now the changelog."},{"type":"tool_use","id":"toolu_b","name":"read_file","input":{"path":"CHANGELOG.md"}}]}"#,
            // Anthropic with a null `tool_calls`, as some clients send it.
            r#"{"role":"assistant","tool_calls":null,"content":[{"type":"tool_use","id":"toolu_c","name":"list_dir","input":{"path":"src"}}]}"#,
            r#"{"role":"assistant","content":"","tool_calls":[{"id":"call_d","type":"function","function":{"name":"glob","arguments":"{\"pattern\":\"src/*.rs\"}"}}]}"#,
        ],
    );
    let ran = run(&t, &ws, &log, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let m = ran.messages();
    assert_eq!(m.len(), 8, "two messages a step: {}", ran.stdout);

    // Step 1, OpenAI: tool_calls with string arguments, then a `tool` message.
    assert_eq!(m[0]["tool_calls"][0]["id"], "call_a");
    assert_eq!(
        m[0]["tool_calls"][0]["function"]["arguments"],
        r#"{"path":"README.md"}"#
    );
    assert_eq!(m[1]["role"], "tool");
    assert_eq!(m[1]["tool_call_id"], "call_a");
    assert!(m[1]["content"].as_str().unwrap().contains("tiny-calc"));
    // Steps 2 and 3, Anthropic: tool_use blocks, then one user message of tool_result blocks.
    for (i, id) in [(2, "toolu_b"), (4, "toolu_c")] {
        assert!(m[i].get("tool_calls").is_none(), "{}", m[i]);
        assert_eq!(m[i]["content"][0]["type"], "tool_use");
        assert_eq!(m[i]["content"][0]["id"], id);
        assert!(m[i]["content"][0]["input"].is_object());
        assert_eq!(m[i + 1]["role"], "user");
        assert_eq!(m[i + 1]["content"][0]["type"], "tool_result");
        assert_eq!(m[i + 1]["content"][0]["tool_use_id"], id);
    }
    assert!(
        m[3]["content"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Changelog")
    );
    assert!(
        m[5]["content"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("lib.rs")
    );
    // Step 4, OpenAI again.
    assert_eq!(m[6]["tool_calls"][0]["id"], "call_d");
    assert_eq!(m[7]["role"], "tool");
    assert_eq!(m[7]["tool_call_id"], "call_d");

    // Replay renders every step in the one format it is given: each format's steps come back
    // exactly as run printed them, the others in the chosen shape.
    let run_lines: Vec<&str> = ran.stdout.lines().collect();
    let openai = replay(&log, "openai");
    let anthropic = replay(&log, "anthropic");
    let openai_lines: Vec<&str> = openai.stdout.lines().collect();
    let anthropic_lines: Vec<&str> = anthropic.stdout.lines().collect();
    assert_eq!(openai_lines.len(), 8);
    assert_eq!(anthropic_lines.len(), 8);
    for i in [0, 1, 6, 7] {
        assert_eq!(openai_lines[i], run_lines[i], "openai step line {i}");
        assert_ne!(anthropic_lines[i], run_lines[i], "line {i}");
    }
    for i in [2, 3, 4, 5] {
        assert_eq!(anthropic_lines[i], run_lines[i], "anthropic step line {i}");
        assert_ne!(openai_lines[i], run_lines[i], "line {i}");
    }
    assert_eq!(check(&log).code, 0);

    // And replay's help says so.
    let help = dsh(&["replay", "--help"]);
    assert!(
        help.stdout
            .contains("Every step is rendered in the one format"),
        "{}",
        help.stdout
    );
    assert!(help.stdout.contains("default: openai"), "{}", help.stdout);
}
