//! What a result and its deferred context may hold is bounded, checked and told: content is
//! cut to `max_content_bytes` after `finalize_content` too, every block keeps its share, the
//! note says truthfully what was cut, `additionalContexts` are capped with a note, and image
//! blocks are checked before they reach the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use async_trait::async_trait;
use common::*;
use dsh::core::{
    ContentBlock, EventBody, FrozenResult, HookError, Hooks, PostExecuteContext,
    PostExecuteHandler, PostExecuteOutcome, ToolContext, ToolDefinition, ToolFailure, ToolRegistry,
};
use dsh::scheduler::{HarnessBuilder, SchedulerConfig, StepRequest};
use serde_json::{Value, json};
use std::sync::Arc;

/// Its value is a list of content blocks, presented as they are. `huge_finalize` makes
/// `finalize_content` return 5 MiB of text.
struct Shaped {
    name: &'static str,
}

#[async_trait]
impl ToolDefinition for Shaped {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "returns the blocks it is given"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<Value, ToolFailure> {
        Ok(input["blocks"].clone())
    }
    fn present(&self, value: &Value) -> Vec<ContentBlock> {
        serde_json::from_value(value.clone()).unwrap_or_default()
    }
    fn finalize_content(&self, content: Vec<ContentBlock>) -> Vec<ContentBlock> {
        if self.name == "huge_finalize" {
            vec![ContentBlock::text("z".repeat(5 * 1024 * 1024))]
        } else {
            content
        }
    }
}

/// Adds 300 KB of context to every result.
struct Chatty;

#[async_trait]
impl PostExecuteHandler for Chatty {
    fn name(&self) -> &str {
        "chatty"
    }
    async fn post_execute(
        &self,
        _c: &PostExecuteContext<'_>,
    ) -> Result<PostExecuteOutcome, HookError> {
        Ok(PostExecuteOutcome::accept().with_context("c".repeat(300_000)))
    }
}

const CAP: usize = 256 * 1024;

async fn run(
    tool: &str,
    blocks: Value,
    hooks: Hooks,
) -> (FrozenResult, Vec<dsh::core::SessionEvent>) {
    let registry = Arc::new(ToolRegistry::new());
    registry.register(Shaped { name: "shaped" }).unwrap();
    registry
        .register(Shaped {
            name: "huge_finalize",
        })
        .unwrap();
    let (harness, session, log) = open_with(
        HarnessBuilder::new(registry).hooks(hooks),
        SchedulerConfig::default(),
    )
    .await;
    let out = session
        .run_step(StepRequest::new(vec![call(
            "c1",
            tool,
            json!({"blocks": blocks}),
        )]))
        .await
        .unwrap();
    let events = log.snapshot().await.unwrap();
    session.shutdown().await;
    harness.shutdown().await;
    (out.results[0].clone(), events)
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn image(media_type: &str, data: &str) -> Value {
    json!({"type": "image", "media_type": media_type, "data": data})
}

fn bytes(content: &[ContentBlock]) -> usize {
    content.iter().map(ContentBlock::len_bytes).sum()
}

#[tokio::test]
async fn what_finalize_content_returns_is_bounded_too() {
    let (result, _) = run("huge_finalize", json!([text("small")]), Hooks::new()).await;
    assert!(
        bytes(result.content()) <= CAP + 1024,
        "{} bytes kept",
        bytes(result.content())
    );
    assert!(result.text().contains("truncated"), "the cut is told");
    assert_eq!(
        result.meta().unwrap()["originalBytes"],
        json!(5 * 1024 * 1024)
    );
}

#[tokio::test]
async fn an_oversized_first_block_leaves_the_later_blocks_their_share() {
    let (result, _) = run(
        "shaped",
        json!([text(&"a".repeat(400_000)), text("the tail that matters")]),
        Hooks::new(),
    )
    .await;
    assert!(bytes(result.content()) <= CAP + 1024);
    assert!(
        result.text().contains("the tail that matters"),
        "the later block was dropped"
    );
}

#[tokio::test]
async fn an_image_too_large_to_keep_is_named_and_the_text_after_it_kept() {
    let big = "A".repeat(400_000);
    let (result, _) = run(
        "shaped",
        json!([image("image/png", &big), text("caption after the image")]),
        Hooks::new(),
    )
    .await;
    let text = result.text();
    assert!(text.contains("caption after the image"), "{text}");
    assert!(text.contains("image"), "the omitted image is named: {text}");
    assert!(
        !text.contains(&format!("only the first {CAP} are shown")),
        "the note claims bytes were shown that were not: {text}"
    );
    assert!(
        result
            .content()
            .iter()
            .all(|b| matches!(b, ContentBlock::Text { .. }))
    );
}

#[tokio::test]
async fn deferred_context_is_capped_with_a_note() {
    let mut hooks = Hooks::new();
    hooks.post_execute(Chatty);
    let (_, events) = run("shaped", json!([text("ok")]), hooks).await;
    let contexts: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::UserMessage(m) => Some(m.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(contexts.len(), 1);
    assert!(
        contexts[0].len() < 300_000 / 2,
        "{} bytes of context kept",
        contexts[0].len()
    );
    assert!(contexts[0].contains("truncated"), "the cut is told");
}

#[tokio::test]
async fn image_blocks_are_checked_before_they_reach_the_log() {
    let (result, events) = run(
        "shaped",
        json!([
            image("", "AAAA"),
            image("text/html", "PGI+aGk8L2I+"),
            image("image/png", "not base64 at all!"),
            image("image/png", "iVBORw0KGgo="),
        ]),
        Hooks::new(),
    )
    .await;
    let content = result.content();
    assert_eq!(content.len(), 4, "{content:?}");
    for (i, why) in [(0, "media type"), (1, "text/html"), (2, "base64")] {
        let note = content[i]
            .as_text()
            .unwrap_or_else(|| panic!("block {i} kept: {content:?}"));
        assert!(note.contains(why), "block {i}: {note}");
    }
    assert_eq!(
        content[3],
        ContentBlock::Image {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into()
        }
    );
    let logged = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ToolResult { data, .. } => Some(data.message.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(logged, content);
}
