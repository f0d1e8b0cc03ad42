//! A step renders into exactly the messages each format expects back: results in call order,
//! errors marked the way the format marks them, and deferred context after the results.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dsh_core::transcript::{Transcript, TranscriptCall, TranscriptResult, TranscriptStep};
use dsh_core::{
    Arguments, ContentBlock, DeferredMessage, ErrorCode, FrozenResult, ToolCall, ToolError,
};
use dsh_formats::{Format, parse_message, render_step, render_transcript, step_from_run};
use serde_json::json;

fn sample_step() -> TranscriptStep {
    TranscriptStep {
        step: 3,
        calls: vec![
            TranscriptCall {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: json!({"path": "a.txt"}),
                arguments_text: None,
            },
            TranscriptCall {
                call_id: "c2".into(),
                name: "grep".into(),
                arguments: json!("{\"pattern\": oops"),
                arguments_text: None,
            },
            TranscriptCall {
                call_id: "c3".into(),
                name: "shot".into(),
                arguments: json!({}),
                arguments_text: None,
            },
        ],
        results: vec![
            TranscriptResult {
                call_id: "c1".into(),
                content: vec![ContentBlock::text("hello"), ContentBlock::text("world")],
                error: None,
            },
            TranscriptResult {
                call_id: "c2".into(),
                content: vec![ContentBlock::text("arguments are not JSON")],
                error: Some(ToolError::new(
                    ErrorCode::ToolInputError,
                    "arguments are not JSON",
                )),
            },
            TranscriptResult {
                call_id: "c3".into(),
                content: vec![ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "iVBO".into(),
                }],
                error: None,
            },
        ],
        user_messages: vec!["remember the tests".into()],
    }
}

#[test]
fn openai_renders_assistant_then_one_tool_message_per_result_then_user_messages() {
    let got = render_step(Format::OpenAi, &sample_step());
    let want = vec![
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\": oops"}},
            {"id": "c3", "type": "function", "function": {"name": "shot", "arguments": "{}"}},
        ]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "hello\nworld"}),
        json!({"role": "tool", "tool_call_id": "c2", "content": "TOOL_INPUT_ERROR: arguments are not JSON"}),
        json!({"role": "tool", "tool_call_id": "c3", "content": "[image omitted: image/png]"}),
        json!({"role": "user", "content": "remember the tests"}),
    ];
    assert_eq!(got, want);
}

#[test]
fn anthropic_renders_assistant_then_one_user_message_of_results_and_text() {
    let got = render_step(Format::Anthropic, &sample_step());
    let want = vec![
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.txt"}},
            {"type": "tool_use", "id": "c2", "name": "grep", "input": "{\"pattern\": oops"},
            {"type": "tool_use", "id": "c3", "name": "shot", "input": {}},
        ]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": [
                {"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]},
            {"type": "tool_result", "tool_use_id": "c2", "is_error": true, "content": [
                {"type": "text", "text": "TOOL_INPUT_ERROR: arguments are not JSON"}]},
            {"type": "tool_result", "tool_use_id": "c3", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]},
            {"type": "text", "text": "remember the tests"},
        ]}),
    ];
    assert_eq!(got, want);
}

#[test]
fn an_error_without_text_still_names_its_code() {
    let step = TranscriptStep {
        step: 1,
        calls: vec![TranscriptCall {
            call_id: "c".into(),
            name: "t".into(),
            arguments: json!({}),
            arguments_text: None,
        }],
        results: vec![TranscriptResult {
            call_id: "c".into(),
            content: vec![],
            error: Some(ToolError::new(ErrorCode::Aborted, "")),
        }],
        user_messages: vec![],
    };
    assert_eq!(render_step(Format::OpenAi, &step)[1]["content"], "ABORTED");
    assert_eq!(
        render_step(Format::Anthropic, &step)[1]["content"][0]["content"],
        json!([{"type": "text", "text": "ABORTED"}])
    );
}

#[test]
fn rendered_calls_parse_back_to_the_same_calls() {
    let step = sample_step();
    for format in [Format::OpenAi, Format::Anthropic] {
        let assistant = &render_step(format, &step)[0];
        let parsed = parse_message(assistant).unwrap();
        assert_eq!(parsed.format, format);
        let again: Vec<Arguments> = parsed.calls.iter().map(|c| c.arguments.clone()).collect();
        let logged: Vec<_> = again.iter().map(Arguments::to_logged).collect();
        let original: Vec<_> = step.calls.iter().map(|c| c.arguments.clone()).collect();
        assert_eq!(logged, original, "{format}");
    }
}

#[test]
fn a_live_step_renders_like_its_logged_form() {
    // What the pipeline returns for a step, and the same step as a replay rebuilds it.
    let calls = vec![
        ToolCall::new("c1", "read_file", json!({"path": "a.txt"})),
        ToolCall {
            call_id: "c1".into(),
            name: "grep".into(),
            arguments: Arguments::parse("{bad"),
        },
    ];
    let results = vec![
        FrozenResult::freeze(
            "c1",
            "read_file",
            vec![ContentBlock::text("A")],
            None,
            None,
            Some(json!("A")),
        ),
        FrozenResult::error(
            "dsh_2_1",
            "grep",
            ToolError::new(ErrorCode::ToolInputError, "not JSON"),
        ),
    ];
    let deferred = vec![DeferredMessage {
        content: "ctx".into(),
        origin: "c1".into(),
    }];
    let live = step_from_run(2, &calls, &results, &deferred);
    let replayed = TranscriptStep {
        step: 2,
        calls: vec![
            TranscriptCall {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: json!({"path": "a.txt"}),
                arguments_text: None,
            },
            TranscriptCall {
                call_id: "dsh_2_1".into(),
                name: "grep".into(),
                arguments: json!("{bad"),
                arguments_text: None,
            },
        ],
        results: vec![
            TranscriptResult {
                call_id: "c1".into(),
                content: vec![ContentBlock::text("A")],
                error: None,
            },
            TranscriptResult {
                call_id: "dsh_2_1".into(),
                content: vec![ContentBlock::text("not JSON")],
                error: Some(ToolError::new(ErrorCode::ToolInputError, "not JSON")),
            },
        ],
        user_messages: vec!["ctx".into()],
    };
    assert_eq!(live, replayed);
    let transcript = Transcript { steps: vec![live] };
    assert_eq!(render_transcript(Format::Anthropic, &transcript).len(), 2);
    assert_eq!(render_transcript(Format::OpenAi, &transcript).len(), 4);
}
