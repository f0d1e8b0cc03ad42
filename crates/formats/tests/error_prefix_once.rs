//! An error result is shown with its code in front once: a message that already starts with
//! its code (as code mode's report of refused sub-calls does) does not read "DENIED: DENIED:".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use dsh_core::transcript::TranscriptResult;
use dsh_core::{ContentBlock, ErrorCode, ToolError};
use dsh_formats::{Format, render_result_content};

fn result(text: &str) -> TranscriptResult {
    TranscriptResult {
        call_id: "c".into(),
        content: vec![ContentBlock::text(text)],
        error: Some(ToolError::new(ErrorCode::Denied, text)),
    }
}

#[test]
fn the_code_is_not_put_in_front_twice() {
    let already = result("DENIED: 2 sub-call(s) of this script were refused by policy");
    assert_eq!(
        render_result_content(Format::OpenAi, &already),
        "DENIED: 2 sub-call(s) of this script were refused by policy"
    );
    assert_eq!(
        render_result_content(Format::Anthropic, &already)[0]["text"],
        "DENIED: 2 sub-call(s) of this script were refused by policy"
    );
    let plain = result("outside the workspace");
    assert_eq!(
        render_result_content(Format::OpenAi, &plain),
        "DENIED: outside the workspace"
    );
    assert_eq!(
        render_result_content(Format::Anthropic, &plain)[0]["text"],
        "DENIED: outside the workspace"
    );
}
