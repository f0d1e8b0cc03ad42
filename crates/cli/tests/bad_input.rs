//! Bad input never crashes `dsh` and never leaves a call unpaired: a bad line takes its step
//! and is recorded as one call answered `TOOL_INPUT_ERROR` (and named in one clear line on
//! stderr), bad calls get their error result, and the exit code says which kind of trouble it
//! was (documented in `--help`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{check, dsh, example, log_events, replay, run, sample_workspace, transcript};
use serde_json::Value;

const READ_README: &str = r#"{"role":"assistant","tool_calls":[{"id":"ok_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"README.md\"}"}}]}"#;

/// The `tool/call` + `tool/result` pair a bad transcript line is recorded as: the call named
/// `""` with the line's text as its arguments, the result `TOOL_INPUT_ERROR` naming the line.
/// Returns the result's message.
fn bad_line_pair(events: &[Value], line: usize, step: u64, text: &str) -> String {
    let id = format!("dsh_line_{line}");
    let pair: Vec<&Value> = events
        .iter()
        .filter(|e| e["data"]["callId"] == id.as_str())
        .collect();
    assert_eq!(pair.len(), 2, "{id}: {pair:?}");
    let (call, result) = (pair[0], pair[1]);
    assert_eq!(call["type"], "tool/call");
    assert_eq!(call["step"], step, "{id} takes its own step");
    assert_eq!(call["data"]["name"], "");
    assert_eq!(call["data"]["arguments"], text, "{id}: the raw line");
    assert_eq!(call["data"]["agent"], "main");
    assert_eq!(call["data"]["parent"], Value::Null);
    assert_eq!(result["type"], "tool/result");
    assert_eq!(result["step"], step);
    assert_eq!(result["seq"], call["seq"].as_u64().unwrap() + 1);
    assert_eq!(result["sourceEventSeqs"], serde_json::json!([call["seq"]]));
    assert_eq!(result["surfaceOp"], "append");
    assert_eq!(result["data"]["error"]["code"], "TOOL_INPUT_ERROR");
    let message = result["data"]["error"]["message"].as_str().unwrap();
    assert_eq!(result["data"]["message"][0]["text"], message);
    assert!(
        message.starts_with(&format!("transcript line {line} could not be run: ")),
        "{message}"
    );
    message.to_string()
}

