//! The registry's outer normalization: a lossless snapshot of the candidate.
//!
//! A snapshot that cannot be taken (a value or meta nested too deep to round-trip through
//! JSON, meta that is not an object) becomes a `PIPELINE_ERROR` result itself.
//!
//! Content is bounded ([`bound`], again after `finalize_content`):
//!
//! - **Images are checked.** An image block must have one of the media types models take
//!   ([`IMAGE_MEDIA_TYPES`]) and data that is valid standard base64; one that is not is
//!   replaced by a text block saying why (the result itself stands), so no tool (MCP ones
//!   included) puts such a block in the log or a replay.
//! - **Size.** Content over the cap is cut, every block keeping its share: the largest
//!   per-block allowance that fits is found, each text block is cut to it on a character
//!   boundary, and an image larger than it is left out with a note naming it (an image is not
//!   cut). A last note says how many bytes there were and how many are shown, and meta keeps
//!   the original size, so a huge output is a bounded result rather than a failure.
//!
//! A failure's
//! `error.message` is cut to [`MAX_ERROR_MESSAGE_BYTES`] (or the content cap, if smaller): it
//! is recorded beside the content, which already carries the failure's text for the model,
//! so a tool that fails with megabytes of text costs one bounded log line, not two copies.

use super::PipelineConfig;
use super::candidate::Candidate;
use dsh_core::content::truncate_at_char_boundary;
use dsh_core::{ContentBlock, ErrorCode};
use serde_json::{Map, Value};

/// The image media types an image block may have.
pub(crate) const IMAGE_MEDIA_TYPES: [&str; 4] =
    ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// The most of a failure's `error.message` that is kept; the content keeps up to the content
/// cap of the same text.
pub(crate) const MAX_ERROR_MESSAGE_BYTES: usize = 2048;

/// How deep a JSON value nests (a scalar is 0), without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// True when `data` is non-empty, valid standard base64 (with its padding).
fn is_base64(data: &str) -> bool {
    let bytes = data.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return false;
    }
    let body = bytes.len()
        - bytes
            .iter()
            .rev()
            .take(2)
            .take_while(|b| **b == b'=')
            .count();
    bytes[..body]
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
}

/// Why an image block may not be kept, if it may not.
fn image_problem(media_type: &str, data: &str) -> Option<String> {
    if media_type.is_empty() {
        return Some("it has no media type".to_string());
    }
    if !IMAGE_MEDIA_TYPES.contains(&media_type) {
        let shown = truncate_at_char_boundary(media_type, 64);
        return Some(format!(
            "its media type `{shown}` is not one of {}",
            IMAGE_MEDIA_TYPES.join(", ")
        ));
    }
    if !is_base64(data) {
        return Some("its data is not valid base64".to_string());
    }
    None
}

/// Replaces every image block that may not be kept by a note saying why.
fn check_images(content: &mut [ContentBlock]) {
    for block in content.iter_mut() {
        if let ContentBlock::Image { media_type, data } = block
            && let Some(why) = image_problem(media_type, data)
        {
            tracing::warn!(reason = %why, "an image block was removed from a result");
            *block = ContentBlock::text(format!("[image removed: {why}]"));
        }
    }
}

/// What a block of `len` bytes keeps under a per-block allowance of `limit`: a text block its
/// head, an image all or nothing.
fn allowance(block: &ContentBlock, limit: usize) -> usize {
    let len = block.len_bytes();
    match block {
        ContentBlock::Text { .. } => len.min(limit),
        ContentBlock::Image { .. } if len <= limit => len,
        ContentBlock::Image { .. } => 0,
    }
}

