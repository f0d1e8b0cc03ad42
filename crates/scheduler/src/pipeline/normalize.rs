//! The registry's outer normalization: a lossless snapshot of the candidate.
//!
//! A snapshot that cannot be taken (a value or meta nested too deep to round-trip through
//! JSON, meta that is not an object) becomes a `PIPELINE_ERROR` result itself. Content over
//! the size cap is cut on a character boundary, with a note for the model and the original
//! size in meta, so a huge output is a bounded result rather than a failure. A failure's
//! `error.message` is cut to [`MAX_ERROR_MESSAGE_BYTES`] (or the content cap, if smaller): it
//! is recorded beside the content, which already carries the failure's text for the model,
//! so a tool that fails with megabytes of text costs one bounded log line, not two copies.

use super::PipelineConfig;
use super::candidate::Candidate;
use dsh_core::content::truncate_at_char_boundary;
use dsh_core::{ContentBlock, ErrorCode};
use serde_json::Value;

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

fn cap_content(content: &mut Vec<ContentBlock>, max: usize) -> Option<usize> {
    let total: usize = content.iter().map(ContentBlock::len_bytes).sum();
    if total <= max {
        return None;
    }
    let mut budget = max;
    let mut kept = Vec::new();
    for block in content.drain(..) {
        let len = block.len_bytes();
        if len <= budget {
            budget -= len;
            kept.push(block);
            continue;
        }
        if let ContentBlock::Text { text } = &block {
            kept.push(ContentBlock::text(truncate_at_char_boundary(text, budget)));
        }
        break;
    }
    kept.push(ContentBlock::text(format!(
        "\n[output truncated: {total} bytes in all, only the first {max} are shown]"
    )));
    *content = kept;
    Some(total)
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
    if let Some(total) = cap_content(&mut candidate.content, config.max_content_bytes) {
        let meta = candidate.meta.get_or_insert_with(Default::default);
        meta.insert("truncated".into(), Value::Bool(true));
        meta.insert("originalBytes".into(), Value::from(total));
    }
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