#[test]
fn bad_lines_are_recorded_as_input_errors_and_bad_calls_get_their_error_results() {
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
        format!(
            "dsh: {name}:1: not JSON: expected ident at column 2; recorded in step 1 as call `dsh_line_1` with TOOL_INPUT_ERROR\n"
        ),
        format!(
            "dsh: {name}:2: expected an assistant message, found role `user`; recorded in step 2 as call `dsh_line_2` with TOOL_INPUT_ERROR\n"
        ),
        format!("dsh: {name}:3: the assistant message has no tool calls; nothing to run"),
        format!("dsh: {name}:7: tool call 2 repeats the id `dup` of an earlier call"),
        format!("dsh: {name}:7: tool call 3 has no id; the log calls it `dsh_"),
        format!(
            "dsh: {name}:8: `tool_calls` must be an array; recorded in step 6 as call `dsh_line_8` with TOOL_INPUT_ERROR\n"
        ),
        "3 bad line(s) recorded as TOOL_INPUT_ERROR".to_string(),
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
        .filter(|id| id.starts_with("dsh_") && !id.starts_with("dsh_line_"))
        .collect();
    assert_eq!(renamed, ["dsh_5_1", "dsh_5_2"], "{}", ran.stdout);
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

    // Each bad line is one call with its result, in its own step; the message with no tool
    // calls records nothing and takes no step.
    let events = log_events(&log);
    let first = bad_line_pair(&events, 1, 1, "this is not json");
    assert!(
        first.ends_with("not JSON: expected ident at column 2"),
        "{first}"
    );
    let second = bad_line_pair(&events, 2, 2, r#"{"role":"user","content":"hello"}"#);
    assert!(
        second.ends_with("expected an assistant message, found role `user`"),
        "{second}"
    );
    let eighth = bad_line_pair(
        &events,
        8,
        6,
        r#"{"role":"assistant","tool_calls":"read_file"}"#,
    );
    assert!(
        eighth.ends_with("`tool_calls` must be an array"),
        "{eighth}"
    );
    let steps: std::collections::BTreeSet<u64> =
        events.iter().map(|e| e["step"].as_u64().unwrap()).collect();
    assert_eq!(
        steps,
        (1..=7).collect(),
        "seven steps: nine lines less a blank and a talk"
    );
    let ok = events
        .iter()
        .find(|e| e["type"] == "tool/call" && e["data"]["callId"] == "ok_1")
        .unwrap();
    assert_eq!(ok["step"], 7);

    // What the model sees for a bad line, printed in the format of the line before it.
    assert_eq!(
        ran.tool_content("dsh_line_1"),
        "TOOL_INPUT_ERROR: transcript line 1 could not be run: not JSON: expected ident at column 2"
    );
    let bad_call = messages
        .iter()
        .find(|m| m["role"] == "assistant" && m["tool_calls"][0]["id"] == "dsh_line_2")
        .unwrap();
    assert_eq!(bad_call["tool_calls"][0]["function"]["name"], "");
    assert_eq!(
        bad_call["tool_calls"][0]["function"]["arguments"],
        r#"{"role":"user","content":"hello"}"#
    );
    assert!(
        ran.tool_content("dsh_line_8")
            .starts_with(&format!("TOOL_INPUT_ERROR: {eighth}"))
    );

    assert_eq!(check(&log).code, 0, "every call is paired");
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
}

#[test]
fn a_bad_line_prints_in_the_format_of_the_line_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = transcript(
        dir.path(),
        "t.jsonl",
        &[
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read_file","input":{"path":"README.md"}}]}"#,
            r#"{"role":"assistant","content":[{"type":"tool_use""#,
        ],
    );
    let ran = run(&t, &ws, &log, &[]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let messages = ran.messages();
    assert_eq!(messages.len(), 4, "{}", ran.stdout);
    assert_eq!(
        messages[2],
        serde_json::json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "dsh_line_2", "name": "", "input": r#"{"role":"assistant","content":[{"type":"tool_use""#}
        ]})
    );
    let result = &messages[3]["content"][0];
    assert_eq!(result["tool_use_id"], "dsh_line_2");
    assert_eq!(result["is_error"], true);
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(
            "TOOL_INPUT_ERROR: transcript line 2 could not be run: not JSON: EOF while parsing"
        ),
        "{text}"
    );
    assert_eq!(check(&log).code, 0);
    assert_eq!(replay(&log, "anthropic").stdout, ran.stdout);
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
fn a_transcript_of_only_bad_lines_runs_no_tool_records_each_line_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let ws = sample_workspace(dir.path());
    let log = dir.path().join("session.jsonl");
    let t = dir.path().join("t.jsonl");
    std::fs::write(&t, b"\xff\xfe not utf-8\n[1,2]\n").unwrap();
    let ran = run(&t, &ws, &log, &[]);
    assert_eq!(ran.code, 1);
    assert!(
        ran.stderr.contains(
            ":1: not UTF-8 text (invalid utf-8 sequence of 1 bytes from index 0); recorded in step 1"
        ),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains(
            ":2: expected a JSON object (an assistant message), found an array; recorded in step 2"
        ),
        "{}",
        ran.stderr
    );
    assert_eq!(
        ran.stderr.lines().count(),
        3,
        "one line each, and the summary: {}",
        ran.stderr
    );

    let events = log_events(&log);
    assert_eq!(events.len(), 4, "a call and its result per line");
    let utf8 = bad_line_pair(&events, 1, 1, "\u{fffd}\u{fffd} not utf-8");
    assert!(utf8.contains("not UTF-8 text"), "{utf8}");
    let array = bad_line_pair(&events, 2, 2, "[1,2]");
    assert!(array.ends_with("found an array"), "{array}");

    // Printed as OpenAI messages (no line before them had a format).
    assert_eq!(ran.messages().len(), 4);
    assert_eq!(
        ran.tool_content("dsh_line_2"),
        format!("TOOL_INPUT_ERROR: {array}")
    );
    assert_eq!(check(&log).code, 0, "every call is paired");
    assert_eq!(replay(&log, "openai").stdout, ran.stdout);
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
fn a_log_that_is_a_directory_is_an_io_failure_not_a_violation() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_log = dir.path().join("logs");
    std::fs::create_dir(&not_a_log).unwrap();
    let checked = check(&not_a_log);
    assert_eq!(checked.code, 3, "{}", checked.stderr);
    assert!(
        checked.stderr.contains("the log cannot be read"),
        "{}",
        checked.stderr
    );
    assert!(
        !checked.stderr.contains("check failed"),
        "{}",
        checked.stderr
    );
    assert_eq!(checked.stderr.lines().count(), 1, "{}", checked.stderr);
    assert_eq!(replay(&not_a_log, "openai").code, 3);
    let recovered = dsh(&["recover".as_ref(), not_a_log.as_os_str()]);
    assert_eq!(recovered.code, 3, "{}", recovered.stderr);
    assert!(not_a_log.is_dir());
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
    assert!(!bad.stderr.contains("recover"), "{}", bad.stderr);

    std::fs::write(&log, format!("{call}\n")).unwrap();
    let open = check(&log);
    assert_eq!(open.code, 1, "a call without its result");
    assert_eq!(open.stderr.lines().count(), 1);
    assert!(
        open.stderr.contains(
            "check failed: the log needs recovery (what a crash leaves, not a broken invariant): 1 call(s) left open without a result (`c1`)"
        ),
        "{}",
        open.stderr
    );
    assert!(open.stderr.contains("`dsh recover "), "{}", open.stderr);

    // Every tool/call carries `parent` (null or a string); a line without it is not an event.
    let orphan = call.replace(r#","parent":null"#, "");
    std::fs::write(&log, format!("{orphan}\n{}\n", result(2))).unwrap();
    let unparented = check(&log);
    assert_eq!(unparented.code, 1);
    assert!(
        unparented
            .stderr
            .contains("check failed: line 1 is not a whole session event")
            && unparented.stderr.contains("missing field `parent`"),
        "{}",
        unparented.stderr
    );
}

#[test]
fn help_documents_the_exit_codes() {
    for args in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["check", "--help"],
        vec!["recover", "--help"],
        vec!["replay", "--help"],
    ] {
        let help = dsh(&args);
        assert_eq!(help.code, 0);
        for code in ["0  success", "1  `run`", "2  usage", "3  I/O"] {
            assert!(help.stdout.contains(code), "{args:?} lacks {code:?}");
        }
    }
    let top = dsh(&["--help"]).stdout;
    assert!(top.contains("recover"), "{top}");
    let run_help = dsh(&["run", "--help"]).stdout;
    assert!(
        run_help.contains("answered `TOOL_INPUT_ERROR` naming the line and why"),
        "{run_help}"
    );
}