fn cap_content(content: &mut Vec<ContentBlock>, max: usize) -> Option<usize> {
    let total: usize = content.iter().map(ContentBlock::len_bytes).sum();
    if total <= max {
        return None;
    }
    // The largest per-block allowance whose kept bytes fit in `max`.
    let fits = |limit: usize| content.iter().map(|b| allowance(b, limit)).sum::<usize>() <= max;
    let (mut low, mut high) = (
        0,
        content
            .iter()
            .map(ContentBlock::len_bytes)
            .max()
            .unwrap_or(0),
    );
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if fits(mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let limit = low;
    let mut shown = 0;
    let kept: Vec<ContentBlock> = content
        .drain(..)
        .map(|block| match block {
            ContentBlock::Text { text } if text.len() > limit => {
                let cut = truncate_at_char_boundary(&text, limit).to_string();
                shown += cut.len();
                ContentBlock::text(cut)
            }
            ContentBlock::Image { media_type, data } if media_type.len() + data.len() > limit => {
                ContentBlock::text(format!(
                    "[image omitted: {media_type}, {} bytes, larger than the size limit]",
                    media_type.len() + data.len()
                ))
            }
            block => {
                shown += block.len_bytes();
                block
            }
        })
        .collect();
    *content = kept;
    content.push(ContentBlock::text(format!(
        "\n[output truncated: {total} bytes in all, {shown} shown (each block cut to at most {limit} bytes)]"
    )));
    Some(total)
}

/// What `finalize_content` may add to content the snapshot already cut (its own marks and
/// the cut's note) before it is cut again.
pub(super) const FINALIZE_SLACK: usize = 1024;

/// Checks the images of `content` and cuts it to `max`, telling meta what was cut (the
/// largest original size seen, when it is cut twice).
fn bound_to(max: usize, content: &mut Vec<ContentBlock>, meta: &mut Option<Map<String, Value>>) {
    check_images(content);
    if let Some(total) = cap_content(content, max) {
        let meta = meta.get_or_insert_with(Default::default);
        meta.insert("truncated".into(), Value::Bool(true));
        let before = meta
            .get("originalBytes")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        meta.insert(
            "originalBytes".into(),
            Value::from((total as u64).max(before)),
        );
    }
}

/// [`bound_to`] the content cap: what the snapshot does.
fn bound(
    config: &PipelineConfig,
    content: &mut Vec<ContentBlock>,
    meta: &mut Option<Map<String, Value>>,
) {
    bound_to(config.max_content_bytes, content, meta);
}

/// The same for what `finalize_content` returned: left alone while it is within
/// [`FINALIZE_SLACK`] of the cap (a finalize that adds a mark to content the snapshot cut does
/// not have it cut again), cut back to the cap otherwise.
pub(super) fn bound_finalized(
    config: &PipelineConfig,
    content: &mut Vec<ContentBlock>,
    meta: &mut Option<Map<String, Value>>,
) {
    let total: usize = content.iter().map(ContentBlock::len_bytes).sum();
    let max = if total <= config.max_content_bytes.saturating_add(FINALIZE_SLACK) {
        usize::MAX
    } else {
        config.max_content_bytes
    };
    bound_to(max, content, meta);
}

/// Cuts a call's `additionalContexts` to [`PipelineConfig::max_context_bytes`] together, in
/// order, with a note in the last one kept saying what was cut.
pub(super) fn bound_contexts(config: &PipelineConfig, contexts: &mut Vec<String>) {
    let max = config.max_context_bytes;
    let total: usize = contexts.iter().map(String::len).sum();
    if total <= max {
        return;
    }
    let mut budget = max;
    let mut kept = Vec::new();
    for context in contexts.drain(..) {
        if budget == 0 {
            break;
        }
        let cut = truncate_at_char_boundary(&context, budget).to_string();
        budget -= cut.len();
        kept.push(cut);
    }
    let note = format!(
        "\n[context truncated: {total} bytes of additionalContexts in all, only the first {} are kept]",
        max - budget
    );
    match kept.last_mut() {
        Some(last) => last.push_str(&note),
        None => kept.push(note.trim_start().to_string()),
    }
    tracing::warn!(total, max, "additionalContexts over the limit were cut");
    *contexts = kept;
}

pub(super) fn snapshot(config: &PipelineConfig, mut candidate: Candidate) -> Candidate {
    let limit = config.max_json_depth;
    if let Some(v) = &candidate.value {
        let d = depth(v);
        if d > limit {
            let mut failed = Candidate::failed(
                ErrorCode::PipelineError,
                format!(
                    "the result could not be snapshotted: its value nests {d} levels deep (the limit is {limit})"
                ),
            );
            failed.contexts = candidate.contexts;
            return failed;
        }
    }
    if let Some(meta) = &candidate.meta {
        let d = depth(&Value::Object(meta.clone()));
        if d > limit {
            let mut failed = Candidate::failed(
                ErrorCode::PipelineError,
                format!(
                    "the result could not be snapshotted: its meta nests {d} levels deep (the limit is {limit})"
                ),
            );
            failed.contexts = candidate.contexts;
            return failed;
        }
    }
    bound(config, &mut candidate.content, &mut candidate.meta);
    let message_cap = MAX_ERROR_MESSAGE_BYTES.min(config.max_content_bytes);
    if let Some(error) = &mut candidate.error
        && error.message.len() > message_cap
    {
        let total = error.message.len();
        let mut cut = truncate_at_char_boundary(&error.message, message_cap).to_string();
        cut.push_str(&format!(" [message truncated: {total} bytes in all]"));
        error.message = cut;
        let meta = candidate.meta.get_or_insert_with(Default::default);
        meta.insert("truncated".into(), Value::Bool(true));
        meta.insert("originalMessageBytes".into(), Value::from(total));
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_levels() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!([1])), 1);
        assert_eq!(depth(&json!({"a": [{"b": 1}]})), 3);
    }

    #[test]
    fn huge_content_is_cut_with_a_note() {
        let config = PipelineConfig {
            max_content_bytes: 10,
            ..PipelineConfig::default()
        };
        let c = Candidate::success(json!(null), vec![ContentBlock::text("é".repeat(20))]);
        let s = snapshot(&config, c);
        assert!(s.content[0].as_text().unwrap().len() <= 10);
        assert!(s.content[1].as_text().unwrap().contains("truncated"));
        assert_eq!(s.meta.unwrap()["originalBytes"], json!(40));
    }

    #[test]
    fn a_huge_failure_message_is_cut_too() {
        let config = PipelineConfig {
            max_content_bytes: 10,
            ..PipelineConfig::default()
        };
        let c = Candidate::failed(ErrorCode::ToolError, "é".repeat(20));
        let s = snapshot(&config, c);
        let message = &s.error.as_ref().unwrap().message;
        assert!(message.starts_with("ééééé ["), "{message}");
        assert!(message.contains("40 bytes in all"), "{message}");
        assert_eq!(s.meta.unwrap()["originalMessageBytes"], json!(40));
    }
}
