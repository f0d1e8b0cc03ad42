//! Assistant messages in either format become the tool calls the pipeline runs, with every
//! problem inside a call kept as a call (so it gets its own error result) rather than dropped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_core::{Arguments, ToolCall};
use dsh_formats::{Format, FormatError, parse_line};
use serde_json::json;

#[test]
fn openai_arguments_string_is_parsed_into_json() {
    let m = parse_line(
        r#"{"role":"assistant","content":null,"tool_calls":[
            {"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/lib.rs\"}"}},
            {"id":"call_2","type":"function","function":{"name":"grep","arguments":"{\"pattern\":\"fn \"}"}}]}"#,
    )
    .unwrap();
    assert_eq!(m.format, Format::OpenAi);
    assert_eq!(
        m.calls,
        vec![
            ToolCall::new("call_1", "read_file", json!({"path": "src/lib.rs"})),
            ToolCall::new("call_2", "grep", json!({"pattern": "fn "})),
        ]
    );
}

#[test]
fn deepseek_messages_read_as_openai() {
    // DeepSeek's chat API answers in the OpenAI shape, with an `index` per call.
    let m = parse_line(
        r#"{"role":"assistant","content":"","reasoning_content":"thinking","tool_calls":[
            {"index":0,"id":"call_0_abc","type":"function","function":{"name":"list_dir","arguments":"{}"}}]}"#,
    )
    .unwrap();
    assert_eq!(m.format, Format::OpenAi);
    assert_eq!(
        m.calls,
        vec![ToolCall::new("call_0_abc", "list_dir", json!({}))]
    );
}

#[test]
fn anthropic_tool_use_blocks_become_calls_and_other_blocks_are_ignored() {
    let m = parse_line(
        r#"{"role":"assistant","content":[
            {"type":"text","text":"Let me look."},
            {"type":"tool_use","id":"toolu_1","name":"glob","input":{"pattern":"**/*.rs"}},
            {"type":"tool_use","id":"toolu_2","name":"read_file","input":{"path":"a.txt"}}]}"#,
    )
    .unwrap();
    assert_eq!(m.format, Format::Anthropic);
    assert_eq!(
        m.calls,
        vec![
            ToolCall::new("toolu_1", "glob", json!({"pattern": "**/*.rs"})),
            ToolCall::new("toolu_2", "read_file", json!({"path": "a.txt"})),
        ]
    );
}

#[test]
fn the_format_is_detected_per_line() {
    let lines = [
        r#"{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"t","arguments":"{}"}}]}"#,
        r#"{"role":"assistant","content":[{"type":"tool_use","id":"b","name":"t","input":{}}]}"#,
    ];
    let formats: Vec<Format> = lines
        .iter()
        .map(|l| parse_line(l).unwrap().format)
        .collect();
    assert_eq!(formats, vec![Format::OpenAi, Format::Anthropic]);
}

#[test]
fn arguments_that_are_not_json_are_kept_raw() {
    let m = parse_line(
        r#"{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"grep","arguments":"{\"pattern\": oops"}}]}"#,
    )
    .unwrap();
    match &m.calls[0].arguments {
        Arguments::Malformed { raw, error } => {
            assert_eq!(raw, "{\"pattern\": oops");
            assert!(!error.is_empty());
        }
        other => panic!("expected malformed arguments, got {other:?}"),
    }
    assert_eq!(
        m.calls[0].arguments.to_logged(),
        json!("{\"pattern\": oops")
    );
}

#[test]
fn missing_ids_names_and_arguments_still_give_a_call() {
    let m = parse_line(
        r#"{"role":"assistant","tool_calls":[{"type":"function","function":{"arguments":"{}"}},{"id":"c2","function":{"name":"list_dir"}}]}"#,
    )
    .unwrap();
    assert_eq!(m.calls.len(), 2);
    assert_eq!(
        (m.calls[0].call_id.as_str(), m.calls[0].name.as_str()),
        ("", "")
    );
    assert_eq!(m.calls[1].arguments, Arguments::Json(json!({})));

    let m = parse_line(r#"{"role":"assistant","content":[{"type":"tool_use","name":"list_dir"}]}"#)
        .unwrap();
    assert_eq!(m.calls, vec![ToolCall::new("", "list_dir", json!({}))]);
}

#[test]
fn openai_arguments_sent_as_an_object_are_accepted() {
    let m = parse_line(
        r#"{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"read_file","arguments":{"path":"a"}}}]}"#,
    )
    .unwrap();
    assert_eq!(
        m.calls,
        vec![ToolCall::new("c1", "read_file", json!({"path": "a"}))]
    );
}

#[test]
fn a_message_that_only_talks_has_no_calls() {
    assert!(
        parse_line(r#"{"role":"assistant","content":"All done."}"#)
            .unwrap()
            .calls
            .is_empty()
    );
    assert!(
        parse_line(r#"{"role":"assistant","content":[{"type":"text","text":"All done."}]}"#)
            .unwrap()
            .calls
            .is_empty()
    );
    assert!(
        parse_line(r#"{"role":"assistant","content":null,"tool_calls":[]}"#)
            .unwrap()
            .calls
            .is_empty()
    );
}

#[test]
fn lines_that_are_not_assistant_messages_are_errors_with_a_reason() {
    assert!(matches!(
        parse_line("not json at all"),
        Err(FormatError::NotJson(_))
    ));
    assert!(matches!(
        parse_line("42"),
        Err(FormatError::NotAnObject("a number"))
    ));
    assert_eq!(
        parse_line(r#"{"role":"tool","tool_call_id":"c1","content":"x"}"#),
        Err(FormatError::NotAssistant("tool".into()))
    );
    assert_eq!(parse_line(r#"{"id":"x"}"#), Err(FormatError::Unrecognized));
    let err = parse_line(r#"{"role":"assistant","tool_calls":"read_file"}"#).unwrap_err();
    assert_eq!(err.to_string(), "`tool_calls` must be an array");
}

#[test]
fn a_null_tool_calls_does_not_hide_anthropic_tool_use_blocks() {
    // Some clients put `"tool_calls": null` on every message, Anthropic ones included.
    let m = parse_line(
        r#"{"role":"assistant","tool_calls":null,"content":[
            {"type":"text","text":"Reading it."},
            {"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"README.md"}}]}"#,
    )
    .unwrap();
    assert_eq!(m.format, Format::Anthropic);
    assert_eq!(
        m.calls,
        vec![ToolCall::new(
            "toolu_1",
            "read_file",
            json!({"path": "README.md"})
        )]
    );

    // Without tool_use blocks, a null `tool_calls` stays an OpenAI message without calls.
    for line in [
        r#"{"role":"assistant","tool_calls":null,"content":"All done."}"#,
        r#"{"role":"assistant","tool_calls":null,"content":null}"#,
        r#"{"role":"assistant","tool_calls":null,"content":[{"type":"text","text":"done"}]}"#,
    ] {
        let m = parse_line(line).unwrap();
        assert_eq!((m.format, m.calls.len()), (Format::OpenAi, 0), "{line}");
    }

    // A `tool_calls` with a value is OpenAI's even beside tool_use-looking content.
    let m = parse_line(
        r#"{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"glob","arguments":"{}"}}],
            "content":[{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}]}"#,
    )
    .unwrap();
    assert_eq!(m.format, Format::OpenAi);
    assert_eq!(m.calls, vec![ToolCall::new("c1", "glob", json!({}))]);
}
