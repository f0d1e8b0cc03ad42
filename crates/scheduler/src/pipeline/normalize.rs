//! The registry's outer normalization: a lossless snapshot of the candidate.
//!
//! A snapshot that cannot be taken (a value or meta nested too deep to round-trip through
//! JSON, meta that is not an object) becomes a `PIPELINE_ERROR` result itself. Content over
//! the size cap is cut on a character boundary, with a note for the model and the original
//! size in meta, so a huge output is a bounded result rather than a failure.

use super::PipelineConfig;
use super::candidate::Candidate;
use dsh_core::content::truncate_at_char_boundary;
use dsh_core::{ContentBlock, ErrorCode};
use serde_json::Value;

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
}
