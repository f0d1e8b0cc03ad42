//! Bad input never crashes `dsh` and never leaves a call unpaired: bad lines are skipped with
//! one clear line on stderr, bad calls get their error result, and the exit code says which
//! kind of trouble it was (documented in `--help`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, dsh, example, replay, run, sample_workspace, transcript};

const READ_README: &str = r#"{"role":"assistant","tool_calls":[{"id":"ok_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"README.md\"}"}}]}"#;

#[test]
fn bad_lines_are_skipped_and_bad_calls_get_their_error_results() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            "this is not json",
            r#"{"role":"user","content":"hello"}"#,
            r#"{"role":"assistant","content":"All done, no tools needed."}"#,
            "",
            r#"{"role":"assistant","tool_calls":[{"id":"bad_args","type":"function","function":{"name":"read_file","arguments":"{\"path\": README.md"}}]}"#,
            r#"{"role":"assistant","tool_calls":[{"id":"nope","type":"function","function":{"name":"rm_rf","arguments":"{}"}}]}"#,
            r#"{"role":"assistant","tool_calls":[
                {"id":"dup","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"README.md\"}"}},
                {"id":"dup","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"CHANGELOG.md\"}"}},
                {"type":"function","function":{"name":"list_dir","arguments":"{\"path\":\".\"}"}}]}"#
                .replace('\n', " ")
                .as_str(),
            r#"{"role":"assistant","tool_calls":"read_file"}"#,
            READ_README,
        ],
    );
    let ran = run(&t, &ws, &log, &[]);
    assert_eq!(ran.code, 1, "some lines were bad: {}", ran.stderr);

    let name = t.display().to_string();
    for expected in [
        format!("dsh: {name}:1: skipped: not JSON"),
        format!("dsh: {name}:2: skipped: expected an assistant message, found role `user`"),
        format!("dsh: {name}:3: the assistant message has no tool calls; nothing to run"),
        format!("dsh: {name}:7: tool call 2 repeats the id `dup` of an earlier call"),
        format!("dsh: {name}:7: tool call 3 has no id; the log calls it `dsh_"),
        format!("dsh: {name}:8: skipped: `tool_calls` must be an array"),
    ] {
        assert!(
            ran.stderr.contains(&expected),
            "missing {expected:?} in\n{}",
            ran.stderr
        );
    }
    for line in ran.stderr.lines() {
        assert!(
            line.starts_with("dsh: "),
            "every error is one `dsh: ` line: {line:?}"
        );
    }

    let bad_args = ran.tool_content("bad_args");
    assert!(bad_args.starts_with("TOOL_INPUT_ERROR: "), "{bad_args}");
    assert!(ran.tool_content("nope").starts_with("UNKNOWN_TOOL: "));
    assert!(ran.tool_content("dup").contains("tiny-calc"));
    // The repeated and the missing id were renamed, so each result still pairs with one call.
    let messages = ran.messages();
    let renamed: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .filter(|id| id.starts_with("dsh_"))
        .collect();
    assert_eq!(renamed.len(), 2, "{}", ran.stdout);
    assert!(ran.tool_content(renamed[0]).contains("Changelog"));
    assert!(
        ran.tool_content("ok_1").contains("tiny-calc"),
        "lines after bad ones still run"
    );

    // The malformed arguments are logged as the raw text the model wrote, and echoed back so.
    let assistant = messages
        .iter()
        .find(|m| m["role"] == "assistant" && m["tool_calls"][0]["id"] == "bad_args")
        .unwrap();
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        "{\"path\": README.md"
    );

    assert_eq!(check(&log).code, 0, "every call is paired");
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
}

#[test]
fn anthropic_input_that_is_not_an_object_is_a_tool_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read_file","input":"README.md"},{"type":"tool_use","id":"t2","name":"unknown_tool","input":{}}]}"#,
        ],
    );
    let ran = run(&t, &ws, &log, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let results = &ran.messages()[1]["content"];
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("TOOL_INPUT_ERROR: ")
    );
    assert!(
        results[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("UNKNOWN_TOOL: ")
    );
    assert_eq!(replay(&log, "anthropic").stdout, ran.stdout);
}

#[test]
fn a_transcript_of_only_bad_lines_runs_nothing_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = dir.path().join("t.jsonl");
    std::fs::write(&t, b"\xff\xfe not utf-8\n[1,2]\n").unwrap();
    let ran = run(&t, &ws, &log, &[]);
    assert_eq!(ran.code, 1);
    assert!(ran.stdout.is_empty());
    assert!(
        ran.stderr
            .contains(":1: skipped: the line is not UTF-8 text"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains(":2: skipped: expected a JSON object"),
        "{}",
        ran.stderr
    );
    assert_eq!(check(&log).code, 0, "an empty log is whole");
}

#[test]
fn the_transcript_can_come_from_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(dir.path(), "t.jsonl", &[READ_README]);
    let ran = common::dsh_with(
        &[
            "run".as_ref(),
            "-".as_ref(),
            "--workspace".as_ref(),
            ws.as_os_str(),
            "--log".as_ref(),
            log.as_os_str(),
        ],
        |c| {
            c.stdin(std::fs::File::open(&t).unwrap());
        },
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.tool_content("ok_1").contains("tiny-calc"));
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = example("openai");
    assert_eq!(dsh(&["run"]).code, 2);
    assert_eq!(dsh(&["frobnicate"]).code, 2);
    assert_eq!(run(&t, &ws, &log, &["--durability", "sometimes"]).code, 2);
    assert_eq!(run(&t, &ws, &log, &["--max-parallel", "0"]).code, 2);
    assert_eq!(run(&t, &ws, &log, &["--approve", "maybe"]).code, 2);
    assert_eq!(dsh(&["replay", "x.jsonl", "--format", "xml"]).code, 2);

    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "allow = \"read_file\"\n").unwrap();
    let ran = run(&t, &ws, &log, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.starts_with("dsh: policy file "),
        "{}",
        ran.stderr
    );
    assert!(!log.exists(), "nothing ran");

    let file = ws.join("README.md");
    let ran = run(&t, &file, &log, &[]);
    assert_eq!(ran.code, 2, "a workspace that is a file: {}", ran.stderr);
}

#[test]
fn io_failures_exit_3_and_leave_no_log_behind() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");

    let ran = run(&dir.path().join("missing.jsonl"), &ws, &log, &[]);
    assert_eq!(ran.code, 3);
    assert!(
        ran.stderr.starts_with("dsh: cannot read the transcript "),
        "{}",
        ran.stderr
    );
    assert!(!log.exists());

    let ran = run(
        &example("openai"),
        &dir.path().join("no-such-dir"),
        &log,
        &[],
    );
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(ran.stderr.contains("cannot open the workspace"));

    let ran = run(
        &example("openai"),
        &ws,
        &dir.path().join("no/such/dir/log.jsonl"),
        &[],
    );
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("session log I/O failed"),
        "{}",
        ran.stderr
    );

    let policy = dir.path().join("missing.toml");
    let ran = run(
        &example("openai"),
        &ws,
        &log,
        &["--policy", policy.to_str().unwrap()],
    );
    assert_eq!(ran.code, 3);

    assert_eq!(replay(&dir.path().join("missing.jsonl"), "openai").code, 3);
    assert_eq!(check(&dir.path().join("missing.jsonl")).code, 3);
}

#[test]
fn a_corrupt_log_is_refused_by_run_and_replay_and_named_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    assert_eq!(run(&example("openai"), &ws, &log, &[]).code, 0);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{garbage in the middle}";
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();

    let checked = check(&log);
    assert_eq!(checked.code, 1);
    assert!(
        checked.stderr.contains("check failed: line 3"),
        "{}",
        checked.stderr
    );
    assert_eq!(replay(&log, "openai").code, 3);
    let ran = run(&example("openai"), &ws, &log, &[]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    assert!(ran.stderr.contains("corrupt"), "{}", ran.stderr);
}

#[test]
fn check_names_the_first_violated_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("session.jsonl");
    let call = r#"{"seq":1,"step":1,"type":"tool/call","data":{"callId":"c1","name":"read_file","arguments":{},"agent":"main","parent":null}}"#;
    let result = |seq: u64| {
        format!(
            r#"{{"seq":{seq},"step":1,"type":"tool/result","data":{{"callId":"c1","message":[]}},"surfaceOp":"append","sourceEventSeqs":[1]}}"#
        )
    };
    std::fs::write(&log, format!("{call}\n{}\n", result(2))).unwrap();
    let ok = check(&log);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("every invariant holds"));

    std::fs::write(&log, format!("{call}\n{}\n{}\n", result(2), result(3))).unwrap();
    let bad = check(&log);
    assert_eq!(bad.code, 1);
    assert_eq!(bad.stderr.lines().count(), 1);
    assert!(
        bad.stderr.contains("seq 3: a second tool/result"),
        "{}",
        bad.stderr
    );

    std::fs::write(&log, format!("{call}\n")).unwrap();
    let open = check(&log);
    assert_eq!(open.code, 1, "a call without its result");
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["check", "--help"],
    ] {
        let help = dsh(&args);
        assert_eq!(help.code, 0);
        for code in ["0  success", "1  `run`", "2  usage", "3  I/O"] {
            assert!(help.stdout.contains(code), "{args:?} lacks {code:?}");
        }
    }
}
